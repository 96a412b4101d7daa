"""fused_kernels.tune_step: each role's GEMV shape chosen in the whole step. Its decisions are checked
with a step timer that reads the shapes the model was given (a GPU's timings are not available here),
and the real timer runs the kernels once under Triton's interpreter, the model still giving its logits."""

import dataclasses

import pytest

pytest.importorskip("triton")

from decodegap.measure import fused_kernels as fk  # noqa: E402
from decodegap.core.config import load_models  # noqa: E402
from decodegap.measure.cards import build_model  # noqa: E402
from decodegap.measure.fused import FusedModel, logit_check  # noqa: E402
from decodegap.measure.weights import get_weight_path  # noqa: E402

_card = load_models()["tiny-llama"]
WIDE = dataclasses.replace(_card, architecture={**_card.architecture, "hidden_size": 256, "intermediate_size": 256, "head_dim": 64})
FAST_DOWN = fk.GemvConfig(2, 64, 4)  # 5 % off the step: taken
TINY_O = fk.GemvConfig(8, 64, 4)  # 0.2 % off: under min_gain, not taken
FLAKY_QKV = fk.GemvConfig(1, 64, 4)  # fast the first time it is timed, not the second: the confirmation refuses it


def _net():
    return FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton")


def _timer(net):
    seen = {"flaky": 0}

    def ms():
        t = 10.0
        if net.gemv["down"] == FAST_DOWN:
            t -= 0.5
        if net.gemv["o"] == TINY_O:
            t -= 0.02
        if net.gemv["qkv"] == FLAKY_QKV:
            seen["flaky"] += 1
            t -= 1.0 if seen["flaky"] <= 1 else -0.1
        return t
    return ms


def test_a_shape_is_taken_only_when_it_beats_the_current_by_the_margin_twice():
    net = _net()
    table = net.shapes
    cands = {"dense": [FAST_DOWN, TINY_O, FLAKY_QKV]}
    spec, report = fk.refine_in_step(net, 20, candidates=cands, roles=("down", "o", "qkv"), repeats=1, time_ms=_timer(net), log=lambda m: None)
    got = fk.resolve(spec, "cpu")
    assert got.gemv_for("dense", "down", 256) == FAST_DOWN and net.gemv["down"] == FAST_DOWN  # the net is left at the choice
    assert got.gemv_for("dense", "o", 256) == table.gemv_for("dense", "o", 256)  # 1.002x: under the 0.5 % margin
    assert got.gemv_for("dense", "qkv", 256) == table.gemv_for("dense", "qkv", 256)  # the second comparison disagreed
    (flaky,) = [t for t in report["trials"] if t.get("confirm") and t["role"] == "qkv"]
    assert flaky["taken"] is False and flaky["x_current"] < 1
    assert report["chosen"]["down"] == FAST_DOWN.as_dict() and report["x_start"] == pytest.approx(10.0 / 9.5)
    # only this card's width changes: another width keeps the table's shape
    assert got.gemv_for("dense", "down", 4096) == table.gemv_for("dense", "down", 4096)
    fresh = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton", gemv_configs=spec)
    assert fresh.describe()["gemv"]["down"] == FAST_DOWN.as_dict()


def test_a_spent_budget_skips_the_rest_and_leaves_the_start_and_a_refused_shape_is_a_trial_not_a_stop():
    net = _net()
    before = net.shapes
    spec, report = fk.refine_in_step(net, 20, candidates={"dense": [FAST_DOWN]}, budget_s=0, time_ms=_timer(net), log=lambda m: None)
    assert spec == before and report["skipped"] and not report["trials"] and report["x_start"] == 1.0 and not report["change"]
    net = _net()
    bad = fk.GemvConfig(4, 48, 4)  # block_k not a power of two: the kernel refuses it when the step runs
    with pytest.raises(Exception):
        net.set_launch_shapes({"gemv_by_hidden": {"256": {"dense": {"down": bad.as_dict()}}}})
        net.decode(*_token())
    net = _net()
    spec, report = fk.refine_in_step(net, 20, candidates={"dense": [bad, FAST_DOWN]}, roles=("down",), repeats=1, log=lambda m: None,
                                     time_ms=_real_then(net))
    (refused,) = [t for t in report["trials"] if "error" in t]
    assert refused["shape"] == bad.as_dict() and any(t.get("shape") == FAST_DOWN.as_dict() and "x_current" in t for t in report["trials"])


