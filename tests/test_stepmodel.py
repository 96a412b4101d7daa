"""The step model: observations picked from stats files, coefficients recovered from synthetic cells
made with known ones, held-out errors, and what the fit says when a mode or a feature is missing."""

import math

import numpy as np
import pytest

from decodegap.analysis import stepmodel

TRUE = {"B_eff": 3.0e12, "B_attn": 0.8e12, "c_kernel_device": 1.5, "c_launch_host": 14.0, "c_attn_host": 1300.0}
# card: weights read (bytes), KV bytes per token, query heads per KV head, layers, kernels (static/graphed), kernels (eager)
CARDS = {
    "a-7b": (14.1e9, 57344, 7.0, 28, 1544, 1313),
    "b-7b": (14.2e9, 131072, 4.0, 32, 1758, 1495),
    "c-8b": (15.0e9, 131072, 4.0, 32, 1759, 1496),
    "d-13b": (25.0e9, 204800, 5.0, 40, 2200, 1870),
    "e-3b": (6.0e9, 57344, 3.0, 28, 1200, 1020),
}
CTXS = (2048, 4096, 8192, 16384, 65536)


def true_time_ms(o: dict, c: dict = TRUE) -> float:
    dev = (o["weight_bytes_read"] / c["B_eff"] + o["kv_bytes"] * o["q_per_kv"] / c["B_attn"]
           + o["kernels_per_step"] * c["c_kernel_device"] * 1e-6)
    if o["mode"] == "graphed":
        return dev * 1e3
    host = o["launches_per_step"] * c["c_launch_host"] * 1e-6
    if o["mode"] == "eager":
        host += o["attention_calls_per_step"] * c["c_attn_host"] * 1e-6
    return max(dev, host) * 1e3


def synthetic(noise: float = 0.005, seed: int = 0, cards=CARDS, ctxs=CTXS, modes=stepmodel.MODES) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for model, (w, kv_tok, g, layers, k_static, k_eager) in cards.items():
        for ctx in ctxs:
            for mode in modes:
                k = float(k_eager if mode == "eager" else k_static)
                o = {"gpu": "h200", "model": model, "ctx": ctx, "attn": "sdpa", "quant": "bf16", "mode": mode,
                     "scope": "valid", "n_sessions": 3, "weight_bytes": w + 1e9, "weight_bytes_read": w,
                     "kv_bytes": kv_tok * ctx, "q_per_kv": g, "kernels_per_step": k, "kernels_imputed": False,
                     "launches_per_step": 0.0 if mode == "graphed" else k, "attention_calls_per_step": float(layers),
                     "b_peak_Bps": 4.8e12}
                o["median_ms"] = true_time_ms(o) * (1 + noise * rng.standard_normal())
                out.append(o)
    return out


def values(model: dict) -> dict:
    return {t: c["value"] for t, c in model["coefficients"].items()}


def test_the_fit_recovers_known_coefficients_and_which_rows_are_host_bound():
    obs = synthetic()
    model = stepmodel.fit(obs)
    assert model["converged"] and not model["unfit"] and not model["skipped"]
    for term, true in TRUE.items():
        assert values(model)[term] == pytest.approx(true, rel=0.05), term
    # at 64k tokens the static steps (and the big card's eager one) are device bound: the fit must find them
    dev_bound = {k for k, b in model["bound"].items() if b == "device"}
    truth = {stepmodel.key(o) for o in obs if o["mode"] != "graphed" and true_time_ms({**o, "mode": "graphed"}) > true_time_ms({**o, "kernels_per_step": 0, "weight_bytes_read": 0, "kv_bytes": 0})}
    assert {k[-1] for k in truth} == {"static", "eager"} and dev_bound == truth


def test_a_wrong_coefficient_in_the_data_is_seen():
    slow_host = {**TRUE, "c_launch_host": 20.0}
    obs = synthetic(noise=0.0)
    for o in obs:
        o["median_ms"] = true_time_ms(o, slow_host)
    assert values(stepmodel.fit(obs))["c_launch_host"] == pytest.approx(20.0, rel=0.02)


