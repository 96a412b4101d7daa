"""Beyond the paper, through the pipeline: the floor experiment's cells (modes compiled and fused as
A/B arms against graphed), its table with the paired speedup and the speedup over bf16 graphed,
each number recomputable from the raw sessions, and a path that cannot compose as its reason."""

import json

import numpy as np
import pytest

from decodegap.core.config import load_gpus, load_models


def _workspace(tmp_path):
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import synthetic

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    w_bf16 = load_models()["qwen2.5-7b"].param_count() * 2
    cells, files = [], []
    for quant, base_ms, w in (("bf16", 8.0, None), ("int4-tinygemm", 6.5, w_bf16 // 3)):
        for mode in ("ab-graphed-compiled", "ab-graphed-fused"):
            cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant=quant, mode=mode)
            cells.append(cell)
            if quant == "int4-tinygemm" and mode == "ab-graphed-fused":
                records = [synthetic.not_possible_record(cell, s, "the fused step's logits differ from the model's") for s in range(2)]
            else:
                records = [synthetic.record(cell, s, 64, np.random.default_rng([s, len(quant), len(mode)]), base_ms=base_ms, weight_bytes=w)
                           for s in range(2)]
            files.append(fixture_cell_stats(tmp_path, cell, records))
    return cells, files, gpus, fixture_models()


def test_the_floor_table_gives_each_lever_against_graphed_and_bf16(tmp_path):
    from decodegap.analysis import provenance, tables

    cells, files, gpus, models = _workspace(tmp_path)
    tables.floor_table(files, cells, gpus, models, tmp_path / "f.tex", tmp_path / "f.json")
    tex, numbers = (tmp_path / "f.tex").read_text(), json.loads((tmp_path / "f.json").read_text())
    stats = [json.loads(f.read_text())["completed"] for f in files]
    bf16_graphed = stats[0]["arms"]["graphed"]["median_ms"]
    fused = stats[1]["arms"]["fused"]["median_ms"]
    cid = "h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-fused"
    over = numbers[f"floor/over_bf16_graphed/{cid}/fused/completed"]
    assert over["value"] == pytest.approx(bf16_graphed / fused) and 1.5 < over["value"] < 1.8  # fused at 0.6 of graphed
    paired = numbers[f"floor/speedup/{cid}/completed"]
    assert paired["value"] == pytest.approx(stats[1]["speedup"]["estimate"]) and stats[1]["speedup"]["of"] == "fused"
    assert numbers[f"floor/r_floor/{cid}/fused/completed"]["value"] == pytest.approx(stats[1]["arms"]["fused"]["r_floor"])
    # int4 compiled is measured against the bf16 graphed step; int4 fused cannot run, with its reason
    int4 = "h200/qwen2.5-7b/ctx2048/sdpa_int4-tinygemm_ab-graphed-compiled"
    assert numbers[f"floor/over_bf16_graphed/{int4}/compiled/completed"]["value"] == pytest.approx(
        bf16_graphed / stats[2]["arms"]["compiled"]["median_ms"])
    assert r"\texttt{int4-tinygemm} & fused & \multicolumn{9}{l}{cannot run\textsuperscript{a}}" in tex
    assert "int4-tinygemm fused: not possible: the fused step" in tex
    # every kind of number recomputes from its raw sessions
    # the bytes a step streams over the step, and that against the session's copy bandwidth
    a = stats[1]["arms"]["fused"]
    streamed = (a["weight_bytes_no_embedding"] + a["kv_bytes"]) / (a["median_ms"] / 1e3)
    assert numbers[f"floor/streamed_TBps/{cid}/fused/completed"]["value"] == pytest.approx(streamed * 1e-12)
    assert numbers[f"floor/streamed_over_copy/{cid}/fused/completed"]["value"] == pytest.approx(100 * streamed / a["copy_bandwidth_Bps"])
    for key in (f"floor/over_bf16_graphed/{cid}/fused/completed", f"floor/speedup/{cid}/completed",
                f"floor/kernels_per_step/{cid}/fused/completed", f"floor/ms_per_step/{int4}/compiled/completed",
                f"floor/streamed_TBps/{cid}/fused/completed", f"floor/streamed_over_copy/{cid}/fused/completed"):
        value, text = provenance.recompute(numbers[key])
        assert value == pytest.approx(numbers[key]["value"]) and text == numbers[key]["text"], key


def test_the_plan_measures_compiled_and_fused_per_card_context_and_path(tmp_path):
    from conftest import small_config

    from decodegap.core.cells import Plan

    config = small_config()
    config["floor"] = {"gpus": ["h200"], "models": ["qwen2.5-7b", "llama-3.1-8b"], "ctx": [2048, 16384], "attn": "sdpa",
                       "quant": ["bf16", "int4-tinygemm"], "modes": ["ab-graphed-compiled", "ab-graphed-fused"], "sessions": 3}
    plan = Plan(config, root=tmp_path)
    assert len(plan.floor) == 2 * 2 * 2 * 2 and all(plan.wanted[c] == 3 for c in plan.floor)
    assert plan.cell_set("floor") == plan.floor and "int4-tinygemm" in plan.environment_paths("h200")[1]
    assert plan.floor_stats("bf16") == [] and plan.floor_cells()[0]["mode"] == "ab-graphed-compiled"


def test_compiled_quant_limits_the_compiled_arm_to_its_paths_and_names_a_stray_path(tmp_path):
    from conftest import small_config

    from decodegap.core.cells import Plan, validate_config
    from decodegap.core.errors import ConfigError

    config = small_config()
    config["floor"] = {"gpus": ["h200"], "models": ["qwen2.5-7b"], "ctx": [2048], "attn": "sdpa", "quant": ["bf16", "fp8"],
                       "compiled_quant": ["bf16"], "modes": ["ab-graphed-compiled", "ab-graphed-fused"], "sessions": 2}
    cells = {(c.quant, c.mode) for c in Plan(config, root=tmp_path).floor}
    assert cells == {("bf16", "ab-graphed-compiled"), ("bf16", "ab-graphed-fused"), ("fp8", "ab-graphed-fused")}
    config["floor"]["compiled_quant"] = ["bf16", "int4-tinygemm"]
    with pytest.raises(ConfigError, match=r"floor\.compiled_quant\.1: 'int4-tinygemm' is not one of floor\.quant"):
        validate_config(config)


def test_a_path_that_does_not_compose_is_a_config_error_naming_the_key():
    from conftest import small_config

    from decodegap.core.cells import validate_config
    from decodegap.core.errors import ConfigError

    config = small_config()
    config["floor"] = {**config["floor"], "gpus": ["h200"], "quant": ["gemlite"]}
    with pytest.raises(ConfigError, match=r"floor.*quant.*gemlite"):
        validate_config(config)


def test_the_gap_table_takes_the_fused_step_apart_and_a_cell_of_two_code_versions_says_so(tmp_path):
    """GEMV and attention kernels (from the profiler pass) beside the same bytes at the copy
    bandwidth, the other kernels, the step outside the GPU's busy time; each recomputable. A cell
    whose sessions ran two versions of the measured code says what each gave, in the floor table; a
    newer version with one session waits (the older version's two are the headline), and with one
    session of each, all of them are."""
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import provenance, synthetic, tables

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="ab-graphed-fused")
    records = [synthetic.record(cell, s, 64, np.random.default_rng(s), base_ms=8.0) for s in range(3)]
    for rec in records:
        fused = rec["arms"][1]["anatomy"]
        fused["kernels"] = [{"name": "_gate_up_kernel", "calls_per_step": 28.0, "ms_per_step": 2.0},
                            {"name": "_linear_kernel", "calls_per_step": 57.0, "ms_per_step": 1.5},
                            {"name": "_attention_split_kernel", "calls_per_step": 28.0, "ms_per_step": 0.2},
                            {"name": "void at::native::reduce_kernel<argmax>", "calls_per_step": 1.0, "ms_per_step": 0.01}]
    records[2]["code"]["sources_sha256"] = "1" * 64  # a session of newer kernels
    stats_file = fixture_cell_stats(tmp_path, cell, records)
    st = json.loads(stats_file.read_text())
    assert st["newest_code"]["sources_sha256"] == records[0]["code"]["sources_sha256"]  # one session of the newer code: it waits
    assert st["newest_code"]["arms"]["fused"]["n_sessions"] == 2
    tables.gap_table([stats_file], [cell], gpus, fixture_models(), tmp_path / "g.tex", tmp_path / "g.json")
    numbers = json.loads((tmp_path / "g.json").read_text())
    a = st["newest_code"]["arms"]["fused"]
    cid = "h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-fused"
    assert numbers[f"gap/gemv_ms/{cid}/newest_code"]["value"] == pytest.approx(3.5)
    assert numbers[f"gap/attention_ms/{cid}/newest_code"]["value"] == pytest.approx(0.2)
    assert numbers[f"gap/gemv_at_copy_ms/{cid}/newest_code"]["value"] == pytest.approx(a["weight_bytes_no_embedding"] / a["copy_bandwidth_Bps"] * 1e3)
    busy = a["anatomy"]["gpu_busy_ms_per_step"]
    assert numbers[f"gap/other_ms/{cid}/newest_code"]["value"] == pytest.approx(busy - 3.7)
    assert numbers[f"gap/outside_ms/{cid}/newest_code"]["value"] == pytest.approx(a["median_ms"] - busy)
    for key in (f"gap/gemv_ms/{cid}/newest_code", f"gap/outside_ms/{cid}/newest_code", f"gap/gemv_at_copy_ms/{cid}/newest_code"):
        value, text = provenance.recompute(numbers[key])
        assert text == numbers[key]["text"], key
    tables.floor_table([stats_file], [cell], gpus, fixture_models(), tmp_path / "f.tex", tmp_path / "f.json")
    tex = (tmp_path / "f.tex").read_text()
    old = records[0]["code"]["sources_sha256"][:8]
    assert f"bf16 fused, the 2 sessions of the newest code with two or more ({old}) as the headline; sessions of 2 versions" in tex
    assert "11111111 " in tex
    two = [synthetic.record(cell, s, 64, np.random.default_rng(s), base_ms=8.0) for s in range(2)]
    two[1]["code"]["sources_sha256"] = "1" * 64
    one_each = fixture_cell_stats(tmp_path / "one_each", cell, two)
    assert "newest_code" not in json.loads(one_each.read_text())  # no version with two sessions: all of them are the headline
    tables.floor_table([one_each], [cell], gpus, fixture_models(), tmp_path / "f1.tex", tmp_path / "f1.json")
    assert "bf16 fused, all of them in the headline; sessions of 2 versions of the measured code" in (tmp_path / "f1.tex").read_text()