def _token():
    import torch

    return torch.zeros(1, dtype=torch.long), torch.full((1,), 20, dtype=torch.long)


def _real_then(net):
    """The real step (the kernels run, so a refused shape raises), its time read from the fake timer."""
    fake = _timer(net)

    def ms():
        net.decode(*_token())
        return fake()
    return ms


def test_the_real_timer_runs_the_step_and_the_refined_model_still_gives_the_models_logits():
    from decodegap.measure.fused_kernels.tune_step import step_timer

    model = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(model, get_weight_path("bf16"), 64, backend="triton")
    assert step_timer(net, 20)() > 0
    spec, report = fk.refine_in_step(net, 20, candidates={"dense": [FAST_DOWN]}, roles=("down",), repeats=1, min_gain=-1.0,
                                     log=lambda m: None)
    assert net.gemv["down"] == FAST_DOWN and report["start_ms"] and report["end_ms"]  # min_gain -1: any shape is taken
    check = logit_check(model, net, prompt_tokens=20, steps=2)
    assert check["rel_l2_max"] <= 1e-5 and check["agrees"], check


def test_by_default_each_role_climbs_through_its_neighbours_while_a_step_helps_and_stops_at_the_first_that_does_not():
    """The climb from the table's down: halving rows helps twice (3 % each), a third time not; the
    shape's other fields stay, and the number of confirmations says it climbed two steps."""
    net = _net()
    start = net.gemv["down"]

    def ms():
        rows = net.gemv["down"].rows
        return {start.rows: 10.0, start.rows // 2: 9.7, start.rows // 4: 9.4, start.rows // 8: 9.6}.get(rows, 10.2)

    spec, report = fk.refine_in_step(net, 20, roles=("down",), repeats=1, time_ms=ms, log=lambda m: None)
    got = fk.resolve(spec, "cpu").gemv_for("dense", "down", 256)
    assert got == dataclasses.replace(start, rows=start.rows // 4)  # block_k, warps, x_tile as they were
    assert [t["taken"] for t in report["trials"] if t.get("confirm")] == [True, True]
    assert report["x_start"] == pytest.approx(10.0 / 9.4) and report["change"]["gemv_by_hidden"]["256"]["dense"]["down"] == got.as_dict()
    tried = [fk.GemvConfig(**t["shape"]) for t in report["trials"] if not t.get("confirm")]
    assert len(tried) == len(set(tried)) and start not in tried  # no shape timed twice, the start never against itself


def test_a_neighbour_is_one_step_in_rows_block_k_warps_or_the_tile_and_keeps_the_rest():
    from decodegap.measure.fused_kernels.tune_step import neighbours

    shape = fk.GemvConfig(2, 512, 4, x_tile=True, load_ahead=True, f16_words=2)
    got = neighbours(shape)
    assert shape not in got and len(got) == len(set(got)) == 10
    assert all(g.load_ahead and g.f16_words == 2 for g in got)
    assert fk.GemvConfig(4, 256, 4, x_tile=True, load_ahead=True, f16_words=2) in got  # the same bytes a loop step, two rows more
    assert fk.GemvConfig(2, 512, 8, x_tile=True, load_ahead=True, f16_words=2) in got
    assert fk.GemvConfig(2, 512, 4, x_tile=False, load_ahead=True, f16_words=2) in got
    assert all(g.rows >= 1 for g in neighbours(fk.GemvConfig(1, 512, 4)))


def test_the_levers_a_net_was_built_with_stay_through_the_refinement():
    """A net built with levers off that its GPU's table has on (here the norm apart and x as float32 for
    int4: the CPU table has neither) is refined with those levers, and the result keeps them."""
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton",
                     gemv_configs={"norm": "sum", "x_fp32": {"int4": True}})
    before = net.shapes
    spec, report = fk.refine_in_step(net, 20, candidates={"dense": [FAST_DOWN]}, roles=("down",), repeats=1, time_ms=_timer(net),
                                     log=lambda m: None)
    assert spec == before.replace(gemv_by_hidden={**before.gemv_by_hidden, 256: {"dense": {"down": FAST_DOWN}}})
    assert net.shapes.norm_for("dense") == "sum" and net.shapes.x_fp32_for("int4", 256)


def test_a_candidate_that_fails_without_a_message_is_a_trial_named_by_its_error_type():
    net = _net()
    fake = _timer(net)

    def ms():
        if net.gemv["down"] == FAST_DOWN:
            raise RuntimeError()  # no message: the trial names the type
        return fake()

    spec, report = fk.refine_in_step(net, 20, candidates={"dense": [FAST_DOWN]}, roles=("down",), repeats=1, time_ms=ms, log=lambda m: None)
    assert [t["error"] for t in report["trials"]] == ["RuntimeError"] and not report["change"]


def test_the_stage_refines_each_card_width_for_each_fused_path_that_runs_and_its_sessions_take_the_choice():
    """setup.refine_fused: one card a width, every fused weight path the record says runs; the choice
    lands in the shapes the record keeps (a fresh model built from them gets it), a card that fails is
    its row's error while the other still runs, and no budget changes nothing."""
    from decodegap.measure import setup

    narrow = dataclasses.replace(WIDE, key="narrow", architecture={**WIDE.architecture, "hidden_size": 128, "head_dim": 32})
    broken = dataclasses.replace(WIDE, key="broken", architecture={**WIDE.architecture, "hidden_size": 192, "head_dim": 48})
    record = {"gpu": "cpu", "weights": {"bf16": {"runs": True}, "fp8": {"runs": True}, "int4-triton": {"runs": False, "reason": "not here"}}}
    shapes = fk.resolve(None, "cpu").as_dict()
    start = fk.resolve(shapes, "cpu").gemv_for("dense", "down", 256)
    better = dataclasses.replace(start, rows=start.rows // 2)

    def timer_for(net):
        if net.embed.shape[1] == 192:
            raise RuntimeError("this card's step failed")
        return lambda: 9.5 if net.gemv["down"] == better else 10.0

    logged, builds = [], []
    from decodegap.measure import cards as cards_module

    def counted_build(card, *a, **k):
        builds.append(card.key)
        return build_model(card, *a, **k)

    setup_log, setup.log, cards_module.build_model = setup.log, logged.append, counted_build
    try:
        spec, report = setup.refine_fused(record, None, 600, shapes, device="cpu", ctx=20, cards=[WIDE, narrow, broken],
                                          time_ms_for=timer_for)
        assert setup.refine_fused(record, None, 0, shapes, device="cpu", ctx=20, cards=[WIDE]) == (shapes, [])
    finally:
        setup.log, cards_module.build_model = setup_log, build_model
    # int4-triton does not run here: no row; each card is built once for its paths
    assert [(r["model"], r["quant"]) for r in report] == [(m, q) for m in ("narrow", "broken", WIDE.key) for q in ("bf16", "fp8")]
    assert builds == ["narrow", "broken", WIDE.key]  # the broken card builds; its failure is its step timer's, for both paths
    ok = {r["hidden"]: r for r in report if "error" not in r and r["quant"] == "bf16"}
    assert all(r["change"]["gemv_by_hidden"][str(r["hidden"])]["fp8"]["down"] for r in report if "error" not in r and r["quant"] == "fp8")
    assert set(ok) == {128, 256} and "this card's step failed" in next(r["error"] for r in report if r["hidden"] == 192)
    got = fk.resolve(spec, "cpu")
    for width in (128, 256):
        assert got.gemv_for("dense", "down", width) == better and ok[width]["change"]["gemv_by_hidden"][str(width)]["dense"]["down"]
        assert ok[width]["x_start"] == pytest.approx(10.0 / 9.5)
    table = fk.resolve(shapes, "cpu")
    assert got.gemv_for("dense", "down", 192) == start and got.gemv_for("dense", "o", 256) == table.gemv_for("dense", "o", 256)
    assert "refined in the whole step by the stage" in spec["source"] and "narrow bf16" in spec["source"]
    assert any("refine failed: this card's step failed" in m for m in logged)
    fresh = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton", gemv_configs=spec)
    assert fresh.gemv["down"] == better  # a session given the record's shapes runs the choice


@pytest.mark.parametrize("norm_apart_at_start", [True, False])
@pytest.mark.parametrize("narrow_ms_with_pairs", [11.0, 9.0])
def test_each_card_width_decides_its_own_pair_reads_and_a_lever_one_width_declined_does_not_reach_it_from_another(
        narrow_ms_with_pairs, norm_apart_at_start):
    """setup.refine_fused with two card widths whose fp8 steps disagree on the pair reads (the wide one
    is faster with them, the narrow one here faster or slower). The pair reads are a lever per card width,
    so each width's step decides them for itself: the record's shapes have them exactly where that
    width's trial took them. Where the start lacks the norm apart that they need, the norm is one setting
    for every width: a narrow step that declined the pair reads with it keeps the wide step from trying
    them (it would switch the norm on for the narrow step too), and the wide row says why."""
    from decodegap.measure import setup

    narrow = dataclasses.replace(WIDE, key="narrow", architecture={**WIDE.architecture, "hidden_size": 128, "head_dim": 32})
    record = {"gpu": "cpu", "weights": {"fp8": {"runs": True}}}
    start = fk.resolve(None, "cpu")
    if norm_apart_at_start:  # as the default table a stage on a GPU type without a measured one starts from
        start = start.replace(norm={"fp8": "apart"})

    def timer_for(net):
        width = net.embed.shape[1]
        with_pairs = narrow_ms_with_pairs if width == 128 else 9.0
        return lambda: with_pairs if net.shapes.x_pairs_for("fp8", width) else 10.0

    setup_log, setup.log = setup.log, lambda m: None
    try:
        spec, report = setup.refine_fused(record, None, 600, start.as_dict(), device="cpu", ctx=20,
                                          cards=[WIDE, narrow], time_ms_for=timer_for)
    finally:
        setup.log = setup_log
    rows = {r["hidden"]: r for r in report}
    got = fk.resolve(spec, "cpu")
    narrow_takes = narrow_ms_with_pairs < 10.0
    assert ("x_pairs" in rows[128]["levers"]) == narrow_takes == got.x_pairs_for("fp8", 128)
    blocked = not narrow_takes and not norm_apart_at_start
    assert ("x_pairs" in rows[256]["levers"]) == (not blocked) == got.x_pairs_for("fp8", 256)
    assert ({"x_pairs", "o_pairs"} <= set(rows[256]["not_tried"])) == blocked
    if not blocked:  # the wide card's own width, beside the narrow one's where that took them
        assert got.x_pairs["fp8"] == ([128, 256] if narrow_takes else [256])


def test_each_step_decides_pdl_for_its_own_format_and_width_so_a_bf16_decline_does_not_keep_it_from_int4(monkeypatch):
    """setup.refine_fused on a device that can launch with PDL (patched: this CPU cannot), two card widths,
    bf16 and int4. As on the H100 2026-12-06, the narrow card's bf16 step, refined first, is slower with
    PDL and declines it; the int4 steps of both widths are faster with it. PDL is a lever per format and
    width: the record has it for int4 at both widths (the narrow one with the reference's int4 prefetch)
    and for no bf16 step, and each session's step runs its own setting. As one setting for every step,
    the bf16 decline kept it from the int4 steps (their rows' not_tried)."""
    from decodegap.measure import setup
    from decodegap.measure.fused_kernels import tune_step

    monkeypatch.setattr(tune_step, "pdl_available", lambda device: None)
    monkeypatch.setattr(fk, "pdl_available", lambda device: None)  # FusedModel's check; the fake timer launches nothing
    narrow = dataclasses.replace(WIDE, key="narrow", architecture={**WIDE.architecture, "hidden_size": 128, "head_dim": 32})
    record = {"gpu": "cpu", "weights": {"bf16": {"runs": True}, "int4-triton": {"runs": True}}}
    start = fk.resolve(None, "cpu")  # the default table: PDL off, as a stage on a GPU type without a measured one

    def timer_for(net):
        fmt, width = net.kernel_format or "dense", net.embed.shape[1]
        with_pdl = {"dense": 10.1, "int4": 9.0}[fmt]
        return lambda: with_pdl if net.shapes.pdl_for(fmt, width) else 10.0

    monkeypatch.setattr(setup, "log", lambda m: None)
    spec, report = setup.refine_fused(record, None, 600, start.as_dict(), device="cpu", ctx=20,
                                      cards=[WIDE, narrow], time_ms_for=timer_for)
    rows = {(r["hidden"], r["quant"]): r for r in report}
    assert [k for k in rows] == [(128, "bf16"), (128, "int4-triton"), (256, "bf16"), (256, "int4-triton")]
    got = fk.resolve(spec, "cpu")
    assert got.pdl_for("int4", 128) and got.pdl_for("int4", 256)
    assert not got.pdl_for("dense", 128) and not got.pdl_for("dense", 256)
    assert spec["pdl"]["int4"] == [128, 256] and not spec["pdl"].get("dense")
    h200 = fk.launch_shapes_for(fk.LEVERS_FROM)
    assert got.prefetch_for("int4") == h200.prefetch_for("int4") and got.prefetch_for("dense") == 0
    for width in (128, 256):
        assert "pdl" in rows[(width, "int4-triton")]["levers"] and "pdl" not in rows[(width, "int4-triton")]["not_tried"]
        assert "pdl" not in rows[(width, "bf16")]["levers"]
        # the record keeps each lever's verdict: the bf16 step's PDL trial slower and not taken, the int4 one's taken
        pdl = {q: [t for t in rows[(width, q)]["lever_trials"] if t["lever"] == "pdl"] for q in ("bf16", "int4-triton")}
        assert pdl["bf16"] and pdl["bf16"][0]["taken"] is False and pdl["bf16"][0]["x_current"] < 1
        assert pdl["int4-triton"][0]["taken"] is True and pdl["int4-triton"][0]["x_current"] > 1
    # each session's step: its format's setting at its width
    net = FusedModel(build_model(narrow, "cpu", "sdpa", 0).float(), get_weight_path("int4-triton"), 32, backend="triton",
                     gemv_configs=spec)
    assert net.describe()["pdl"] is True and net.describe()["pdl_prefetch"] == h200.prefetch_for("int4")
    bf16 = FusedModel(build_model(narrow, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 32, backend="triton",
                      gemv_configs=spec)
    assert bf16.describe()["pdl"] is False and "pdl_prefetch" not in bf16.describe()


def test_a_lever_change_reaches_other_steps_only_through_what_is_one_setting_for_them():
    """reaches_other_widths: a width lever for listed widths reaches no other step; one given as true (pdl
    as one bool too) and the norm do; a format's pdl_prefetch reaches only where the start runs some step
    of that format under PDL, pdl_prefetch_per_sm only where it runs any step so."""
    from decodegap.measure.fused_kernels.tune_step import reaches_other_widths

    default = fk.resolve(None, "cpu")
    assert not reaches_other_widths({"pdl": {"int4": [3584]}, "pdl_prefetch": {"int4": 1}}, default)
    assert reaches_other_widths({"pdl": {"int4": [3584]}, "pdl_prefetch": {"int4": 1}},
                                default.replace(pdl={"int4": [4096]}))  # the 4096 step's prefetch changes too
    assert reaches_other_widths({"pdl": {"int4": True}}, default)
    per_sm = {"pdl": {"int4": [3584]}, "pdl_prefetch": {"int4": 1}, "pdl_prefetch_per_sm": 3}
    assert not reaches_other_widths(per_sm, default)
    assert reaches_other_widths(per_sm, default.replace(pdl={"dense": [4096]}))  # the bf16 step's programs that prefetch
    assert reaches_other_widths({"pdl": True}, default) and reaches_other_widths(per_sm)
    assert reaches_other_widths({"norm": {"fp8": "apart"}, "x_pairs": {"fp8": [4096]}}, default)
    assert not reaches_other_widths({"x_pairs": {"fp8": [3584, 4096]}, "o_pairs": {"fp8": [4096]}}, default)
    assert reaches_other_widths({"pdl_prefetch": {"int4": 1}})  # without the start: every step of the format


def test_a_gpu_type_without_a_measured_table_is_offered_the_measured_tables_levers_for_its_format():
    """lever_changes: the default table (every lever off, where an H100's stage starts) against the H200's:
    PDL for every format (refused where the device cannot launch so, as on this CPU), and each format's
    own levers; a start that has them already is offered nothing."""
    from decodegap.measure.fused_kernels.tune_step import lever_changes

    h200, default = fk.launch_shapes_for(fk.LEVERS_FROM), fk.launch_shapes_for(None)
    offered = {fmt: lever_changes(default, h200, fmt, "cpu") for fmt in ("dense", "fp8", "int4")}
    assert all([n for n, _ in refused] == ["pdl"] and "CUDA GPU" in refused[0][1] for _, refused in offered.values())
    assert [n for n, _ in offered["dense"][0]] == []  # the bf16 step's only lever the default lacks is PDL
    assert [n for n, _ in offered["fp8"][0]] == ["x_pairs", "o_pairs"]
    assert dict(offered["fp8"][0])["o_pairs"] == {"norm": {"fp8": "apart"}, "x_pairs": {"fp8": True}, "o_pairs": {"fp8": True}}
    assert dict(offered["int4"][0]) == {"x_fp32": {"x_fp32": {"int4": h200.x_fp32["int4"]}},
                                        "x_pairs": {"norm": {"int4": "apart"}, "x_pairs": {"int4": True}}}
    assert lever_changes(h200, h200, "int4", "cpu") == ([], [])
    # given a card's width, a width lever is offered for that width alone, whatever widths the reference
    # had it for (the H200 took x_fp32 for 4096 only), keeping the widths the start already has it for
    narrow = dict(lever_changes(default, h200, "int4", "cpu", 3584)[0])
    # (the norm apart that the pair reads need comes with them only where the start lacks it: the default has it)
    assert narrow == {"x_fp32": {"x_fp32": {"int4": [3584]}}, "x_pairs": {"x_pairs": {"int4": [3584]}}}
    has_narrow = default.replace(x_pairs={"int4": [3584]})
    assert "x_pairs" not in dict(lever_changes(has_narrow, h200, "int4", "cpu", 3584)[0])
    assert dict(lever_changes(has_narrow, h200, "int4", "cpu", 4096)[0])["x_pairs"]["x_pairs"] == {"int4": [3584, 4096]}
    assert dict(lever_changes(default, h200, "fp8", "cpu", 4096)[0])["o_pairs"] == {"x_pairs": {"fp8": [4096]}, "o_pairs": {"fp8": [4096]}}
    apart_off = default.replace(norm={})
    assert dict(lever_changes(apart_off, h200, "fp8", "cpu", 4096)[0])["x_pairs"] == {"norm": {"fp8": "apart"}, "x_pairs": {"fp8": [4096]}}
    # PDL too, given the width, where the device can launch so: for the format and width alone, with the
    # reference's prefetch for the format where the start's differs
    from decodegap.measure.fused_kernels import tune_step
    real, tune_step.pdl_available = tune_step.pdl_available, lambda device: None
    try:
        assert dict(lever_changes(default, h200, "int4", "cuda", 3584)[0])["pdl"] == {
            "pdl": {"int4": [3584]}, "pdl_prefetch": {"int4": h200.prefetch_for("int4")}}
        has = default.replace(pdl={"int4": [3584]}, pdl_prefetch={"int4": h200.prefetch_for("int4")})
        assert dict(lever_changes(has, h200, "int4", "cuda", 4096)[0])["pdl"] == {"pdl": {"int4": [3584, 4096]}}
        assert "pdl" not in dict(lever_changes(has, h200, "int4", "cuda", 3584)[0])
        assert dict(lever_changes(has, h200, "dense", "cuda", 3584)[0])["pdl"] == {
            "pdl": {"dense": [3584]}, "pdl_prefetch": {"dense": h200.prefetch_for("dense")}}
        assert dict(lever_changes(default, h200, "fp8", "cuda", 3584)[0])["pdl"] == {"pdl": {"fp8": [3584]}}  # no fp8 prefetch
        assert dict(lever_changes(default, h200, "int4", "cuda")[0])["pdl"]["pdl"] is True  # no width: every step
        # the programs an SM that prefetch (one setting for every step) come only while no step runs under PDL
        other = default.replace(pdl_prefetch_per_sm=3)
        assert dict(lever_changes(other, h200, "int4", "cuda", 3584)[0])["pdl"]["pdl_prefetch_per_sm"] == h200.pdl_prefetch_per_sm
        running = other.replace(pdl={"dense": [3584]})
        assert "pdl_prefetch_per_sm" not in dict(lever_changes(running, h200, "int4", "cuda", 3584)[0])["pdl"]
    finally:
        tune_step.pdl_available = real


def _each_shapes_once(net):
    """A step for a test's timer: the net's real step the first time each set of launch shapes is timed
    (a lever the kernels refuse raises there), not again at every timing (the interpreter takes seconds a
    step); and the set of shapes that ran."""
    ran = set()

    def step():
        if repr(net.shapes) not in ran:
            ran.add(repr(net.shapes))
            net.decode(*_token())

    return step, ran


def test_the_refinement_takes_a_lever_that_speeds_the_step_leaves_one_that_does_not_and_the_step_still_computes_the_same():
    """With levers_from, the int4 step tries x_pairs (with the norm apart it needs; its reads become
    int4_pairs, with the reference's shapes for them) and x_fp32 before the roles; the timer favours x_pairs and not x_fp32, so only x_pairs
    is taken, the report and the change name it, PDL is a refused trial here, and the step with the pair
    reads gives the logits of the step without them."""
    import torch

    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("int4-triton"), 64, backend="triton")
    start = net.shapes
    pairs = {role: fk.GemvConfig(4, 256, 4) for role in ("qkv", "o", "gate_up", "down")}
    reference = start.replace(pdl=True, pdl_prefetch={"int4": 1}, x_pairs={"int4": True}, x_fp32={"int4": [256]}, norm={"int4": "apart"},
                              gemv={**start.gemv, "int4_pairs": pairs})
    before = net.decode(*_token()).float()

    step, ran = _each_shapes_once(net)

    def ms():
        step()  # the real step: a lever the kernels refuse would raise here
        return (9.0 if net.shapes.x_pairs_for("int4", 256) else 10.0) + (0.5 if net.shapes.x_fp32_for("int4", 256) else 0.0)

    spec, report = fk.refine_in_step(net, 20, candidates={}, roles=("down",), repeats=1, time_ms=ms, levers_from=reference,
                                     log=lambda m: None)
    assert report["levers"] == ["x_pairs"], report["trials"]
    # for this card's width alone (lever_changes given the width), with the format's norm that it needs
    assert report["change"]["x_pairs"] == {"int4": [256]} and report["change"]["norm"] == {"int4": "apart"}
    assert spec.x_pairs_for("int4", 256) and not spec.x_fp32_for("int4", 256) and not spec.pdl
    assert net.gemv_read["qkv"] == "int4_pairs" and net.gemv["qkv"] == pairs["qkv"]
    by_lever = {t["lever"]: t for t in report["trials"] if "lever" in t}
    assert "CUDA GPU" in by_lever["pdl"]["error"] and by_lever["x_fp32"]["taken"] is False
    assert report["x_start"] == pytest.approx(10.0 / 9.0)
    assert len(ran) >= 3  # the start, with x_pairs, with x_fp32: each lever's step ran
    after = net.decode(*_token()).float()
    assert torch.allclose(after, before, rtol=1e-3, atol=1e-3 * before.abs().max().item())


def test_a_lever_declined_before_a_later_one_was_taken_is_tried_again_against_the_step_with_it():
    """Levers act together: here x_fp32 slows the step without the pair reads and speeds it with them,
    and it is tried before x_pairs. The first pass declines it, x_pairs is taken, and the second try,
    against the step with the pair reads and before the roles climb, takes it: the report names both, the
    retry is marked, and the step still gives its logits. The norm, declined first and then brought whole
    by x_pairs, is not timed against the same step again; where no lever is taken, none is timed twice."""
    import torch

    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("int4-triton"), 64, backend="triton")
    start = net.shapes
    pairs = {role: fk.GemvConfig(4, 256, 4) for role in ("qkv", "o", "gate_up", "down")}
    reference = start.replace(x_pairs={"int4": True}, x_fp32={"int4": [256]}, norm={"int4": "apart"},
                              gemv={**start.gemv, "int4_pairs": pairs})
    before = net.decode(*_token()).float()

    step, ran = _each_shapes_once(net)

    def ms():
        step()
        pairs_on, fp32_on = net.shapes.x_pairs_for("int4", 256), net.shapes.x_fp32_for("int4", 256)
        return (9.0 if pairs_on else 10.0) + ((-0.3 if pairs_on else 0.5) if fp32_on else 0.0)

    spec, report = fk.refine_in_step(net, 20, candidates={"int4_pairs": [fk.GemvConfig(2, 256, 4)]}, roles=("down",), repeats=1,
                                     time_ms=ms, levers_from=reference,
                                     log=lambda m: None)
    fp32_trials = [t for t in report["trials"] if t.get("lever") == "x_fp32"]
    assert [t["taken"] for t in fp32_trials] == [False, True] and fp32_trials[1]["retry"] is True
    # the norm apart, declined first, came whole with x_pairs: not timed again against the same step
    assert [t["taken"] for t in report["trials"] if t.get("lever") == "norm"] == [False]
    # the retry comes before the roles climb (their climb spends the rest of the budget)
    order = [t.get("lever") or t.get("role") for t in report["trials"]]
    assert order.index("down") > max(i for i, t in enumerate(report["trials"]) if t.get("retry"))
    assert set(report["levers"]) == {"x_pairs", "x_fp32"} and report["change"]["x_fp32"] == {"int4": [256]}
    assert spec.x_pairs_for("int4", 256) and spec.x_fp32_for("int4", 256)
    assert report["x_start"] == pytest.approx(10.0 / 8.7)
    assert len(ran) >= 4  # the start, x_fp32 alone, x_pairs, both: each combination's step ran
    after = net.decode(*_token()).float()
    assert torch.allclose(after, before, rtol=1e-3, atol=1e-3 * before.abs().max().item())

    # no lever helps: the step never changes, so each declined lever is timed once, not again
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("int4-triton"), 64, backend="triton")
    spec, report = fk.refine_in_step(net, 20, candidates={}, roles=("down",), repeats=1, time_ms=lambda: 10.0,
                                     levers_from=reference, log=lambda m: None)
    timed = [t["lever"] for t in report["trials"] if "lever" in t]
    assert {"x_fp32", "x_pairs"} <= set(timed) and len(timed) == len(set(timed)), timed
    assert report["levers"] == [] and spec is net.shapes


def test_a_lever_taken_on_its_second_try_is_not_a_decline_that_keeps_it_from_the_formats_other_steps():
    """tune_step.declined_levers, what setup.refine_fused passes to the format's next steps as not_tried:
    a lever's verdict is its last timing, so one declined at first and taken when tried again is no
    decline; an error or a role's trial is none either."""
    report = {"levers": ["x_pairs", "pdl"], "trials": [
        {"lever": "pdl", "x_current": 0.986, "taken": False},
        {"lever": "x_fp32", "x_current": 0.95, "taken": False},
        {"lever": "x_pairs", "x_current": 1.14, "again": 1.12, "taken": True},
        {"lever": "o_pairs", "error": "refused"},
        {"lever": "pdl", "x_current": 1.02, "again": 1.02, "taken": True, "retry": True},
        {"lever": "x_fp32", "x_current": 0.97, "taken": False, "retry": True},
        {"role": "down", "read": "int4_pairs", "shape": {}, "x_current": 1.0}]}
    assert fk.declined_levers(report) == {"x_fp32": 0.97}
