import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The fused step's Triton kernels run on a CPU under Triton's interpreter only, and it must be on
# before anything imports triton (building a transformers model does): tests/test_fused_kernels.py.
os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str):
    """A script that is not part of the package (benchmarks/*.py), imported from its file."""
    import importlib.util

    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# Protocol small enough for a CPU with a tiny card, still long enough to pass validity.
FAST = ["--warmup-steps", "2", "--timed-steps", "40", "--min-samples", "20", "--min-duration-s", "0",
        "--ab-blocks", "4", "--ab-block-steps", "6", "--max-rel-stdev", "100"]  # CPU timing noise is not under test here


def measure_cmd(root, *, gpu="cpu", model="tiny-llama", ctx=32, mode="eager", session=0, attn="sdpa", quant="bf16", extra=FAST):
    return [sys.executable, "-m", "decodegap.measure", "--root", str(root), "--gpu", gpu, "--model", model,
            "--ctx", str(ctx), "--attn", attn, "--quant", quant, "--mode", mode, "--session", str(session), *extra]


def run_measure(root, **kw):
    return subprocess.run(measure_cmd(root, **kw), capture_output=True, text=True, cwd=root)


@pytest.fixture
def measure_main():
    """Call decodegap.measure.main in this process (faster than a fresh one): returns (rc, record)."""
    from decodegap.measure import session as measure
    from decodegap.core import paths

    def call(root, **kw):
        argv = measure_cmd(root, **kw)[3:]
        rc = measure.main(argv)
        cell = {k: kw.get(k, d) for k, d in (("gpu", "cpu"), ("model", "tiny-llama"), ("ctx", 32), ("attn", "sdpa"), ("mode", "eager"), ("session", 0))}
        path = paths.session_path(quant=kw.get("quant", "bf16"), root=root, **cell)
        return rc, (json.loads(path.read_text()) if path.exists() else None), path

    return call


def snakemake_cmd(workdir, *args):
    exe = Path(sys.executable).parent / "snakemake"
    return [str(exe), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(Path(workdir) / "config.yaml"), *args]


def run_snakemake(workdir, *args, check=True):
    proc = subprocess.run(snakemake_cmd(workdir, *args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def dry_run_jobs(workdir, *targets):
    """{rule: count} of the jobs a dry run would execute."""
    import re

    proc = run_snakemake(workdir, "-n", "--quiet", "rules", "--", *targets)
    jobs = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) not in ("total", "job", "count"):
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def dry_run_outputs(workdir, *targets) -> set[str]:
    """The first output of every job a dry run would execute (a rule's job is named by its output)."""
    proc = run_snakemake(workdir, "-n", "--", *targets)
    out = set()
    for line in (proc.stdout + proc.stderr).splitlines():
        line = line.strip()
        if line.startswith("output: "):
            out.add(line[len("output: "):].split(", ")[0])
    return out


def small_config(**changes):
    import copy

    import yaml

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["matrix"].update(gpus=["h200", "l4"], models=["qwen2.5-7b"], ctx=[2048, 4096], modes=["eager", "graphed"], sessions=2)
    config["ab"] = [{"name": "cuda-graphs", "gpus": ["h200"], "model": "qwen2.5-7b", "ctx": 2048, "attn": "sdpa",
                     "quant": "bf16", "mode": "ab-eager-graphed", "sessions": 3}]
    config["attention"]["gpus"] = []  # the attention experiment: tests that want it name its GPUs
    config["quantization"]["gpus"] = []  # the weight-path experiment: likewise
    config["floor"]["gpus"] = []  # the floor experiment (compiled, fused): likewise
    config["engines"]["gpus"] = []  # the engines experiment (generate): likewise
    config["stats"]["n_resamples"] = 200
    # the synthetic sessions are 48 steps of a few ms: the analysis judges them by this protocol, not theirs
    config["protocol"].update(min_samples=32, min_duration_s=0.0)
    config = copy.deepcopy(config)
    for key, value in changes.items():
        config[key] = value
    return config


SMALL_CELLS = [
    dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="eager"),
    dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="graphed"),
    dict(gpu="h200", model="qwen2.5-7b", ctx=4096, attn="sdpa", quant="bf16", mode="graphed"),
    dict(gpu="l4", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="graphed"),
    dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="ab-eager-graphed"),
]


