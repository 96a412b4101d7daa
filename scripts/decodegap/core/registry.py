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
def _parsed(path: Path) -> ast.Module:
    """A unit file's syntax tree, parsed once (it is read, never imported)."""
    return ast.parse(path.read_text())


def _module_literals(path: Path) -> dict:
    """The module-level constants a unit file assigns literally (NAME = True), read without importing it."""
    out = {}
    for node in _parsed(path).body:
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


DEFAULT_PACKAGE = "torch"  # AttentionPath's and WeightPath's default: the kernel ships with torch


def _declared_package(path: Path, kind: str) -> str | None:
    """The package a unit file declares, or the one a private module of its kind (`_gguf.py`) that it
    builds on declares; None where neither says."""
    tree = _parsed(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "package" for t in node.targets):
            value = node.value
        elif isinstance(node, ast.keyword) and node.arg == "package":
            value = node.value
        else:
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    shared = f"decodegap.measure.{kind}._"
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(shared):
            found = _declared_package(MEASURE_DIR / kind / f"{node.module.rsplit('.', 1)[1]}.py", kind)
            if found:
                return found
    return None


def unit_package(kind: str, name: str) -> str | None:
    """The distribution that ships a unit's kernel, as the unit declares it (a weight path's class-level
    `package = "..."`, an attention path's `package="..."` argument, or the private module's it builds
    on; DEFAULT_PACKAGE where none says), read without importing it; None for a name that is no unit of
    that kind. Lets the analysis tell which paths a lent GPU runs without a carried wheel
    (decodegap.analysis.versions)."""
    module = unit_names(kind).get(name)
    if module is None:
        return None
    return _declared_package(MEASURE_DIR / kind / f"{module}.py", kind) or DEFAULT_PACKAGE
