"""The plan of which code version a fused cell still lacks a machine for (decodegap.analysis.versions):
the headline it names must be the one the report takes (stats.newest_code_sessions), and the call it
prints must pin the right commit, stage from that version's own record and number each session free."""

import json
from pathlib import Path

import pytest

from decodegap.analysis import versions
from decodegap.analysis.stats import newest_code_sessions

FUSED, POOLED = "ab-graphed-fused", "ab-static-graphed"
A, B, C = "a" * 64, "b" * 64, "c" * 64  # sources versions, oldest first


def write(raw: Path, model: str, ctx: int, quant: str, mode: str, session: int, sources: str, machine: str, hour: int,
          status="valid", reasons=(), record="h200@20261206T093748Z.json") -> None:
    path = raw / "h200" / model / f"ctx{ctx}" / f"sdpa_{quant}_{mode}" / f"s{session:02d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "cell": {"gpu": "h200", "model": model, "ctx": ctx, "attn": "sdpa", "quant": quant, "mode": mode},
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
