"""gemlite: gemlite's Triton kernels for small batches (A16W4)."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights

_GEMLITE_CONFIGS: list = []  # the autotune file loaded once per process (None: gemlite could not read it)


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


class GemliteWeights(PackedWeights):
    """gemlite's Triton int4 kernels built for small batches (A16W4: bf16 activations, 4-bit weights
    in groups of 128 with a bf16 scale and zero; one token goes through its GEMV_REVSPLITK kernel).
    Its autotune keys on the GPU name and has no H200 file: the H100 configs are loaded, so a step
    compiles each shape once instead of autotuning it."""

    name = "gemlite"
    package = "gemlite"
    requirement = "gemlite==0.6.0.post2"
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


PATH = GemliteWeights()
