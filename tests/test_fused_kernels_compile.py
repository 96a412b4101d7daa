"""The fused kernels compiled for the H200 without one (decodegap.measure.fused_kernels.ahead): every
kernel the step launches goes through Triton's compiler and ptxas for sm_90 as a GPU launch would
specialise it, and the cubins say what the interpreter cannot: that it compiles, that nothing spills,
that the weight loads are 128-bit, that PDL emits griddepcontrol's launch option and that the
masked attention's K/V loads are pipelined (cp.async) where the skipping branch's are not. It runs
in a fresh process: the interpreter this suite switches on (tests/conftest.py) must be off there."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("triton")


def _compile_ahead(tmp_path, *flags):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "decodegap.measure.fused_kernels.ahead", "--json", str(out), *flags],
                          cwd=REPO / "scripts", env=env, capture_output=True, text=True, timeout=1500)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _check(proc, rows):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert rows and all("error" not in r and r["spill_bytes"] == 0 for r in rows)
    by = {(r["case"], r["kernel"]): r for r in rows}
    o = by[("qwen2.5-7b dense o", "_linear_kernel")]
    assert any(op.startswith("LDG.E.EF.128") for op in o["loads"]), o  # the weights stream in 128-bit loads, evict-first
    assert by[("qwen2.5-7b dense o pdl", "_linear_kernel")]["options"].get("launch_pdl") is True
    masked = by[("qwen2.5-7b attention ctx 16384 masked", "_attention_split_kernel")]["loads"]
    skipping = by[("qwen2.5-7b attention ctx 16384 skipping", "_attention_split_kernel")]["loads"]
    assert by[("qwen2.5-7b attention ctx 16384 masked in-split", "_attention_split_kernel")]  # the lever compiles for sm_90
    assert any(op.startswith("LDGSTS") for op in masked) and not any(op.startswith("LDGSTS") for op in skipping)


@pytest.mark.slow  # 25 s: every kernel through ptxas for sm_90 (CI runs it: pytest -m slow)
def test_every_kernel_compiles_for_the_h200_without_spilling(tmp_path):
    _check(*_compile_ahead(tmp_path, "--quick"))


@pytest.mark.slow
def test_every_kernel_variant_of_both_layouts_compiles_for_the_h200(tmp_path):
    proc, rows = _compile_ahead(tmp_path)
    _check(proc, rows)
    assert {r["case"].split()[0] for r in rows} == {"qwen2.5-7b", "llama-3.1-8b"}
