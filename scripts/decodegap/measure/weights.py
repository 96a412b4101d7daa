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


class PackedWeights:
    """A quantized weight path: every linear layer of the decoder blocks is replaced by a module that
    holds the weight packed in the kernel's own storage format and multiplies through that kernel;
    the embeddings and the output projection stay bf16, as int4 checkpoints keep them. A path is one
    subclass: `pack` (a bf16 nn.Linear -> the packed module, whose `weight_buffers` name the tensors
    it stores) and `dense` (the float32 weight the packed module stands for: the check's reference)."""

    name = ""
    package = "torch"  # the distribution that ships the kernel (the environment record names its version)
    module = ""  # what must import for the kernel to exist ("" : torch itself)
    install = ""  # how the package is had, said with a missing-package reason
    min_capability: tuple[int, int] | None = None
    cuda_only = False  # no CPU kernel: on a CPU the check says so instead of running

    def unavailable(self, device: str) -> str | None:
        """Why the kernel cannot run here (package, device, compute capability), or None."""
        import importlib

        if self.module:
            try:
                importlib.import_module(self.module)
            except Exception as exc:  # noqa: BLE001 - ImportError, or an import that fails inside (a missing .so)
                text = str(exc).strip().splitlines()
                why = f"package not installed: `import {self.module}` fails ({type(exc).__name__}: {text[0][:200] if text else ''})"
                return why + (f"; {self.install}" if self.install else "")
        if self.cuda_only and device != "cuda":
            return f"{self.name} has a CUDA kernel only; device {device}"
        if device == "cuda" and self.min_capability:
            import torch

            cap = torch.cuda.get_device_capability()
            if cap < self.min_capability:
                lo = self.min_capability
                return f"no kernel for sm_{cap[0]}{cap[1]}: {self.name} needs compute capability {lo[0]}.{lo[1]} or newer"
        return None

    def pack(self, linear):
        raise NotImplementedError

    def dense(self, packed, linear):
        """The float32 weight the packed module stands for (from its stored tensors where the package
        can unpack them, else by quantizing the original `linear` the same way)."""
        raise NotImplementedError

    def check(self, device: str) -> str | None:
        """A batch-1 GEMV through the packed kernel at a card's shape (4096 -> 1024) against float32
        on the weights the packed layer stands for: None when it runs and agrees, else why not."""
        import torch

        why = self.unavailable(device)
        if why:
            return why
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        g = torch.Generator(device="cpu").manual_seed(0)
        lin = torch.nn.Linear(4096, 1024, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(1024, 4096, generator=g) / 64)
        x = torch.randn(1, 4096, generator=g)
        mod = self.pack(lin.to(device, dtype))
        with torch.no_grad():
            got = mod(x.to(device, dtype)).detach().float().cpu()
            reference = x @ self.dense(mod, lin).float().cpu().T
        err = float((got - reference).abs().max())
        tol = 0.1
        return None if torch.isfinite(got).all() and err <= tol else f"wrong result: max abs error {err:.3g} against float32 (tolerance {tol})"

    def prepare(self, model):
        import torch

        model.decodegap_dense_params = sum(p.numel() for p in model.parameters())  # the card's parameters, before packing
        for layer in model.model.layers:
            for name, child in list(layer.named_modules()):
                if isinstance(child, torch.nn.Linear):
                    parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                    setattr(parent, name.rsplit(".", 1)[-1], self.pack(child))
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
        return model

    def stored(self, model) -> StoredWeights:
        return stored_bytes(model)


class Int4TinygemmWeights(PackedWeights):
    """PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, "tinygemm": the kernel
    torchao's int4 weight-only path and gpt-fast use), 4 bits in groups of 128 input columns with a
    bf16 scale and zero point per group."""

    name = "int4-tinygemm"
    group_size = 128
    inner_k_tiles = 8  # the CUDA kernel's tile of K (2, 4 or 8); gpt-fast's and torchao's default
    min_capability = (8, 0)  # bf16 tensor cores

    def pack(self, linear):
        tiles = self.inner_k_tiles if linear.weight.device.type == "cuda" else 2  # the CPU kernel packs in 2s
        return _int4_linear_class()(linear, self.group_size, tiles)

    def dense(self, packed, linear):
        q, sz = quantize_int4_groups(linear.weight.detach().float().cpu(), self.group_size)
        return dequantize_int4_groups(q, sz, self.group_size)


class BnbNf4Weights(PackedWeights):
    """bitsandbytes' 4-bit NormalFloat (NF4): 4 bits per weight in blocks of 64 with one float32
    absmax per block, no double quantization (transformers' BitsAndBytesConfig defaults, as a
    `load_in_4bit` model has them); one token goes through bitsandbytes' gemv_4bit kernel."""

    name = "bnb-nf4"
    package = "bitsandbytes"
    module = "bitsandbytes"
    install = "pip install bitsandbytes (prebuilt CUDA libraries per CUDA version)"
    blocksize = 64
    double_quant = False

    def pack(self, linear):
        return _bnb_linear_class()(linear, self.blocksize, self.double_quant)

    def dense(self, packed, linear):
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(packed.weight_packed, packed.quant_state)


def _bnb_linear_class():
    import torch

    class _Nf4Linear(torch.nn.Module):
        def __init__(self, linear, blocksize: int, double_quant: bool):
            import bitsandbytes as bnb

            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            packed, qs = bnb.functional.quantize_4bit(linear.weight.detach(), blocksize=blocksize, quant_type="nf4",
                                                      compress_statistics=double_quant, quant_storage=torch.uint8)
            self.quant_state = qs
            self.register_buffer("weight_packed", packed)
            # The quant state's tensors are stored weights too: absmax per block, the NF4 code table,
            # and with double quantization the absmax's own absmax and code.
            self.register_buffer("absmax", qs.absmax)
            self.register_buffer("code", qs.code)
            names = ["weight_packed", "absmax", "code"]
            if qs.nested:
                self.register_buffer("absmax2", qs.state2.absmax)
                self.register_buffer("code2", qs.state2.code)
                names += ["absmax2", "code2"]
            self.weight_buffers = tuple(names)
            self.bias = linear.bias

        def forward(self, x):
            import bitsandbytes as bnb

            return bnb.matmul_4bit(x, self.weight_packed.t(), quant_state=self.quant_state, bias=self.bias)

    return _Nf4Linear


PATHS = {"bf16": Bf16Weights(), "int4-tinygemm": Int4TinygemmWeights(), "bnb-nf4": BnbNf4Weights()}


def get_weight_path(name: str):
    if name not in PATHS:
        raise ConfigError(f"unknown quant '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
