"""fp8: e4m3 weights with a float32 scale per output channel, through decodegap's own Triton GEMV
(the fused step's kernels, decodegap.measure.fused_kernels): one byte a weight, and four a row."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights

FP8_E4M3_MAX = 448.0  # the largest finite float8_e4m3fn


def quantize_fp8_rows(w):
    """Per-output-channel (row) fp8: scale = max |w| of the row / 448 (float32), weight = w / scale
    rounded to float8_e4m3fn (to nearest). Returns (weight (N, K) float8_e4m3fn, scale (N,) float32)."""
    import torch

    w = w.float()
    scale = (w.abs().amax(dim=1) / FP8_E4M3_MAX).clamp(min=1e-12)
    q = (w / scale[:, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


COMPOSES_WITH_COMPILE = True  # one custom op (decodegap::packed_linear): a compiled or fused step holds it (decodegap.core.registry reads this)


class Fp8Weights(PackedWeights):
    """e4m3 weights (torch.float8_e4m3fn) with one float32 scale per output channel, W = weight *
    scale[:, None]. A batch-1 call runs decodegap's Triton fp8 GEMV (float32 products, the scale
    applied to each row's sum); in the fused step the same GEMV runs inside the fused kernels with
    their prologues and epilogues. A prefill multiplies by the dequantized weight (never timed).
    The scales are float32 so that W is exactly weight x scale in the dense reference; they add 4
    bytes a row (0.1 % of a 3584-column row)."""

    name = "fp8"
    package = "triton"
    composes_with_compile = COMPOSES_WITH_COMPILE
    min_capability = (8, 9)  # Triton's e4m3 (fp8e4nv) needs Ada or Hopper

    def unavailable(self, device: str) -> str | None:
        from decodegap.measure.fused_kernels import usable_here

        return usable_here(device) or super().unavailable(device)

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k + 4 * n  # one byte a weight; a float32 scale per row

    def pack(self, linear):
        from decodegap.measure.fused_kernels.ops import PackedLinear

        weight, scale = quantize_fp8_rows(linear.weight.detach())
        return PackedLinear("fp8", {"weight_fp8": weight, "weight_scale": scale}, linear.in_features, linear.out_features,
                            linear.bias)

    def dense(self, packed, linear=None):
        """From the stored tensors alone (`linear` is not needed)."""
        from decodegap.measure.fused_kernels.ops import dequantize

        return dequantize(packed.operand)


PATH = Fp8Weights()
