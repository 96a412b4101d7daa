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


PATHS = {"bf16": Bf16Weights()}


def get_weight_path(name: str):
    if name not in PATHS:
        raise ConfigError(f"unknown quant '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
