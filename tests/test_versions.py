"""The plan of which code version a fused cell still lacks a machine for (decodegap.analysis.versions):
the headline it names must be the one the report takes (stats.newest_code_sessions), and the call it
prints must pin the right commit, stage from that version's own record and number each session free."""

import json
import subprocess
from pathlib import Path

import pytest

from decodegap.analysis import versions
from decodegap.analysis.stats import newest_code_sessions

FUSED, POOLED = "ab-graphed-fused", "ab-static-graphed"
A, B, C = "a" * 64, "b" * 64, "c" * 64  # sources versions, oldest first


def write(raw: Path, model: str, ctx: int, quant: str, mode: str, session: int, sources: str, machine: str, hour: int,
          status="valid", reasons=(), record="h200@20261206T093748Z.json", gpu="h200", attn="sdpa") -> None:
    path = raw / gpu / model / f"ctx{ctx}" / f"{attn}_{quant}_{mode}" / f"s{session:02d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "cell": {"gpu": gpu, "model": model, "ctx": ctx, "attn": attn, "quant": quant, "mode": mode},
        "session": session, "status": status, "reasons": list(reasons),
        "code": {"commit": sources[0] * 40, "sources_sha256": sources},
        "environment": {"gpu": {"uuid": f"GPU-{machine}"}, "environment_record": {"path": f"/tmp/dg/results/environment/{record}"}},
        "time": {"started_utc": f"2026-12-06T{hour:02d}:00:00+00:00"}}))


@pytest.fixture
def raw(tmp_path):
    raw = tmp_path / "results" / "raw"
    # Qwen bf16: A on two machines heads it; B, newer, on one machine waits
    write(raw, "qwen2.5-7b", 2048, "bf16", FUSED, 0, A, "m1", 1)
    write(raw, "qwen2.5-7b", 2048, "bf16", FUSED, 1, A, "m2", 2)
    write(raw, "qwen2.5-7b", 2048, "bf16", FUSED, 2, B, "m3", 5, record="h200@B.json")
    # ... and a newer C session that ran out of memory: data, not a version that completed; its number is taken
    write(raw, "qwen2.5-7b", 2048, "bf16", FUSED, 3, C, "m4", 6, status="invalid", reasons=["oom: CUDA out of memory"])
    # Qwen fp8: B twice on one machine (one unstable, still completed) heads it, on one machine
    write(raw, "qwen2.5-7b", 2048, "fp8", FUSED, 0, A, "m1", 1)
    write(raw, "qwen2.5-7b", 2048, "fp8", FUSED, 4, B, "m3", 5, record="h200@B.json")
    write(raw, "qwen2.5-7b", 2048, "fp8", FUSED, 5, B, "m3", 5, status="invalid", reasons=["unstable: rel stdev 0.2"], record="h200@B.json")
    # Llama bf16: B on two machines heads it: nothing wanted
    write(raw, "llama-3.1-8b", 2048, "bf16", FUSED, 0, B, "m3", 5)
    write(raw, "llama-3.1-8b", 2048, "bf16", FUSED, 1, B, "m5", 7)
    # a graphed A/B cell (not an own kernel's): pooled over versions, on one machine
    write(raw, "qwen2.5-7b", 2048, "bf16", POOLED, 0, A, "m1", 1)
    write(raw, "qwen2.5-7b", 2048, "bf16", POOLED, 1, B, "m1", 5)
    return raw


def test_the_headline_is_the_reports_and_the_newest_waiting_version_is_asked_for_at_a_free_number(raw):
    rows = versions.scan(raw.resolve())
    cells = versions.cell_versions([r for r in rows if r["mode"] == FUSED])
    for cell, info in cells.items():  # the report's rule, on the same sessions
        sessions = [r for r in rows if tuple(r[k] for k in versions.CELL_KEYS) == cell]
        listing = [{"session": r["session"], "sources_sha256": r["sources"], "started_utc": r["started"]} for r in sessions]
        ours = newest_code_sessions(listing, {r["session"] for r in sessions if r["completed"]})
        assert info["headline"] == (ours[0] if ours else info["versions"][0]["sources"]), cell
    qwen_bf16 = cells[("h200", "qwen2.5-7b", 2048, "sdpa", "bf16", FUSED)]
    assert qwen_bf16["headline"] == A and qwen_bf16["versions"][0]["sources"] == B and qwen_bf16["next"] == 4
    want = versions.wanting(cells)
    assert set(want) == {B}  # not A (heads on two machines), not C (never completed)
    assert {cell[1:5] for cell, _, _ in want[B]} == {("qwen2.5-7b", 2048, "sdpa", "bf16"), ("qwen2.5-7b", 2048, "sdpa", "fp8")}