def test_the_fused_step_of_a_cell_spanning_code_versions_is_headlined_by_its_newest_code(tmp_path):
    """Three sessions of older kernels, then two of newer ones: the floor and gap tables show the newer
    kernels' two sessions (an interval across kernel versions would measure the change, not the
    machines), the footnote says what every version gave, the graphed arm keeps all five sessions,
    and every number recomputes from the raw files."""
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import provenance, synthetic, tables

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="ab-graphed-fused")
    records = [synthetic.record(cell, s, 64, np.random.default_rng(s), base_ms=8.0) for s in range(5)]
    for s, rec in enumerate(records):
        rec["time"]["started_utc"] = f"2026-01-0{s + 1}T00:00:00+00:00"
        if s >= 3:  # the newer kernels: a faster fused arm
            rec["code"]["sources_sha256"] = "1" * 64
            rec["arms"][1]["timed"]["host_ms"] = [x * 0.8 for x in rec["arms"][1]["timed"]["host_ms"]]
            rec["arms"][1]["timed"]["device_ms"] = [x * 0.8 for x in rec["arms"][1]["timed"]["device_ms"]]
        rec["arms"][1]["anatomy"]["kernels"] = [{"name": "_linear_kernel", "calls_per_step": 57.0, "ms_per_step": 1.5},
                                                {"name": "_attention_split_kernel", "calls_per_step": 28.0, "ms_per_step": 0.2}]
    stats_file = fixture_cell_stats(tmp_path, cell, records)
    st = json.loads(stats_file.read_text())
    newest, completed = st["newest_code"], st["completed"]
    assert newest["sources_sha256"] == "1" * 64 and newest["arms"]["fused"]["n_sessions"] == 2
    assert newest["arms"]["fused"]["median_ms"] < 0.9 * completed["arms"]["fused"]["median_ms"]
    tables.floor_table([stats_file], [cell], gpus, fixture_models(), tmp_path / "f.tex", tmp_path / "f.json")
    numbers = json.loads((tmp_path / "f.json").read_text())
    cid = "h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-fused"
    fused = numbers[f"floor/ms_per_step/{cid}/fused/newest_code"]
    assert fused["value"] == pytest.approx(newest["arms"]["fused"]["median_ms"])
    assert f"floor/ms_per_step/{cid}/fused/completed" not in numbers
    assert numbers[f"floor/ms_per_step/{cid}/graphed/completed"]["value"] == pytest.approx(completed["arms"]["graphed"]["median_ms"])
    assert numbers[f"floor/speedup/{cid}/newest_code"]["value"] == pytest.approx(newest["speedup"]["estimate"])
    tex = (tmp_path / "f.tex").read_text()
    assert "bf16 fused, the 2 sessions of the newest code with two or more (11111111) as the headline; sessions of 2 versions" in tex
    assert "(per version, the median of its sessions' medians)" in tex
    tables.gap_table([stats_file], [cell], gpus, fixture_models(), tmp_path / "g.tex", tmp_path / "g.json")
    gap = json.loads((tmp_path / "g.json").read_text())
    assert gap[f"gap/ms_per_step/{cid}/newest_code"]["value"] == pytest.approx(fused["value"])
    for key, entry in [*numbers.items(), *gap.items()]:
        if entry.get("value") is not None:
            assert provenance.recompute(entry)[1] == entry["text"], key


