"""Attention paths: which kernel computes attention in a decode step.

`sdpa` leaves the choice to PyTorch's SDPA dispatcher (transformers' default); `sdpa-<backend>`
pins one backend, so a backend that has no kernel for the decode shape fails as an expected,
recorded failure instead of silently falling back. Adding a path is one entry in PATHS.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from decodegap.core.errors import ConfigError


@dataclass(frozen=True)
class AttentionPath:
    name: str
    attn_implementation: str  # transformers' attn_implementation
    sdpa_backend: str | None = None  # name of a torch.nn.attention.SDPBackend member, or None
    package: str = "torch"  # the distribution that ships the kernel: its version goes in the environment record

    def context(self):
        """A context manager under which every step (and a graph capture) must run."""
        if self.sdpa_backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, self.sdpa_backend)])


PATHS = {
    "sdpa": AttentionPath("sdpa", "sdpa"),
    "sdpa-flash": AttentionPath("sdpa-flash", "sdpa", "FLASH_ATTENTION"),
    "sdpa-cudnn": AttentionPath("sdpa-cudnn", "sdpa", "CUDNN_ATTENTION"),
    "sdpa-efficient": AttentionPath("sdpa-efficient", "sdpa", "EFFICIENT_ATTENTION"),
    "sdpa-math": AttentionPath("sdpa-math", "sdpa", "MATH"),
}


def get_attention_path(name: str) -> AttentionPath:
    if name not in PATHS:
        raise ConfigError(f"unknown attn '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
