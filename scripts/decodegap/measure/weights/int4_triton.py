"""int4-triton: decodegap's own W4A16 GEMV in Triton (the fused step's kernels,
decodegap.measure.fused_kernels), 4 bits in groups of 128 input columns with a bf16 scale and an
integer bf16 zero point per group and row, in a layout chosen for batch-1 loads."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights

GROUP = 128  # input columns per group: one scale and one zero per group and row


def quantize_int4_words(w, group_size: int = GROUP):
    """Asymmetric 4-bit quantization per group of 128 input columns, with an integer zero point:
    scale s = (max - min) / 15 over the group's range widened to hold 0 (bf16), zero z = round(-min / s)
    in 0..15, q = round(w / s + z) in 0..15, w ~ (q - z) * s. Packed along K for the kernel:
    int32 word i (0..15) of a group of a row holds, in nibble j (bits 4j..4j+3), the group's column
    16j + i. Returns (words (N, K/8) int32, scales and zeros (N, K/128) bf16). Random weights need
    no calibration: the kernel's time does not depend on the values."""
    import torch

    n, k = w.shape
    if k % group_size:
        raise ValueError(f"in_features {k} is not a multiple of the group size {group_size}")
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
    scale = ((hi - lo) / 15).clamp(min=1e-8).to(torch.bfloat16)
    zero = (-lo / scale.float()).round().clamp(0, 15)
    q = (g / scale.float()[..., None] + zero[..., None]).round().clamp(0, 15).to(torch.int64)
    q = q.reshape(n, k // group_size, 8, group_size // 8)  # row, group, nibble j, word i: column 16 j + i
    shifts = torch.arange(0, 32, 4, device=w.device, dtype=torch.int64).view(1, 1, 8, 1)
    words = (q << shifts).sum(dim=2)  # row, group, word: values below 2^32
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the same 32 bits, as int32
    return words.reshape(n, k // 8).contiguous(), scale.contiguous(), zero.to(torch.bfloat16).contiguous()


COMPOSES_WITH_COMPILE = True  # one custom op (decodegap::packed_linear): a compiled or fused step holds it (decodegap.core.registry reads this)


class Int4TritonWeights(PackedWeights):
    """decodegap's own int4 weight-only GEMV (W4A16) in Triton: int32 words of eight 4-bit values
    along K, so a row's words load as one contiguous run; a bf16 scale and an integer-valued bf16
    zero per group of 128 columns and row, W = (q - zero) * scale. A nibble becomes a float by OR-ing
    it into the mantissa of 2^23 (no conversion instruction), and each group's sum is scaled once. A
    batch-1 call runs that GEMV; in the fused step it runs inside the fused kernels with their
    prologues and epilogues. A prefill multiplies by the dequantized weight (never timed)."""

    name = "int4-triton"
    package = "triton"
    composes_with_compile = COMPOSES_WITH_COMPILE
    group_size = GROUP
    min_capability = (8, 0)  # bf16 scales and activations

    def unavailable(self, device: str) -> str | None:
        from decodegap.measure.fused_kernels import usable_here

        return usable_here(device) or super().unavailable(device)

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (k // self.group_size) * n * 2 * 2  # 4-bit values; a bf16 scale and zero per group and row

    def pack(self, linear):
        from decodegap.measure.fused_kernels.ops import PackedLinear

        words, scales, zeros = quantize_int4_words(linear.weight.detach(), self.group_size)
        return PackedLinear("int4", {"qweight": words, "scales": scales, "zeros": zeros}, linear.in_features,
                            linear.out_features, linear.bias)

    def dense(self, packed, linear=None):
        """From the stored tensors alone (`linear` is not needed)."""
        from decodegap.measure.fused_kernels.ops import dequantize

        return dequantize(packed.operand)


PATH = Int4TritonWeights()