def test_the_printed_call_pins_the_versions_commit_stages_from_its_record_and_numbers_each_session_free(raw):
    text = versions.report(versions.scan(raw.resolve()), here="f" * 64)
    assert f"bash envs/pin_code.sh {'b' * 40}" in text and "SHAPES_FROM=results/environment/h200@B.json" in text
    assert "B --models qwen2.5-7b --ctx 2048 --modes ab-graphed-fused --attn sdpa --quant bf16 --sessions 4" in text
    assert "B --models qwen2.5-7b --ctx 2048 --modes ab-graphed-fused --attn sdpa --quant fp8 --sessions 6" in text
    assert "llama-3.1-8b" not in text.split("ab-static-graphed")[0].split("wants another machine")[1]
    pooled = text.split(f"h200 {POOLED}")[1]
    assert "1 cells ran on one machine: any code records a second" in pooled and "--sessions 2" in pooled
    # the version this checkout's code records needs no pinned tree
    here = versions.report(versions.scan(raw.resolve()), here=B)
    assert "pin_code.sh" not in here and "this checkout's code" in here


def test_contexts_with_the_same_cards_share_one_batch_line():
    cell = lambda model, ctx: ("h200", model, ctx, "sdpa", "fp8", FUSED)  # noqa: E731
    entries = [(cell(m, c), None, 17) for m in ("qwen2.5-7b", "mistral-7b-v0.3") for c in (2048, 16384)] + [(cell("qwen2.5-7b", 8192), None, 17)]
    assert versions.batch_lines(entries) == [
        "B --models mistral-7b-v0.3 qwen2.5-7b --ctx 2048 16384 --modes ab-graphed-fused --attn sdpa --quant fp8 --sessions 17",
        "B --models qwen2.5-7b --ctx 8192 --modes ab-graphed-fused --attn sdpa --quant fp8 --sessions 17"]


def test_a_corrupt_session_file_is_named_and_a_folder_that_is_not_results_raw_refused(raw, tmp_path, capsys):
    bad = raw / "h200" / "qwen2.5-7b" / "ctx2048" / "sdpa_bf16_ab-graphed-fused" / "s09.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="s09.json"):
        versions.scan(raw.resolve())
    with pytest.raises(SystemExit):
        versions.main(["--raw", str(tmp_path)])
    assert "not a results/raw folder" in capsys.readouterr().err


def run_call(command: str, device_name: str, tree: Path) -> str:
    """The call's command as the device runs it, in a tree whose envs/lent_gpu.sh (at the root and in
    each pinned folder) only says what it was asked, under an nvidia-smi that names the device."""
    (tree / "bin").mkdir(parents=True, exist_ok=True)
    smi = tree / "bin" / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{device_name}'\n")
    smi.chmod(0o755)
    for folder in (tree, tree / ".pinned-h200", tree / ".pinned-h100-sxm5"):
        (folder / "envs").mkdir(parents=True, exist_ok=True)
        (folder / "envs" / "lent_gpu.sh").write_text(
            'stage() { echo "stage in ${PWD##*/} SHA=$SHA TUNE_S=$TUNE_S ATTN_PATHS=$ATTN_PATHS QUANT_PATHS=$QUANT_PATHS SHAPES_FROM=$SHAPES_FROM"; }\n'
            'daemon() { echo "daemon [$1] $2"; }\ncollect() { echo "collect $1"; }\n')
    env = {"PATH": f"{tree / 'bin'}:/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", command], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout


