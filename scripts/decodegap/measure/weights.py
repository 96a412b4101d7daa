"""Weight paths: how the weights are stored on the device and how many bytes a step streams.

W counts the bytes of the weights as stored (a quantized layout with its scales included), each
storage once: tied input/output embeddings are one tensor. A quantized path plugs in here as one
more class that packs the bf16 weights into its kernel's format and reports its stored bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from decodegap.core.errors import ConfigError


@dataclass(frozen=True)
class StoredWeights:
    weight_bytes: int
    weight_bytes_no_embedding: int
    param_count: int  # parameters of the dense model, as built


class Bf16Weights:
    name = "bf16"
    package = "torch"  # the distribution that ships the kernel (the environment record names its version)

    def check(self, device: str) -> str | None:
        """A batch-1 GEMV through this path's kernel at a card's shape against float32: None when it
        runs and agrees, else why not (the environment stage's functional check)."""
        import torch

        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        g = torch.Generator(device="cpu").manual_seed(0)
        x, w = torch.randn(1, 4096, generator=g), torch.randn(4096, 4096, generator=g) / 64
        got = (x.to(device, dtype) @ w.to(device, dtype).T).float().cpu()
        err = float((got - x @ w.T).abs().max())
        tol = 0.1 if dtype != torch.float32 else 1e-3
        return None if torch.isfinite(got).all() and err <= tol else f"wrong result: max abs error {err:.3g} against float32 (tolerance {tol})"

    def prepare(self, model):
        return model  # cards already build in bf16

    def stored(self, model) -> StoredWeights:
        seen: set[int] = set()
        total_bytes = params = 0
        for p in model.parameters():  # parameters() yields a tied tensor once
            key = p.data_ptr()
            if key in seen:
                continue
            seen.add(key)
            total_bytes += p.numel() * p.element_size()
            params += p.numel()
        embed = model.get_input_embeddings().weight
        out = model.get_output_embeddings()
        tied = out is not None and out.weight.data_ptr() == embed.data_ptr()
        # Untied: a step reads one row of the input table, so W without it is the honest floor.
        # Tied: the output projection reads the whole table every step; nothing to subtract.
        embed_bytes = 0 if tied else embed.numel() * embed.element_size()
        return StoredWeights(total_bytes, total_bytes - embed_bytes, params)


def stored_bytes(model) -> StoredWeights:
    """Bytes of the weights as stored: the parameters, and the buffers a packed layer names as its
    weight (`weight_buffers`: a packed int4 weight, its scales and zero points), each storage once.
    Other buffers (rotary frequencies) are not weights. The untied input embedding table is left
    out of the no-embedding count: a step reads one row of it."""
    seen: set[int] = set()
    total_bytes = 0
    packed = [getattr(m, name) for m in model.modules() for name in getattr(m, "weight_buffers", ())]
    for t in list(model.parameters()) + packed:  # parameters() yields a tied tensor once
        key = t.data_ptr()
        if key in seen or t.numel() == 0:
            continue
        seen.add(key)
        total_bytes += t.numel() * t.element_size()
    embed = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == embed.data_ptr()
    embed_bytes = 0 if tied else embed.numel() * embed.element_size()
    params = getattr(model, "decodegap_dense_params", None) or sum(p.numel() for p in model.parameters())
    return StoredWeights(total_bytes, total_bytes - embed_bytes, params)


def quantize_int4_groups(w, group_size: int):
    """Asymmetric 4-bit quantization per group of `group_size` input columns, in the convention of
    PyTorch's int4 matmul (tinygemm, as gpt-fast and torchao use it): w ~ (q - 8) * scale + zero,
    q in 0..15. Returns q (int32, N x K), and scales and zeros (bfloat16, K/group x N x 2).
    Random weights need no calibration: the kernel's time does not depend on the values."""
    import torch

    n, k = w.shape
    if k % group_size:
        raise ValueError(f"in_features {k} is not a multiple of the group size {group_size}")
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = lo + 8 * scale
    q = ((g - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    scales_and_zeros = torch.stack([scale.squeeze(-1), zero.squeeze(-1)], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
    return q, scales_and_zeros


def dequantize_int4_groups(q, scales_and_zeros, group_size: int):
    """The weights q and scales_and_zeros stand for (float32): what the kernel multiplies by."""
    n, k = q.shape
    sz = scales_and_zeros.float().transpose(0, 1)  # N x K/group x 2
    g = q.float().reshape(n, k // group_size, group_size)
    return ((g - 8) * sz[..., :1] + sz[..., 1:]).reshape(n, k)


def _int4_linear_class():
    import torch

    class _Int4Linear(torch.nn.Module):
        def __init__(self, linear, group_size: int, inner_k_tiles: int):
            super().__init__()
            self.in_features, self.out_features, self.group_size = linear.in_features, linear.out_features, group_size
            w = linear.weight.detach()
            q, sz = quantize_int4_groups(w, group_size)
            if w.device.type == "cuda":  # the CUDA op takes two 4-bit values per byte (torch >= 2.5), high nibble first
                q8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
                packed = torch.ops.aten._convert_weight_to_int4pack(q8.to(w.device), inner_k_tiles)
                self._mm = torch.ops.aten._weight_int4pack_mm
            else:
                packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, inner_k_tiles)
                self._mm = torch.ops.aten._weight_int4pack_mm_for_cpu
            self.register_buffer("weight_packed", packed)
            self.register_buffer("scales_and_zeros", sz.to(w.device))
            self.weight_buffers = ("weight_packed", "scales_and_zeros")  # what stored_bytes counts as weights
            self.bias = linear.bias

        def forward(self, x):
            shape = x.shape
            y = self._mm(x.reshape(-1, self.in_features).to(torch.bfloat16), self.weight_packed, self.group_size, self.scales_and_zeros)
            y = y.to(x.dtype).reshape(*shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y

    return _Int4Linear


class Int4TinygemmWeights:
    """PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, "tinygemm": the kernel
    torchao's int4 weight-only path and gpt-fast use): every linear layer of the decoder blocks
    packed to 4 bits in groups of 128 input columns with a bf16 scale and zero point per group;
    the embeddings and the output projection stay bf16, as int4 checkpoints keep them."""

    name = "int4-tinygemm"
    package = "torch"
    group_size = 128
    inner_k_tiles = 8  # the CUDA kernel's tile of K (2, 4 or 8); gpt-fast's and torchao's default

    def unavailable(self, device: str) -> str | None:
        import torch

        if device == "cuda" and torch.cuda.get_device_capability() < (8, 0):
            major, minor = torch.cuda.get_device_capability()
            return f"no kernel for sm_{major}{minor}: PyTorch's int4 matmul needs compute capability 8.0 (bf16 tensor cores)"
        return None

    def check(self, device: str) -> str | None:
        """A batch-1 GEMV through the packed kernel against float32 on the dequantized weights."""
        import torch

        why = self.unavailable(device)
        if why:
            return why
        g = torch.Generator(device="cpu").manual_seed(0)
        lin = torch.nn.Linear(4096, 1024, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(1024, 4096, generator=g) / 64)
        x = torch.randn(1, 4096, generator=g)
        q, sz = quantize_int4_groups(lin.weight.detach(), self.group_size)
        reference = x @ dequantize_int4_groups(q, sz, self.group_size).T
        mod = _int4_linear_class()(lin.to(device, torch.bfloat16 if device == "cuda" else torch.float32), self.group_size,
                                   self.inner_k_tiles if device == "cuda" else 2)
        with torch.no_grad():
            got = mod(x.to(device, torch.bfloat16 if device == "cuda" else torch.float32)).detach().float().cpu()
        err = float((got - reference).abs().max())
        tol = 0.1
        return None if torch.isfinite(got).all() and err <= tol else f"wrong result: max abs error {err:.3g} against float32 (tolerance {tol})"

    def prepare(self, model):
        import torch

        model.decodegap_dense_params = sum(p.numel() for p in model.parameters())  # the card's parameters, before packing
        cls = _int4_linear_class()
        tiles = self.inner_k_tiles if model.device.type == "cuda" else 2  # the CPU kernel packs in 2s
        for layer in model.model.layers:
            for name, child in list(layer.named_modules()):
                if isinstance(child, torch.nn.Linear):
                    parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                    setattr(parent, name.rsplit(".", 1)[-1], cls(child, self.group_size, tiles))
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
        return model

    def stored(self, model) -> StoredWeights:
        return stored_bytes(model)


PATHS = {"bf16": Bf16Weights(), "int4-tinygemm": Int4TinygemmWeights()}


def get_weight_path(name: str):
    if name not in PATHS:
        raise ConfigError(f"unknown quant '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
