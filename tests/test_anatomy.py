"""The anatomy of a step: the profiler summary, and parts that add up to the measured step times."""

import json
import os
from types import SimpleNamespace

import pytest

from conftest import SMALL_CELLS, make_workspace, run_snakemake, small_config
from decodegap.analysis import anatomy, provenance, synthetic
from decodegap.measure.anatomy import _busy_ms, summarize


def test_gpu_busy_time_is_the_union_of_kernel_intervals():
    assert _busy_ms([(0, 10), (5, 15), (20, 30), (21, 22)]) == pytest.approx(0.025)  # us in, ms out
    assert _busy_ms([]) == 0.0


def test_summary_counts_kernels_and_names_host_operators():
    from torch.autograd import DeviceType

    def ev(name, device, start, end, total=0.0, self_=0.0):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start),
                               cpu_time_total=total, self_cpu_time_total=self_)

    events = [ev("gemv", DeviceType.CUDA, 0, 40), ev("flash_fwd", DeviceType.CUDA, 30, 50), ev("gemv", DeviceType.CUDA, 100, 140),
              ev("aten::scaled_dot_product_attention", DeviceType.CPU, 0, 0, total=1400.0, self_=10.0),
              ev("aten::linear", DeviceType.CPU, 0, 0, total=200.0, self_=5.0), ev("cudaLaunchKernel", DeviceType.CPU, 0, 0, total=999.0)]
    s = summarize(events, n_steps=2)
    assert s["kernels_per_step"] == 1.5 and s["gpu_busy_ms_per_step"] == pytest.approx(0.045)
    assert [o["name"] for o in s["host_ops"]] == ["aten::scaled_dot_product_attention", "aten::linear"]  # aten level only
    assert s["host_ops"][0]["cpu_total_ms_per_step"] == pytest.approx(0.7)
    assert s["kernels"][0] == {"name": "gemv", "calls_per_step": 1.0, "ms_per_step": pytest.approx(0.04), "exclusive_ms_per_step": pytest.approx(0.04)}
    # flash_fwd started inside the first gemv: only the 10 us after it are its own
    assert s["kernels"][1]["ms_per_step"] == pytest.approx(0.01) and s["kernels"][1]["exclusive_ms_per_step"] == pytest.approx(0.005)
    assert sum(k["exclusive_ms_per_step"] for k in s["kernels"]) == pytest.approx(s["gpu_busy_ms_per_step"])


def test_kernels_launched_early_under_pdl_are_credited_only_after_the_kernel_before():
    """Programmatic dependent launch: each kernel starts while the one before still runs and waits
    inside it. Its profiler time counts the wait (the sum passes the busy time); its exclusive time
    does not, and the exclusive times add up to the busy time; a gap between kernels is nobody's."""
    from decodegap.measure.anatomy import _exclusive_us

    pdl = [(0, 100, "gemv"), (80, 130, "norm"), (90, 200, "gemv"), (195, 210, "attention"), (250, 260, "argmax")]
    own = _exclusive_us(pdl)
    assert own == {"gemv": pytest.approx(100 + 70), "norm": pytest.approx(30), "attention": pytest.approx(10), "argmax": pytest.approx(10)}
    assert sum(own.values()) / 1e3 == pytest.approx(_busy_ms([(a, b) for a, b, _ in pdl]))
    assert sum(b - a for a, b, _ in pdl) > sum(own.values())  # what the profiler's per-kernel times would add up to


def _est(ms, scope="completed", n=2, busy=None):
    return {"median_ms": ms, "n_sessions": n, "scope": scope, "arm": "x", "stats_file": "f", "cell": {}, "t_floor_ms": 3.2,
            "t_ceiling_ms": 3.6, "anatomy": {"gpu_busy_ms_per_step": busy, "kernels_per_step": 1544.0, "host_ops": []} if busy else None}


def test_parts_add_up_to_each_measured_mode():
    parts = anatomy.decompose({"eager": _est(60.0), "static": _est(24.0), "graphed": _est(8.24, busy=7.7)})
    assert parts["floor_ms"] + parts["kernel_inefficiency_ms"] + parts["graph_gaps_ms"] == pytest.approx(8.24)
    assert parts["floor_ms"] + parts["kernel_inefficiency_ms"] + parts["graph_gaps_ms"] + parts["launch_tax_ms"] == pytest.approx(24.0)
    assert sum(parts[p] for p in anatomy.PARTS) == pytest.approx(60.0)
    missing = anatomy.decompose({"graphed": _est(8.24)})  # no profiler pass, no eager or static
    assert missing["kernel_inefficiency_ms"] is None and missing["launch_tax_ms"] is None and missing["floor_ms"] == 3.2


