"""Attention paths: which kernel computes attention in a decode step.

One path is one file of this package (`sdpa_flash.py` is the path `sdpa-flash`), declaring
everything about it (decodegap.measure.attention.base.AttentionPath): its package and pin, its
capability bounds and whether it is CUDA-only, its decode call for the layer microbenchmark, how it
registers with transformers, and which kernel names prove it ran. Nothing else lists the paths: this
registry finds them by their files, and the config's `attn` keys are the same names
(decodegap.core.registry).

`sdpa` leaves the choice to PyTorch's SDPA dispatcher (transformers' default); `sdpa-<backend>`
pins one backend, so a backend that has no kernel for the shape fails as a recorded failure. The
session's profiler pass checks which kernel family ran, and a path that silently ran another
kernel is invalid with that reason (`AttentionPath.fallback_reason`). `unavailable()` says
precisely why a path cannot run here (package missing, no build for this GPU), before anything is
timed.
"""

from __future__ import annotations

import importlib

from decodegap.core.errors import ConfigError
from decodegap.core.registry import unit_names
from decodegap.measure.attention.base import AttentionPath, KernelFamily  # noqa: F401 - the package's shared names


def _load() -> dict[str, AttentionPath]:
    paths = {}
    for name, module in unit_names("attention").items():
        unit = importlib.import_module(f"{__name__}.{module}").PATH
        if unit.name != name:
            raise ConfigError(f"{__name__}.{module} declares the path {unit.name!r}; its file name says {name!r}")
        paths[name] = unit
    return paths


PATHS = _load()
# Which backend a kernel name belongs to, first match wins (by each family's order): names the
# dispatcher's actual choice (sdpa) and tells a fallback apart. Checked against kernel names seen
# on the H200 (tests/test_attention.py).
KERNEL_FAMILIES = tuple(sorted({f for p in PATHS.values() for f in p.kernels}, key=lambda f: (f.order, f.name)))


def kernel_family(name: str) -> str | None:
    for family in KERNEL_FAMILIES:
        if family.matches(name):
            return family.name
    return None


def attention_kernels(kernel_names) -> dict[str, list[str]]:
    """The attention kernels among a step's kernel names, by family (matmuls, norms and copies
    fall in none)."""
    out: dict[str, list[str]] = {}
    for name in kernel_names:
        fam = kernel_family(name)
        if fam is not None:
            out.setdefault(fam, []).append(name)
    if len(out) > 1:  # a fused kernel ran: a softmax beside it is some other op's, not the math backend
        out.pop("math", None)
    return out


def get_attention_path(name: str) -> AttentionPath:
    if name not in PATHS:
        raise ConfigError(f"unknown attn '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
