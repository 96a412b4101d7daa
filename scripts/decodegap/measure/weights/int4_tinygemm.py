"""int4-tinygemm: PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, "tinygemm": the
kernel torchao's int4 weight-only path and gpt-fast use), 4 bits in groups of 128 input columns
with a bf16 scale and zero point per group. One aten op: a compiled step traces it."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights


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


COMPOSES_WITH_COMPILE = True  # one aten op: a compiled or fused step holds it (decodegap.core.registry reads this)


class Int4TinygemmWeights(PackedWeights):
    """PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, "tinygemm": the kernel
    torchao's int4 weight-only path and gpt-fast use), 4 bits in groups of 128 input columns with a
    bf16 scale and zero point per group."""

    name = "int4-tinygemm"
    composes_with_compile = COMPOSES_WITH_COMPILE
    group_size = 128
    inner_k_tiles = 8  # the CUDA kernel's tile of K (2, 4 or 8); gpt-fast's and torchao's default
    min_capability = (8, 0)  # bf16 tensor cores

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (k // self.group_size) * n * 2 * 2  # 4-bit values; a bf16 scale and zero per group and row

    def pack(self, linear):
        tiles = self.inner_k_tiles if linear.weight.device.type == "cuda" else 2  # the CPU kernel packs in 2s
        return _int4_linear_class()(linear, self.group_size, tiles)

    def dense(self, packed, linear=None):
        """From `linear`, quantized again the same way (the stage's check); without it, the weight
        the kernel itself multiplies by: the packed layer applied to the identity (one row per input
        column, in bf16; each output is one dequantized weight times 1, exact), on its device."""
        if linear is not None:
            q, sz = quantize_int4_groups(linear.weight.detach().float().cpu(), self.group_size)
            return dequantize_int4_groups(q, sz, self.group_size)
        import torch

        eye = torch.eye(packed.in_features, dtype=torch.bfloat16, device=packed.weight_packed.device)
        return packed._mm(eye, packed.weight_packed, packed.group_size, packed.scales_and_zeros).float().T.contiguous()


PATH = Int4TinygemmWeights()
