import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"

# Protocol small enough for a CPU with a tiny card, still long enough to pass validity.
FAST = ["--warmup-steps", "2", "--timed-steps", "40", "--min-samples", "20", "--min-duration-s", "0",
        "--ab-blocks", "4", "--ab-block-steps", "6", "--max-rel-stdev", "100"]  # CPU timing noise is not under test here


def measure_cmd(root, *, gpu="cpu", model="tiny-llama", ctx=32, mode="eager", session=0, attn="sdpa", extra=FAST):
    return [sys.executable, "-m", "decodegap.measure", "--root", str(root), "--gpu", gpu, "--model", model,
            "--ctx", str(ctx), "--attn", attn, "--quant", "bf16", "--mode", mode, "--session", str(session), *extra]


def run_measure(root, **kw):
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS)}
    return subprocess.run(measure_cmd(root, **kw), capture_output=True, text=True, env=env, cwd=root)


@pytest.fixture
def measure_main():
    """Call decodegap.measure.main in this process (faster than a fresh one): returns (rc, record)."""
    from decodegap import measure, paths

    def call(root, **kw):
        argv = measure_cmd(root, **kw)[3:]
        rc = measure.main(argv)
        cell = {k: kw.get(k, d) for k, d in (("gpu", "cpu"), ("model", "tiny-llama"), ("ctx", 32), ("attn", "sdpa"), ("mode", "eager"), ("session", 0))}
        path = paths.session_path(quant="bf16", root=root, **cell)
        return rc, (json.loads(path.read_text()) if path.exists() else None), path

    return call
