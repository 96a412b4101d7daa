"""Weight paths: how the weights are stored on the device and which kernel multiplies by them.

One path is one file of this package (`int4_tinygemm.py` is the path `int4-tinygemm`), holding
everything about it: its package and pin, its capability bounds, `pack` (a bf16 nn.Linear -> the
packed module) and the bytes its format stores. Nothing else lists the paths: this registry finds
them by their files, the config schema's `quant` keys are the same file names
(decodegap.core.registry), and the environment record names each one's package version.

W counts the bytes of the weights as stored (a quantized layout with its scales included), each
storage once: tied input/output embeddings are one tensor.
"""

from __future__ import annotations

import importlib

from decodegap.core.errors import ConfigError
from decodegap.core.registry import unit_names
from decodegap.measure.weights.base import (  # noqa: F401 - the package's shared names
    RELATIVE_TOLERANCE, PackedWeights, StoredWeights, WeightPath, gemv_disagrees, module_bytes, stored_bytes)


def _load() -> dict[str, WeightPath]:
    paths = {}
    for name, module in unit_names("weights").items():
        unit = importlib.import_module(f"{__name__}.{module}").PATH
        if unit.name != name:
            raise ConfigError(f"{__name__}.{module} declares the path {unit.name!r}; its file name says {name!r}")
        paths[name] = unit
    return paths


PATHS = _load()


def get_weight_path(name: str) -> WeightPath:
    if name not in PATHS:
        raise ConfigError(f"unknown quant '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
