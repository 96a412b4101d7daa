"""The batch runner a lent GPU is filled with: fresh processes, skip what is recorded, stop before
the deadline, never touch an existing session."""

import os
import subprocess
import sys

from conftest import FAST
from decodegap.core import paths
from decodegap.core.record import read_session


def run_batch(root, *args, pycache=None):
    cmd = [sys.executable, "-m", "decodegap.measure.batch", "--root", str(root), "--gpu", "cpu", "--models", "tiny-llama",
           "--ctx", "32", "--modes", "eager", *args]
    if pycache:
        cmd += ["--pycache", str(pycache)]
    return subprocess.run(cmd + ["--", *FAST], capture_output=True, text=True, cwd=root, timeout=600)


def session(root, s):
    return paths.session_path(gpu="cpu", model="tiny-llama", ctx=32, attn="sdpa", quant="bf16", mode="eager", session=s, root=root)


def test_batch_measures_skips_recorded_and_keeps_compiled_modules(tmp_path):
    pycache = tmp_path / "pyc"
    proc = run_batch(tmp_path, "--sessions", "0", "1", "--log-dir", str(tmp_path / "logs"), pycache=pycache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 sessions planned, 0 already recorded, 2 to measure" in proc.stdout
    first = {s: session(tmp_path, s).read_bytes() for s in (0, 1)}
    assert all(read_session(session(tmp_path, s))["session"] == s for s in (0, 1))
    assert len(list((tmp_path / "logs").glob("*.log"))) == 2
    # Each session's child process compiled into the prefix, so later sessions skip compiling.
    assert list(pycache.rglob("decodegap/measure/session.*.pyc"))  # the prefix mirrors the source tree

    cpu = min(os.sched_getaffinity(0))
    again = run_batch(tmp_path, "--sessions", "0", "1", "2", "--cpus", str(cpu), pycache=pycache)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 sessions planned, 2 already recorded, 1 to measure" in again.stdout
    assert {s: session(tmp_path, s).read_bytes() for s in (0, 1)} == first  # recorded sessions untouched
    assert read_session(session(tmp_path, 2))["environment"]["host_start"]["cpu_affinity"] == [cpu]  # pinned


def test_batch_skips_a_session_a_manifest_lists_though_its_file_is_not_here(tmp_path):
    """A lent GPU's call carries the tree's manifest but not results/raw/ (too large): a session the
    manifest lists is recorded, so the batch never measures it again (as the workflow plans)."""
    tree = tmp_path / "tree"
    listed = session(".", 0).as_posix()
    (tree / "results").mkdir(parents=True)
    (tmp_path / "dg").mkdir()
    (tree / "results" / "raw.sha256").write_text(f"{'a' * 64}  {listed}\n")
    proc = run_batch(tmp_path / "dg", "--sessions", "0", "1", "--listed-in", str(tree), "--deadline-s", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 sessions planned, 1 already recorded, 1 to measure" in proc.stdout
    assert "2 sessions planned, 0 already recorded, 2 to measure" in run_batch(tmp_path / "dg", "--sessions", "0", "1", "--deadline-s", "0").stdout


def test_batch_starts_nothing_past_its_deadline(tmp_path):
    proc = run_batch(tmp_path, "--sessions", "0", "1", "--deadline-s", "10", "--reserve-s", "20")
    assert proc.returncode == 0
    assert "deadline: 2 sessions left for a later call" in proc.stdout
    assert not session(tmp_path, 0).exists()


def test_batch_refuses_cpus_it_may_not_run_on(tmp_path):
    proc = run_batch(tmp_path, "--sessions", "0", "--cpus", "4096")
    assert proc.returncode == 2 and "--cpus [4096]: this process may run only on CPUs" in proc.stderr
    assert not session(tmp_path, 0).exists()


def test_llamacpp_cells_run_card_by_card_and_each_mode_gets_the_formats_it_reads():
    """The machine's GGUF cache holds about two cards' files: a batch over three cards runs all of one
    card's formats and contexts before the next card's, and never plans a mode with a path it cannot read."""
    import argparse

    from decodegap.measure.batch import planned

    args = argparse.Namespace(gpu="h200", models=["qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b"], ctx=[2048, 16384],
                              modes=["generate", "llamacpp"], sessions=[0, 1], attn=["sdpa"], quant=["bf16", "gguf-f16", "gguf-q8-0"])
    cells = planned(args)
    assert {(c["mode"], c["quant"]) for c in cells} == {("generate", "bf16"), ("llamacpp", "gguf-f16"), ("llamacpp", "gguf-q8-0")}
    s0 = [c for c in cells if c["session"] == 0]
    assert [c["session"] for c in cells] == sorted(c["session"] for c in cells)  # every first session before any second
    engine_models = [c["model"] for c in s0 if c["mode"] == "llamacpp"]
    assert engine_models == [m for m in args.models for _ in range(4)]  # 2 formats x 2 contexts per card, card after card
    assert len(cells) == 2 * 3 * 2 * 3
