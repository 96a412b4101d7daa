"""bf16: the card as built, every linear through torch's dense GEMV (cuBLAS at batch 1)."""

from __future__ import annotations

from decodegap.measure.weights.base import WeightPath


COMPOSES_WITH_COMPILE = True  # torch's own GEMV: a compiled or fused step holds it (decodegap.core.registry reads this)


class Bf16Weights(WeightPath):
    name = "bf16"
    composes_with_compile = COMPOSES_WITH_COMPILE

    def check(self, device: str) -> str | None:
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

    def bytes_per_layer(self, n: int, k: int) -> int:
        return 2 * n * k


PATH = Bf16Weights()
