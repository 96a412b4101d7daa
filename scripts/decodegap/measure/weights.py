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


# The packed check's tolerance, as a fraction of the reference output's RMS. A wrong layout, a
# wrong zero point or a dropped scale errs by the output's own size (a fraction near 1); a right
# kernel that accumulates split-K partial sums in bf16 errs by about 0.1 of it, and by how much
# depends on the configuration its autotuner picks on a given machine (gemlite failed a fixed 0.1
# absolute bound on one H200 and passed it on four others).
RELATIVE_TOLERANCE = 0.25


def gemv_disagrees(got, reference) -> str | None:
    """None when a kernel's GEMV output agrees with the float32 reference, else why not."""
    import torch

    if not bool(torch.isfinite(got).all()):
        return "wrong result: the output has non-finite values"
    rms = float(reference.pow(2).mean().sqrt())
    err = float((got - reference).abs().max())
    if err > RELATIVE_TOLERANCE * rms:
        return (
            f"wrong result: max abs error {err:.3g} against float32, over {RELATIVE_TOLERANCE} of the "
            f"output's RMS {rms:.3g}"
        )
    return None


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


def module_bytes(module) -> int:
    """Bytes one packed layer stores: its parameters and the buffers it names as weights, each storage once."""
    tensors = {t.data_ptr(): t for t in list(module.parameters()) + [getattr(module, n) for n in getattr(module, "weight_buffers", ())]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


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

    def load(self):
        """Import (and, for a JIT path, compile) the kernel's package; raises when it cannot."""
        import importlib

        if self.module:
            importlib.import_module(self.module)

    def unavailable(self, device: str) -> str | None:
        """Why the kernel cannot run here (device, package, build, compute capability), or None."""
        if self.cuda_only and device != "cuda":  # before load(): a JIT path would try to compile for no GPU
            return f"{self.name} has a CUDA kernel only; device {device}"
        try:
            self.load()
        except Exception as exc:  # noqa: BLE001 - ImportError, or an import or build that fails inside
            lines = str(exc).strip().splitlines()
            what = f"`import {self.module or self.package}` fails ({type(exc).__name__}: {lines[0][:200] if lines else ''})"
            if isinstance(exc, ModuleNotFoundError):
                return f"package not installed: {what}" + (f"; {self.install}" if self.install else "")
            return f"its kernels do not build or load here: {what}"
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
        why = gemv_disagrees(got, reference)
        if why:
            return why
        stored, expected = module_bytes(mod), self.bytes_per_layer(1024, 4096)
        if stored != expected:  # W would be wrong: the format is not what this path says it stores
            return f"stores {stored} bytes for a 1024 x 4096 layer, not the {expected} its format gives"
        return None

    def bytes_per_layer(self, n: int, k: int) -> int:
        """Bytes the path stores for an n x k linear layer, from its format's definition."""
        raise NotImplementedError

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

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (k // self.group_size) * n * 2 * 2  # 4-bit values; a bf16 scale and zero per group and row

    def pack(self, linear):
        tiles = self.inner_k_tiles if linear.weight.device.type == "cuda" else 2  # the CPU kernel packs in 2s
        return _int4_linear_class()(linear, self.group_size, tiles)

    def dense(self, packed, linear):
        q, sz = quantize_int4_groups(linear.weight.detach().float().cpu(), self.group_size)
        return dequantize_int4_groups(q, sz, self.group_size)


class BnbNf4Weights(PackedWeights):
    """bitsandbytes' 4-bit NormalFloat (NF4): 4 bits per weight in blocks of 64 with one float32
    absmax per block, no double quantization (transformers' BitsAndBytesConfig defaults, as a
    `load_in_4bit` model has them); one token goes through `matmul_4bit`, which bitsandbytes 0.50
    runs as its fused 4-bit GEMM kernel (`gemm_4bit`). The NF4 code table is counted with the stored
    weights (64 bytes a layer) though that kernel has the table built in."""

    name = "bnb-nf4"
    package = "bitsandbytes"
    module = "bitsandbytes"
    install = "pip install bitsandbytes (prebuilt CUDA libraries per CUDA version)"
    blocksize = 64
    double_quant = False

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (n * k // self.blocksize) * 4 + 16 * 4  # 4-bit values; a float32 absmax per block; the NF4 table

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


def pack_gptq(w, group_size: int):
    """GPTQ's int4 storage (the v1 "sym" layout AutoGPTQ and GPTQModel checkpoints use): per group of
    `group_size` input columns a scale s = absmax/7 and zero 8, q = round(w/s) + 8 in 0..15. Returns
    qweight (int32, K/8 x N: eight consecutive input rows per word, row k in bits 4*(k%8)), qzeros
    (int32, K/G x N/8: each column's zero minus one, as v1 stores it) and scales (float16, K/G x N)."""
    import torch

    n, k = w.shape
    if k % group_size or k % 8 or n % 8:
        raise ValueError(f"a {n} x {k} weight does not pack to GPTQ groups of {group_size} (needs K % {group_size}, K % 8 and N % 8 == 0)")
    g = w.float().reshape(n, k // group_size, group_size)
    scale = (g.abs().amax(-1, keepdim=True) / 7).clamp(min=1e-6)
    q = ((g / scale).round().clamp(-8, 7) + 8).to(torch.int32).reshape(n, k).t().contiguous()  # K x N
    shifts = 4 * torch.arange(8, dtype=torch.int32, device=w.device)
    qweight = (q.reshape(k // 8, 8, n) << shifts.reshape(1, 8, 1)).sum(1, dtype=torch.int32)
    zeros = torch.full((k // group_size, n), 8 - 1, dtype=torch.int32, device=w.device)
    qzeros = (zeros.reshape(k // group_size, n // 8, 8) << shifts).sum(-1, dtype=torch.int32)
    scales = scale.reshape(n, k // group_size).t().contiguous().to(torch.float16)
    return qweight, qzeros, scales


def unpack_gptq(qweight, qzeros, scales, group_size: int):
    """The float32 N x K weight GPTQ tensors stand for: (q - (z + 1)) * s."""
    import torch

    k8, n = qweight.shape
    shifts = 4 * torch.arange(8, dtype=torch.int32, device=qweight.device)
    q = ((qweight.unsqueeze(1) >> shifts.reshape(1, 8, 1)) & 15).reshape(k8 * 8, n)
    z = ((qzeros.unsqueeze(-1) >> shifts) & 15).reshape(qzeros.shape[0], n) + 1
    s = scales.float()
    return ((q - z.repeat_interleave(group_size, 0)).float() * s.repeat_interleave(group_size, 0)).t()


def quantize_gemlite(w, group_size: int):
    """gemlite's A16Wn input (HQQ's asymmetric convention): per group a scale s = (max - min)/15 and a
    float zero z = -min/s, w ~ (q - z) * s with q in 0..15. Returns q (uint8, N x K), s and z (bf16, N x K/G)."""
    import torch

    n, k = w.shape
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = -lo / scale
    q = (g / scale + zero).round().clamp(0, 15).to(torch.uint8).reshape(n, k)
    return q, scale.reshape(n, -1).to(torch.bfloat16), zero.reshape(n, -1).to(torch.bfloat16)


def dequantize_gemlite(q, scales, zeros, group_size: int):
    n, k = q.shape
    g = q.float().reshape(n, k // group_size, group_size)
    return ((g - zeros.float().unsqueeze(-1)) * scales.float().unsqueeze(-1)).reshape(n, k)


class GptqExllamav2Weights(PackedWeights):
    """GPTQ-packed int4 (symmetric, groups of 128, fp16 scales) through ExLlamaV2's GPTQ kernel
    (`gemm_half_q_half`), the paper's fastest L4 path. The kernel is fp16 only: a bf16 model pays a
    cast of the activations in and of the output back, two small kernels per linear, counted in the
    step as any user of it pays them. Its extension compiles at first import (JIT, nvcc)."""

    name = "gptq-exllamav2"
    package = "exllamav2"
    module = "exllamav2.ext"  # imported alone by exllamav2_ext()
    install = "pip install exllamav2 (its CUDA extension compiles at first import: about 2-3 minutes on 16 cores)"
    cuda_only = True
    min_capability = (8, 0)
    group_size = 128
    scratch_elements = 1 << 27  # fp16 scratch for prefill (M > 32 dequantizes the layer): the largest card layer is 68 M

    def bytes_per_layer(self, n: int, k: int) -> int:
        groups = k // self.group_size  # 4-bit values; an fp16 scale per group and column; a 4-bit zero per group and column
        return n * k // 2 + groups * n * 2 + groups * n // 2

    def load(self):
        exllamav2_ext()

    def pack(self, linear):
        return _exllamav2_linear_class()(linear, self.group_size, self.scratch_elements)

    def dense(self, packed, linear):
        return unpack_gptq(*pack_gptq(linear.weight.detach().float().cpu(), self.group_size), self.group_size)


_SCRATCH: dict = {}
_GEMLITE_CONFIGS: list = []  # the autotune file loaded once per process (None: gemlite could not read it)


def exllamav2_ext():
    """ExLlamaV2's extension module (exllamav2.ext) alone. The package's __init__ loads its whole
    inference engine (tokenizer, vision towers and their imaging and server dependencies), none of
    which a GEMM needs, so the package is entered as a bare namespace. The first import compiles the
    CUDA extension (torch.utils.cpp_extension, into TORCH_EXTENSIONS_DIR: the stage's compile cache)."""
    import importlib
    import importlib.util
    import sys
    import types

    if "exllamav2.ext" not in sys.modules:
        spec = importlib.util.find_spec("exllamav2")
        if spec is None:
            raise ModuleNotFoundError("No module named 'exllamav2'")
        if "exllamav2" not in sys.modules:
            pkg = types.ModuleType("exllamav2")
            pkg.__path__ = list(spec.submodule_search_locations)
            sys.modules["exllamav2"] = pkg
    return importlib.import_module("exllamav2.ext")


def _exllamav2_linear_class():
    import torch

    class _GptqLinear(torch.nn.Module):
        def __init__(self, linear, group_size: int, scratch_elements: int):
            ext = exllamav2_ext()
            exllamav2_ext_c, none_tensor = ext.exllamav2_ext, ext.none_tensor

            super().__init__()
            w = linear.weight.detach()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            qweight, qzeros, scales = pack_gptq(w, group_size)
            self.register_buffer("qweight", qweight)  # make_q_matrix shuffles it in place into the kernel's order
            self.register_buffer("qzeros", qzeros)
            self.register_buffer("scales", scales)
            self.weight_buffers = ("qweight", "qzeros", "scales")
            # one scratch per device, shared by every layer (as ExLlamaV2 shares its own)
            if w.device not in _SCRATCH:
                _SCRATCH[w.device] = torch.empty(scratch_elements, dtype=torch.float16, device=w.device)
            scratch = _SCRATCH[w.device]
            self.handle = exllamav2_ext_c.make_q_matrix(qweight, *[none_tensor] * 6, qzeros, scales, none_tensor, none_tensor,
                                                      scratch, scratch_elements // self.out_features)
            self._gemm = exllamav2_ext_c.gemm_half_q_half
            self.bias = linear.bias

        def forward(self, x):
            shape = x.shape
            a = x.reshape(-1, self.in_features).to(torch.float16)
            # the kernel clears its output itself (and the cuBLAS path for M > 32 writes it with beta 0), as
            # ExLlamaV2 relies on: torch.zeros would add a memset kernel per linear; False: not force_cuda
            y = torch.empty(a.shape[0], self.out_features, dtype=torch.float16, device=x.device)
            self._gemm(a, self.handle, y, False)
            y = y.to(x.dtype).reshape(*shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y

    return _GptqLinear


class GemliteWeights(PackedWeights):
    """gemlite's Triton int4 kernels built for small batches (A16W4: bf16 activations, 4-bit weights
    in groups of 128 with a bf16 scale and zero; one token goes through its GEMV_REVSPLITK kernel).
    Its autotune keys on the GPU name and has no H200 file: the H100 configs are loaded, so a step
    compiles each shape once instead of autotuning it."""

    name = "gemlite"
    package = "gemlite"
    module = "gemlite"
    install = "pip install gemlite (pure Python and Triton; its kernels compile at first use)"
    cuda_only = True
    min_capability = (8, 0)
    group_size = 128

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (k // self.group_size) * n * 2 * 2  # 4-bit values; a bf16 scale and zero per group and column

    def pack(self, linear):
        return _gemlite_linear_class()(linear, self.group_size)

    def dense(self, packed, linear):
        return dequantize_gemlite(*quantize_gemlite(linear.weight.detach().float().cpu(), self.group_size), self.group_size)


def _gemlite_linear_class():
    import torch

    class _GemliteLinear(torch.nn.Module):
        def __init__(self, linear, group_size: int):
            import os

            import gemlite
            from gemlite.helper import A16Wn

            super().__init__()
            if not _GEMLITE_CONFIGS:  # no H200 file ships: Hopper's H100 configs, instead of autotuning each shape
                path = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
                _GEMLITE_CONFIGS.append(path if gemlite.load_config(path) is not False else None)
            w = linear.weight.detach()
            q, scales, zeros = quantize_gemlite(w, group_size)
            inner = A16Wn(device=str(w.device), dtype=torch.bfloat16).from_weights(
                q, scales, zeros, W_nbits=4, group_size=group_size, bias=None if linear.bias is None else linear.bias.detach())
            # Kept out of the module tree: its parameters include a few ints of kernel metadata, not weights.
            object.__setattr__(self, "inner", inner)
            # gemlite's packed weight, scales and zeros: what W counts
            names = []
            for name, t in list(inner.named_parameters()) + list(inner.named_buffers()):
                if name in ("W_q", "scales", "zeros") and t.numel():
                    self.register_buffer(f"stored_{name}", t, persistent=False)
                    names.append(f"stored_{name}")
            self.weight_buffers = tuple(names)

        def forward(self, x):
            return self.inner(x)

    return _GemliteLinear


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ's nibble order within an int32 word of eight columns


def pack_awq(w, group_size: int):
    """AWQ's int4 storage (AutoAWQ's GEMM layout): per group of `group_size` input rows an fp scale
    s = (max - min)/15 and an integer zero z = round(-min/s), q = round(w/s + z) in 0..15, w ~ (q - z) * s.
    Returns qweight (int32, K x N/8) and qzeros (int32, K/G x N/8), eight columns per word in AWQ's
    nibble order, and scales (K/G x N, float32)."""
    import torch

    n, k = w.shape
    if k % group_size or n % 8:
        raise ValueError(f"a {n} x {k} weight does not pack to AWQ groups of {group_size} (needs K % {group_size} and N % 8 == 0)")
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = (-lo / scale).round().clamp(0, 15)
    q = (g / scale + zero).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    order = torch.tensor(AWQ_ORDER, device=w.device)
    shifts = 4 * torch.arange(8, dtype=torch.int32, device=w.device)

    def pack(cols):  # rows x N -> rows x N/8: word j, nibble i holds column 8j + AWQ_ORDER[i]
        x = cols.reshape(cols.shape[0], -1, 8)[:, :, order]
        return (x << shifts).sum(-1, dtype=torch.int32)

    qweight = pack(q.t().contiguous())
    qzeros = pack(zero.reshape(n, k // group_size).t().to(torch.int32).contiguous())
    return qweight, qzeros, scale.reshape(n, k // group_size).t().contiguous()


def unpack_awq(qweight, qzeros, scales, group_size: int):
    """The float32 N x K weight AWQ tensors stand for: (q - z) * s."""
    import torch

    shifts = 4 * torch.arange(8, dtype=torch.int32, device=qweight.device)
    undo = torch.argsort(torch.tensor(AWQ_ORDER, device=qweight.device))

    def unpack(words):
        x = (words.unsqueeze(-1) >> shifts) & 15  # rows x N/8 x 8, in AWQ order
        return x[:, :, undo].reshape(words.shape[0], -1)

    q, z = unpack(qweight), unpack(qzeros).repeat_interleave(group_size, 0)
    return ((q - z).float() * scales.float().repeat_interleave(group_size, 0)).t()


MARLIN_SRC = "DECODEGAP_MARLIN_SRC"  # where envs/build_marlin.py laid out the Marlin sources
KU4_ID = 1125899906843648  # vLLM's ScalarType id of kU4 (uint4 with zero points), the b_type the kernels are built for


def marlin_ops():
    """vLLM's Marlin ops, compiled at first use from the sources envs/build_marlin.py lays out
    ($DECODEGAP_MARLIN_SRC, default .whl/marlin in the repository), and the layout helpers beside them."""
    import importlib.util
    import os
    from pathlib import Path

    import torch

    src = Path(os.environ.get(MARLIN_SRC) or Path(__file__).resolve().parents[3] / ".whl" / "marlin")
    if not (src / "bind.cpp").is_file():
        raise ModuleNotFoundError(f"no Marlin sources at {src}: python envs/build_marlin.py <vllm sdist> {src} lays them out")
    if not hasattr(torch.ops, "decodegap_marlin") or not hasattr(torch.ops.decodegap_marlin, "marlin_gemm"):
        from torch.utils.cpp_extension import load

        marlin = src / "csrc" / "quantization" / "marlin"
        sources = [src / "bind.cpp", *(marlin / f for f in ("marlin.cu", "awq_marlin_repack.cu", "gptq_marlin_repack.cu")),
                   *sorted(marlin.glob("sm*_kernel_*.cu"))]
        load(name="decodegap_marlin", sources=[str(p) for p in sources], extra_include_paths=[str(src / "csrc"), str(marlin)],
             extra_cflags=["-O3", "-std=c++17"],
             extra_cuda_cflags=["-O3", "-std=c++17", "-DUSE_CUDA", "-DMARLIN_NAMESPACE_NAME=marlin", "--expt-relaxed-constexpr",
                                "-static-global-template-stub=false"],
             is_python_module=False)
    spec = importlib.util.spec_from_file_location("decodegap_marlin_layout", src / "marlin_layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    return torch.ops.decodegap_marlin, layout


class AwqMarlinWeights(PackedWeights):
    """AWQ-packed int4 (groups of 128, a scale and an integer zero per group) multiplied through a
    Marlin kernel, as vLLM serves AWQ checkpoints on Ampere and newer ("awq_marlin"). AutoAWQ, the
    paper's upstream, is archived and its kernels build for old torch only; the kernel family is
    taken from vLLM's sources, trimmed to the bf16 uint4 group-128 kernels (envs/build_marlin.py)."""

    name = "awq-marlin"
    package = "vllm"  # the sources' origin (envs/build_marlin.py)
    module = "decodegap_marlin"  # compiled by marlin_ops()
    install = "python envs/build_marlin.py <vllm-0.33.0.tar.gz> .whl/marlin (vLLM's Marlin sources, compiled at first use)"
    cuda_only = True
    min_capability = (8, 0)
    group_size = 128

    def load(self):
        marlin_ops()

    def bytes_per_layer(self, n: int, k: int) -> int:
        groups = k // self.group_size  # 4-bit values; a bf16 scale per group and column; 4-bit zeros packed in int32
        return n * k // 2 + groups * n * 2 + groups * n // 2

    def pack(self, linear):
        return _marlin_linear_class()(linear, self.group_size)

    def dense(self, packed, linear):
        return unpack_awq(*pack_awq(linear.weight.detach().float().cpu(), self.group_size), self.group_size)


_MARLIN_WORKSPACE: dict = {}


def _marlin_linear_class():
    import torch

    class _MarlinLinear(torch.nn.Module):
        def __init__(self, linear, group_size: int):
            super().__init__()
            ops, layout = marlin_ops()
            w = linear.weight.detach()
            n, k = w.shape
            self.in_features, self.out_features = k, n
            qweight, qzeros, scales = pack_awq(w, group_size)
            self.register_buffer("qweight", ops.awq_marlin_repack(qweight, k, n, 4, False))  # Marlin's tile order
            self.register_buffer("scales", layout.marlin_permute_scales(scales.to(torch.bfloat16), k, n, group_size))
            self.register_buffer("zeros", layout.awq_to_marlin_zero_points(qzeros, k // group_size, n, 4))
            self.weight_buffers = ("qweight", "scales", "zeros")
            sms = torch.cuda.get_device_properties(w.device).multi_processor_count
            # the kernel's locks, zero, shared by every layer (each call leaves them zero again)
            self.workspace = _MARLIN_WORKSPACE.setdefault(w.device, torch.zeros(sms * 4, dtype=torch.int32, device=w.device))
            self._gemm = ops.marlin_gemm
            self.bias = linear.bias

        def forward(self, x):
            shape = x.shape
            a = x.reshape(-1, self.in_features).contiguous()
            y = self._gemm(a, None, self.qweight, None, self.scales, None, None, self.zeros, self.workspace, KU4_ID,
                           a.shape[0], self.out_features, self.in_features, False, True, False)
            y = y.reshape(*shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y

    return _MarlinLinear


PATHS = {"bf16": Bf16Weights(), "bnb-nf4": BnbNf4Weights(), "awq-marlin": AwqMarlinWeights(), "gptq-exllamav2": GptqExllamav2Weights(),
         "int4-tinygemm": Int4TinygemmWeights(), "gemlite": GemliteWeights()}


def get_weight_path(name: str):
    if name not in PATHS:
        raise ConfigError(f"unknown quant '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