def test_each_mode_comes_from_its_best_cell():
    """Op by op: host-nominal steps before all completed ones, then the most sessions; graphed: the
    completed cell with the most sessions."""
    def stats(mode, arms, n, scopes=("completed",)):
        return {"cell": {"gpu": "h200", "model": "m", "ctx": 2048, "attn": "sdpa", "quant": "bf16", "mode": mode}, "_file": mode,
                **{scope: {"arms": {a: {"median_ms": ms, "n_sessions": n, "t_floor_ms": 3.2, "anatomy": None} for a, ms in arms.items()}}
                   for scope in scopes}}

    found = anatomy.estimates([stats("graphed", {"graphed": 8.3}, 2), stats("ab-static-graphed", {"static": 24.0, "graphed": 8.2}, 20),
                               stats("eager", {"eager": 90.0}, 30), stats("ab-eager-graphed", {"eager": 60.0, "graphed": 8.25}, 7,
                                                                         scopes=("completed", "host_nominal"))])
    best = found[("h200", "m", 2048, "sdpa", "bf16")]
    assert best["graphed"]["stats_file"] == "ab-static-graphed" and best["graphed"]["median_ms"] == 8.2  # 20 sessions
    assert best["eager"]["stats_file"] == "ab-eager-graphed" and best["eager"]["scope"] == "host_nominal"  # nominal beats 30 sessions
    assert best["static"]["scope"] == "completed"  # no probe: all its steps


def test_the_report_s_anatomy_adds_up_and_recomputes(tmp_path, capsys):
    """A workspace with eager, static and graphed cells and a launch-tax A/B: every row of the built
    anatomy table adds up, and a part's lineage leads to both cells it rests on and recomputes."""
    config = small_config(matrix={**small_config()["matrix"], "modes": ["eager", "static", "graphed"]})
    config["ab"].append({"name": "launch-tax", "gpus": ["h200"], "model": "qwen2.5-7b", "ctx": 2048, "attn": "sdpa",
                         "quant": "bf16", "mode": "ab-static-graphed", "sessions": 3})
    root = make_workspace(tmp_path, config=config)
    static = dict(SMALL_CELLS[0], mode="static")
    synthetic.write_store(root, [static], 2, 48, seed=4)
    synthetic.write_store(root, [dict(static, mode="ab-static-graphed")], 3, 48, seed=5)
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    built_workspace = root
    doc = json.loads((built_workspace / "report/provenance.json").read_text())["numbers"]
    groups = {}
    for key, e in doc.items():
        if key.startswith("anatomy/"):
            _, q, gid = key.split("/", 2)
            groups.setdefault(gid, {})[q] = e["value"]
    assert groups, "the anatomy table rendered no number"
    complete = [gid for gid, v in groups.items() if {"eager_ms", "static_ms", "graphed_ms", "gpu_busy_ms"} <= set(v)]
    assert complete == ["h200/qwen2.5-7b/ctx2048/sdpa_bf16"], groups
    for gid in complete:
        v = groups[gid]
        parts = [v[p] for p in anatomy.PARTS]
        assert sum(parts) == pytest.approx(v["eager_ms"]), gid
        assert sum(parts[:-1]) == pytest.approx(v["static_ms"]) and sum(parts[:-2]) == pytest.approx(v["graphed_ms"]), gid
    key = "anatomy/cache_framework_ms/h200/qwen2.5-7b/ctx2048/sdpa_bf16"  # eager - static
    cells = {r["path"].rsplit("/", 1)[0] for r in doc[key]["raw_files"]}
    assert cells == {"results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-eager-graphed",  # eager: the A/B arm (3 sessions, all valid)
                     "results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-static-graphed"}, cells  # static: the A/B arm (3 sessions)
    cwd = os.getcwd()
    os.chdir(built_workspace)
    try:
        assert provenance.lineage({"numbers": doc, "analysis_code": {"commit": None, "sources_sha256": "0" * 16}}, key, do_recompute=True) == 0
    finally:
        os.chdir(cwd)
    assert "reproduces" in capsys.readouterr().out