def test_held_out_errors_are_small_on_data_the_model_can_describe():
    obs = synthetic()
    for group in ("ctx", "model"):
        res = stepmodel.loo(obs, group)
        assert len(res["rows"]) == len(obs) and not res["skipped"]
        assert set(res["summary"]) == {*stepmodel.MODES, "all"}
        for mode, s in res["summary"].items():
            assert s["median_abs"] < 0.02 and s["max_abs"] < 0.06, (group, mode, s)
        for r in res["rows"]:
            assert r["rel_err"] == pytest.approx(r["predicted_ms"] / r["observed_ms"] - 1)


def test_the_additive_form_misses_where_op_by_op_steps_hide_device_time():
    obs = synthetic(noise=0.0)
    res = stepmodel.loo(obs, "ctx", form="additive")
    assert res["summary"]["static"]["max_abs"] > 0.1  # the overlap form is within noise (above)


def test_with_one_mode_missing_the_fit_runs_and_says_what_it_could_not_fit():
    no_eager = [o for o in synthetic() if o["mode"] != "eager"]
    model = stepmodel.fit(no_eager)
    assert set(model["unfit"]) == {"c_attn_host"} and "eager" in model["unfit"]["c_attn_host"]
    assert model["coefficients"]["c_attn_host"] == {**model["coefficients"]["c_attn_host"], "value": None, "fitted": False}
    assert values(model)["c_launch_host"] == pytest.approx(14.0, rel=0.05)
    eager_row = next(o for o in synthetic() if o["mode"] == "eager")
    p = stepmodel.predict(model, eager_row)
    assert math.isfinite(p["predicted_ms"]) and p["partial"] == ["c_attn_host"]

    only_graphed = [o for o in synthetic() if o["mode"] == "graphed"]
    model = stepmodel.fit(only_graphed)
    assert set(model["unfit"]) == {"c_launch_host", "c_attn_host"}
    assert values(model)["B_attn"] == pytest.approx(TRUE["B_attn"], rel=0.05)

    no_graphed = [o for o in synthetic(ctxs=(2048, 4096)) if o["mode"] != "graphed"]  # every row host bound
    model = stepmodel.fit(no_graphed)
    assert set(model["unfit"]) == {"B_eff", "B_attn", "c_kernel_device"}
    assert "B_peak" in model["unfit"]["B_eff"]
    graphed_row = next(o for o in synthetic() if o["mode"] == "graphed")
    p = stepmodel.predict(model, graphed_row)
    floor_ms = (graphed_row["weight_bytes_read"] + graphed_row["kv_bytes"] * graphed_row["q_per_kv"]) / 4.8e12 * 1e3
    assert p["predicted_ms"] == pytest.approx(floor_ms) and set(p["partial"]) == {"B_eff", "B_attn", "c_kernel_device"}


def test_a_held_out_group_alone_with_a_feature_gets_a_finite_prediction():
    obs = [o for o in synthetic() if o["mode"] != "eager" or o["model"] == "d-13b"]  # only one card ran eager
    res = stepmodel.loo(obs, "model")
    held = [r for r in res["rows"] if r["model"] == "d-13b" and r["mode"] == "eager"]
    assert held and all(math.isfinite(r["predicted_ms"]) and r["partial"] == ["c_attn_host"] for r in held)
    assert all("c_attn_host" in r["unfit"] for r in held)
    assert "c_attn_host" not in res["fits"]["a-7b"]["unfit"]
    # the same with one context alone carrying the eager rows
    obs = [o for o in synthetic() if o["mode"] != "eager" or o["ctx"] == 4096]
    held = [r for r in stepmodel.loo(obs, "ctx")["rows"] if r["mode"] == "eager"]
    assert held and all(math.isfinite(r["predicted_ms"]) for r in held)


def test_the_fit_refuses_several_gpus_and_skips_rows_without_a_kernel_count():
    obs = synthetic()
    with pytest.raises(ValueError, match="several GPUs"):
        stepmodel.fit(obs + [{**obs[0], "gpu": "a100"}])
    lacking = {**obs[0], "kernels_per_step": None, "launches_per_step": None}
    model = stepmodel.fit(obs[1:] + [lacking])
    assert model["skipped"] == [(stepmodel.key(lacking), "no kernel count (no profiler pass for this model and mode)")]
    assert stepmodel.predict(model, lacking)["predicted_ms"] is None


