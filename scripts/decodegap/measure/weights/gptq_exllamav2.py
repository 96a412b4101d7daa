"""gptq-exllamav2: GPTQ's int4 storage through ExLlamaV2's GPTQ kernel (fp16 only)."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights


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


class GptqExllamav2Weights(PackedWeights):
    """GPTQ-packed int4 (symmetric, groups of 128, fp16 scales) through ExLlamaV2's GPTQ kernel
    (`gemm_half_q_half`), the paper's fastest L4 path. The kernel is fp16 only: a bf16 model pays a
    cast of the activations in and of the output back, two small kernels per linear, counted in the
    step as any user of it pays them. Its extension compiles at first import (JIT, nvcc)."""

    name = "gptq-exllamav2"
    package = "exllamav2"
    requirement = "exllamav2==0.3.2"
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


PATH = GptqExllamav2Weights()