def test_one_call_runs_the_plan_of_whichever_gpu_type_it_lands_on(raw, tmp_path, capsys, monkeypatch):
    # an H100 cell whose version C ran on one machine: the call's second branch
    write(raw, "qwen2.5-7b", 2048, "int4-tinygemm", FUSED, 0, C, "h1", 8, gpu="h100-sxm5", record="h100-sxm5@C.json")
    rows = versions.scan(raw.resolve())
    pins, carry, command = versions.call(rows, here="f" * 64)
    assert pins == [f"bash envs/pin_code.sh {'c' * 40} .pinned-h100-sxm5", f"bash envs/pin_code.sh {'b' * 40} .pinned-h200"]
    assert carry == [".pinned-h100-sxm5", ".pinned-h200"]
    # the device is told by its name as a measurement tells it (config/gpus.yaml, any case, the longest match)
    tree = tmp_path / "tree"
    h200 = run_call(command, "NVIDIA H200", tree)
    assert f"stage in .pinned-h200 SHA={'b' * 40} TUNE_S=0 ATTN_PATHS=sdpa QUANT_PATHS=bf16 fp8 SHAPES_FROM=results/environment/h200@B.json" in h200
    # after the version's own lines, the pooled cell on one machine rides along (any code records its second)
    assert "--quant bf16 --sessions 4; B " in h200 and "collect 585" in h200
    assert "--quant fp8 --sessions 6; B --models qwen2.5-7b --ctx 2048 --modes ab-static-graphed --attn sdpa --quant bf16 --sessions 2] 575" in h200
    assert "int4-tinygemm" not in h200 and "llama-3.1-8b" not in h200
    h100 = run_call(command, "NVIDIA H100 80GB HBM3", tree)
    assert f"stage in .pinned-h100-sxm5 SHA={'c' * 40} TUNE_S=0 ATTN_PATHS=sdpa QUANT_PATHS=int4-tinygemm SHAPES_FROM=results/environment/h100-sxm5@C.json" in h100
    assert "--quant int4-tinygemm --sessions 1]" in h100
    assert "no plan for the device NVIDIA L40S" in run_call(command, "NVIDIA L40S", tree)
    assert "no plan for the device NVIDIA L4" in run_call(command, "NVIDIA L4", tree)
    # the version this checkout records runs from the tree's root at its own commit
    _, carry_here, here = versions.call(rows, here=B, head="9" * 40)
    assert carry_here == [".pinned-h100-sxm5"] and f"stage in tree SHA={'9' * 40} " in run_call(here, "NVIDIA H200", tree)
    # a pooled cell on a path whose package a lent GPU lacks (fa3: a carried wheel) never rides along
    write(raw, "qwen2.5-7b", 16384, "bf16", POOLED, 0, A, "m1", 1, attn="fa3")
    rows = versions.scan(raw.resolve())
    assert "fa3" not in versions.call(rows, here="f" * 64)[2]
    # ride-alongs are dropped where the command would pass a call's length; the version's own lines stay
    full = versions.call(rows, here="f" * 64)[2]
    monkeypatch.setattr(versions, "COMMAND_LIMIT_CHARS", len(full) - 1)
    short = versions.call(rows, here="f" * 64)[2]
    assert "ab-static-graphed" not in short and "--quant fp8 --sessions 6]" in run_call(short, "NVIDIA H200", tree)
    monkeypatch.undo()
    # a type where only pooled cells wait runs them on this checkout's code, staged from the table
    write(raw, "qwen2.5-7b", 2048, "bf16", POOLED, 0, A, "l1", 1, gpu="l40s")
    l40s = run_call(versions.call(versions.scan(raw.resolve()), here="f" * 64, head="9" * 40)[2], "NVIDIA L40S", tree)
    assert f"stage in tree SHA={'9' * 40} TUNE_S=0 ATTN_PATHS=sdpa QUANT_PATHS=bf16 SHAPES_FROM=" in l40s
    assert "--modes ab-static-graphed --attn sdpa --quant bf16 --sessions 1]" in l40s
    # a command longer than a call takes is refused, naming the way out
    monkeypatch.setattr(versions, "COMMAND_LIMIT_CHARS", 200)
    assert versions.print_call(rows) == 1 and "--gpu" in capsys.readouterr().err
    # nothing waiting: no command
    assert versions.call([r for r in rows if r["model"] == "llama-3.1-8b"]) == ([], [], "")


def test_which_paths_ride_along_is_read_from_each_units_declared_package():
    # read without importing the measurement wing, it must say what the loaded registries say
    from decodegap.core.registry import unit_package
    from decodegap.measure.attention import PATHS as ATTENTION
    from decodegap.measure.weights import PATHS as WEIGHTS

    for kind, paths in (("attention", ATTENTION), ("weights", WEIGHTS)):
        for name, unit in paths.items():
            assert unit_package(kind, name) == unit.package, (kind, name)
    assert unit_package("weights", "no-such-path") is None
    cell = lambda attn, quant: ("h200", "qwen2.5-7b", 2048, attn, quant, POOLED)  # noqa: E731
    assert versions.built_in(cell("sdpa-cudnn", "int4-triton")) and versions.built_in(cell("flex", "bf16"))
    assert not versions.built_in(cell("fa3", "bf16")) and not versions.built_in(cell("sdpa", "gptq-exllamav2"))
    assert not versions.built_in(cell("sdpa", "gguf-q4-0"))
