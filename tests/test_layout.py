"""The house's shape, checked: two wings over a small core, the analysis never importing the
measurement wing, the package on the import path one way, one source for every path and for the
protocol, a log and `localrule: True` on every analysis rule, a description and default on every
config key."""

import ast
import json
import re
import subprocess
import sys
from dataclasses import fields

import yaml

from conftest import REPO
from decodegap.core.protocol import Protocol

PACKAGE = REPO / "scripts" / "decodegap"


def imported_modules(path) -> set[str]:
    """Every decodegap module a file imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("decodegap")}


def test_each_wing_imports_only_what_it_may():
    allowed = {"core": ("decodegap.core",), "analysis": ("decodegap.core", "decodegap.analysis"),
               "measure": ("decodegap.core", "decodegap.measure")}
    for wing, prefixes in allowed.items():
        for py in sorted((PACKAGE / wing).rglob("*.py")):
            bad = [m for m in imported_modules(py) if not m.startswith(prefixes)]
            assert not bad, f"{py.relative_to(REPO)} imports {bad}: the {wing} wing may import only {prefixes}"
    for py in sorted((REPO / "scripts" / "rules").glob("*.py")):  # rule entry points run the analysis
        bad = [m for m in imported_modules(py) if m.startswith("decodegap.measure")]
        assert not bad, f"{py.relative_to(REPO)} imports {bad}"


def test_the_analysis_runs_without_the_measurement_wing_or_torch():
    modules = [f"decodegap.analysis.{p.stem}" for p in sorted((PACKAGE / "analysis").glob("*.py")) if p.stem != "__init__"]
    modules += [f"decodegap.core.{p.stem}" for p in sorted((PACKAGE / "core").glob("*.py")) if p.stem != "__init__"]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('decodegap.measure') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# Runs another tree's code on purpose: a copy of the repository with a toy path added to it.
OTHER_TREE = ("test_layout.py", "test_registry.py")


def test_the_package_is_put_on_the_path_in_one_place():
    places = []
    for pattern in ("scripts/**/*.py", "benchmarks/*.py", "tests/*.py", "workflow/rules/*.smk", "Snakefile"):
        for path in REPO.glob(pattern):
            if path.name in OTHER_TREE:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"sys\.path\.(insert|append)|PYTHONPATH", line) and not line.lstrip().startswith("#"):
                    places.append(f"{path.relative_to(REPO)}:{n}")
    assert all(p.startswith("workflow/rules/common.smk:") for p in places), places


def rules() -> dict[str, str]:
    """rule name -> its text, from every .smk file."""
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))])
    parts = re.split(r"^rule (\w+):\n", text, flags=re.M)
    return {name: body.split("\n\n\n")[0] for name, body in zip(parts[1::2], parts[2::2])}


GPU_RULES = {"environment", "measure"}  # the only jobs that run on a GPU type (a cluster's nodes)


def test_every_rule_but_the_gpu_stages_is_local_and_every_job_has_its_log():
    found = rules()
    assert {"environment", "measure", "cells", "aggregate_all", "table", "figure", "paper_tables", "provenance", "all"} <= set(found)
    for name, body in found.items():
        assert ("localrule: True" in body) == (name not in GPU_RULES), f"rule {name}: only {sorted(GPU_RULES)} may go to a cluster"
        if name != "all":
            assert re.search(r"^    log:\n", body, re.M), f"rule {name} names no log"


def test_tables_and_figures_are_one_wildcard_rule_each_from_one_registry():
    """Every table and figure is an entry of decodegap.analysis.artifacts, rendered by the `table`
    or `figure` rule: no rule per artifact, and no caption written anywhere else."""
    from decodegap.analysis import artifacts

    found = rules()
    assert not [n for n in found if n.startswith(("table_", "figure_"))]
    assert '"{table}"' in found["table"] and '"{figure}"' in found["figure"]
    assert sorted((REPO / "workflow/report").glob("*.rst")) == [REPO / "workflow/report/artifact.rst"]
    assert "snakemake.params.caption" in (REPO / "workflow/report/artifact.rst").read_text()
    names = [a.name for a in artifacts.TABLES + artifacts.FIGURES]
    for a in artifacts.TABLES + artifacts.FIGURES:
        assert a.caption and a.cells in artifacts.CELL_SETS, a.name
    assert len(set(zip(names, [a.kind for a in artifacts.TABLES + artifacts.FIGURES]))) == len(names)
    import pytest
    from decodegap.core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown table 'publishd'"):
        artifacts.get("table", "publishd")
    assert artifacts.get("table", "matrix_h200")[1] == "h200"


def test_rules_take_every_path_from_the_path_module():
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]:
        literals = re.findall(r"\"((?:results|report|logs)/[^\"]*)\"", path.read_text())
        assert not literals, f"{path.relative_to(REPO)} spells paths itself: {literals} (use decodegap.core.paths)"


def _walk(node, where=""):
    yield where, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{where}.{key}" if where else key)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{where}[{key}]")


def test_every_config_key_has_a_description_and_a_default():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    keys = [(w, n) for w, n in _walk(schema) if w and not w.endswith("]")]
    assert len(keys) > 40
    missing = [w for w, n in keys if "description" not in n or "default" not in n]
    assert not missing, f"config schema keys without description or default: {missing}"


def test_the_protocol_is_defined_once():
    protocol_fields = {f.name: f for f in fields(Protocol)}
    config = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())["properties"]["protocol"]
    assert set(config["properties"]) == set(protocol_fields)
    assert config["default"] == Protocol().as_record()
    for name, spec in config["properties"].items():
        f = protocol_fields[name]
        assert spec["default"] == f.default, name
        assert spec.get("minimum") == f.metadata["minimum"] or f.metadata["exclusive_minimum"] == 0 and spec.get("minimum") == 1, name
        assert spec.get("exclusiveMinimum") == f.metadata["exclusive_minimum"] or spec.get("minimum") == 1, name
        assert spec.get("maximum") == f.metadata["maximum"], name
    session = json.loads((REPO / "workflow/schemas/session.schema.json").read_text())["properties"]["protocol"]
    assert set(session["required"]) <= set(protocol_fields) and set(session["properties"]) <= set(protocol_fields)
    from decodegap.measure.session import parse_args

    args = parse_args(["--gpu", "cpu", "--model", "tiny-llama", "--ctx", "8", "--mode", "eager", "--session", "0"])
    assert args.protocol == Protocol()  # every field a flag, with the same default