# --- collect: from stats files ------------------------------------------------------------------

def arm(median, n, anatomy=None, kv=1e8):
    return {"median_ms": median, "n_sessions": n, "t_floor_ms": 3.0, "weight_bytes": 15e9, "weight_bytes_no_embedding": 14e9,
            "kv_bytes": kv, "b_peak_Bps": 4.8e12, "anatomy": anatomy}


def stats(ctx, mode, scopes, file="f"):
    return {"cell": {"gpu": "h200", "model": "m", "ctx": ctx, "attn": "sdpa", "quant": "bf16", "mode": mode}, "_file": file,
            **{scope: {"arms": arms} for scope, arms in scopes.items()}}


PROFILED = {"kernels_per_step": 1544.0, "gpu_busy_ms_per_step": 7.6,
            "host_ops": [{"name": "aten::scaled_dot_product_attention", "calls_per_step": 28.0, "cpu_total_ms_per_step": 5.0}]}


def test_collect_prefers_host_nominal_op_by_op_then_sessions_and_imputes_kernel_counts():
    stats_list = [
        stats(2048, "static", {"host_nominal": {"static": arm(21.0, 2, PROFILED)}, "completed": {"static": arm(30.0, 5, PROFILED)}}),
        stats(2048, "ab-static-graphed", {"host_nominal": {"static": arm(22.0, 16, PROFILED), "graphed": arm(8.0, 16, PROFILED)},
                                          "completed": {"static": arm(32.0, 20, PROFILED), "graphed": arm(8.2, 20, PROFILED)}}),
        stats(2048, "graphed", {"completed": {"graphed": arm(8.3, 9)}}),
        stats(4096, "graphed", {"completed": {"graphed": arm(9.1, 2)}}),
        stats(4096, "eager", {"host_nominal": {"eager": arm(58.0, 1)},
                              "completed": {"eager": arm(60.0, 3, {**PROFILED, "kernels_per_step": 1313.0})}}),
    ]
    obs = {(o["ctx"], o["mode"]): o for o in stepmodel.collect(stats_list)}
    assert set(obs) == {(2048, "static"), (2048, "graphed"), (4096, "graphed"), (4096, "eager")}
    s = obs[(2048, "static")]
    assert (s["scope"], s["cell_mode"], s["median_ms"]) == ("host_nominal", "ab-static-graphed", 22.0)  # most sessions
    g = obs[(2048, "graphed")]  # graphed: completed sessions (never host-nominal), the most of them
    assert (g["scope"], g["cell_mode"], g["median_ms"], g["kernels_imputed"]) == ("completed", "ab-static-graphed", 8.2, False)
    g4 = obs[(4096, "graphed")]
    assert g4["scope"] == "completed" and g4["kernels_imputed"] and g4["kernels_per_step"] == 1544.0 and "ctx2048" in g4["kernels_source"]
    assert g4["launches_per_step"] == 0.0 and s["launches_per_step"] == 1544.0
    e = obs[(4096, "eager")]  # the cell's own profiler pass, from another scope of the same cell
    assert (e["scope"], e["median_ms"]) == ("host_nominal", 58.0) and e["kernels_per_step"] == 1313.0 and not e["kernels_imputed"]
    assert e["attention_calls_per_step"] == 28.0 and e["q_per_kv"] == 1.0 and e["q_per_kv_assumed"]
    assert e["bytes"] == 15e9 + 1e8 and e["weight_bytes_read"] == 14e9


def test_collect_takes_layers_and_heads_from_the_model_card():
    card = {"architecture": {"num_hidden_layers": 30, "num_attention_heads": 28, "num_key_value_heads": 4}}
    (o,) = stepmodel.collect([stats(2048, "eager", {"completed": {"eager": arm(59.0, 1, PROFILED)}})], {"m": card})
    assert o["q_per_kv"] == 7.0 and not o["q_per_kv_assumed"] and o["attention_calls_per_step"] == 30.0