def test_the_gap_table_splits_the_busy_time_only_with_kernel_times_that_add_up(tmp_path):
    """Under programmatic dependent launch the profiler's per-kernel times overlap (a kernel waits
    inside the one before): without the exclusive times a session records from 2026-12-02 on, the GEMV,
    attention and other columns stay empty rather than go negative; with them, they split the busy time."""
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import synthetic, tables

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="ab-graphed-fused")
    cid = "h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-fused"
    for exclusive in (False, True):
        records = [synthetic.record(cell, s, 64, np.random.default_rng(s), base_ms=8.0) for s in range(2)]
        for rec in records:
            an = rec["arms"][1]["anatomy"]
            busy = an["gpu_busy_ms_per_step"]
            an["kernels"] = [{"name": "_gate_up_kernel", "calls_per_step": 28.0, "ms_per_step": 0.6 * busy},
                             {"name": "_add_norm_kernel", "calls_per_step": 57.0, "ms_per_step": 0.4 * busy},  # mostly waiting
                             {"name": "_attention_split_kernel", "calls_per_step": 28.0, "ms_per_step": 0.3 * busy}]
            if exclusive:
                for k, share in zip(an["kernels"], (0.7, 0.2, 0.1)):
                    k["exclusive_ms_per_step"] = share * busy
        out = tmp_path / f"x{exclusive}"
        out.mkdir()
        stats_file = fixture_cell_stats(out, cell, records)
        tables.gap_table([stats_file], [cell], gpus, fixture_models(), out / "g.tex", out / "g.json")
        numbers = json.loads((out / "g.json").read_text())
        busy = json.loads(stats_file.read_text())["completed"]["arms"]["fused"]["anatomy"]["gpu_busy_ms_per_step"]
        assert numbers[f"gap/outside_ms/{cid}/completed"]["value"] is not None
        if exclusive:
            gemv, other = numbers[f"gap/gemv_ms/{cid}/completed"], numbers[f"gap/other_ms/{cid}/completed"]
            assert gemv["value"] == pytest.approx(0.7 * busy, rel=0.05) and other["value"] == pytest.approx(0.2 * busy, rel=0.1)
        else:  # no number at all: the row's three parts print as --
            assert not {f"gap/{q}_ms/{cid}/completed" for q in ("gemv", "attention", "other")} & numbers.keys()
            assert "& -- & " in (out / "g.tex").read_text()