def make_workspace(root, config=None, sessions=2, steps=48):
    """A working directory with a synthetic raw store and a small config (no GPU involved)."""
    import yaml

    from decodegap.analysis import synthetic
    from decodegap.core import manifest
    from decodegap.core.protocol import Protocol, judge_session
    from decodegap.core.record import write_session

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(config or small_config()))
    synthetic.write_store(root, SMALL_CELLS[:-1], sessions, steps, seed=1)
    synthetic.write_store(root, SMALL_CELLS[-1:], 3, steps, seed=2)
    # one flagged session: invalid, with its reason, in the h200 eager cell
    import numpy as np

    rec = synthetic.record(SMALL_CELLS[0], 2, steps, np.random.default_rng(3), spread=0.31)
    rec.update(status="invalid", reasons=judge_session(rec["arms"], Protocol.from_record(rec["protocol"]), [], [])[0])
    flagged = root / "results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_eager/s02.json"
    write_session(rec, flagged)
    manifest.add([flagged], root)
    return root


def clone(dest: Path) -> Path:
    """The repository as a fresh clone has it (tracked and new unignored files), outside the repo."""
    import shutil

    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="session")
def bundled_report(tmp_path_factory):
    """A clone with the whole bundled report built (report/paper_tables.tex: every session under
    results/raw/), once for the session's slow tests; they read it or copy it, never change it.
    DECODEGAP_BUILT_REPORT names a clean clone where `make report` has just built it (.ci/run: the
    same build from the same sessions, not made twice); its report/provenance.json must exist."""
    given = os.environ.get("DECODEGAP_BUILT_REPORT")
    if given:
        root = Path(given)
        assert (root / "report/provenance.json").is_file(), f"DECODEGAP_BUILT_REPORT={given}: no report/provenance.json there"
        return root
    root = clone(tmp_path_factory.mktemp("bundled"))
    exe = Path(sys.executable).parent / "snakemake"
    env = {**os.environ, "PATH": f"{exe.parent}:{os.environ['PATH']}"}
    proc = subprocess.run([str(exe), "--cores", "2", "report/paper_tables.tex"], cwd=root, capture_output=True, text=True,
                          env=env, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return root


@pytest.fixture(scope="session")
def built_workspace(tmp_path_factory):
    """The small synthetic workspace, with the whole report built once for the session's tests."""
    root = make_workspace(tmp_path_factory.mktemp("pipeline"))
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    return root


def fixture_cell_stats(root, cell: dict, records) -> Path:
    """Write a cell's fixture session records under root and summarize them as the workflow does:
    the cell's stats.json, which the tables and figures read."""
    from decodegap.analysis import stats
    from decodegap.core import paths
    from decodegap.core.config import load_gpus
    from decodegap.core.record import write_session

    from dataclasses import fields

    from decodegap.core import manifest
    from decodegap.core.protocol import Protocol

    raw = []
    for s, rec in enumerate(records):
        path = paths.session_path(root=root, session=s, **cell)
        write_session(rec, path)
        raw.append(path)
    manifest.add(raw, root)  # as the commands that add sessions do: the analysis reads only listed bytes
    out = Path(root) / "stats" / paths.CELL.format(**cell)
    # judged by the protocol the fixtures were made with (a workflow judges by its config's)
    protocol = {k: v for k, v in records[0]["protocol"].items() if k in {f.name for f in fields(Protocol)}}
    stats.summarize_cell(raw, cell, vars(load_gpus()[cell["gpu"]]), {}, out / "s.parquet", out / "t.parquet", out / "stats.json", protocol)
    return out / "stats.json"


def fixture_models() -> dict:
    """The model table as the workflow passes it to tables and figures."""
    from decodegap.core.config import load_models

    return {k: {"display_name": m.display_name, "architecture": dict(m.architecture)} for k, m in load_models().items()}
