"""The names of the measurement's plug-in units, read from their files without importing them.

An attention path or a weight path is one file of decodegap/measure/attention/ or
decodegap/measure/weights/ (`sdpa_flash.py` is the path `sdpa-flash`); the config schema's `attn`
and `quant` keys are those names, so the core and the analysis know every path without importing
the measurement wing (or torch). The measurement wing's registries load the same files.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

MEASURE_DIR = Path(__file__).resolve().parents[1] / "measure"
KINDS = ("attention", "weights")
NOT_UNITS = ("__init__", "base")  # the package itself and what its units share


def unit_names(kind: str) -> dict[str, str]:
    """{path name: module name} of one kind's units, in file-name order."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of unit {kind!r}: one of {', '.join(KINDS)}")
    files = sorted((MEASURE_DIR / kind).glob("*.py"))
    return {p.stem.replace("_", "-"): p.stem for p in files if p.stem not in NOT_UNITS and not p.stem.startswith("_")}


@lru_cache(maxsize=None)
def _module_literals(path: Path) -> dict:
    """The module-level constants a unit file assigns literally (NAME = True), read without importing it."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def composes_with_compile(name: str) -> bool:
    """Whether a weight path's kernel is one op a compiled (or fused) step can hold: its unit says so
    with a module-level `COMPOSES_WITH_COMPILE = True` (the unit's class reads the same constant)."""
    module = unit_names("weights").get(name)
    return module is not None and bool(_module_literals(MEASURE_DIR / "weights" / f"{module}.py").get("COMPOSES_WITH_COMPILE"))


def weight_engine(name: str) -> str | None:
    """The engine whose own file format a weight path is (a unit's module-level `ENGINE = "llamacpp"`),
    or None for a path that transformers' model runs."""
    module = unit_names("weights").get(name)
    return _module_literals(MEASURE_DIR / "weights" / f"{module}.py").get("ENGINE") if module else None
