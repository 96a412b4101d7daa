"""Raw sessions to Parquet rows: the host-side columns, and records whose per-step lists disagree."""

import copy

import numpy as np
import pytest

from decodegap.analysis import synthetic
from decodegap.analysis.aggregate import rows_of
from decodegap.core.errors import RawFileError

CELL = dict(gpu="h200", model="tiny-llama", ctx=32, attn="sdpa", quant="bf16", mode="ab-eager-graphed")


def _record():
    return synthetic.record(CELL, 0, 32, np.random.default_rng(0))


def test_host_columns_carry_cpu_time_and_probe_speed_per_step():
    rec = _record()
    rec["cpu_probe"]["ms_before_block"] = [0.5 + 0.1 * b for b in range(len(rec["cpu_probe"]["ms_before_block"]))]
    eager = rec["arms"][0]["timed"]
    eager["cpu_probe_before_ms"][3], eager["cpu_probe_after_ms"][3] = 0.066, 0.132  # 2000 iterations
    _, steps = rows_of(rec, "s00.json", "sha", 4.8e12)
    row = next(r for r in steps if r["arm"] == "eager" and r["step"] == 3)
    assert row["step_probe_ns_per_iter"] == pytest.approx(0.132e6 / 2000)  # the slower of the two probes
    assert row["block_probe_ns_per_iter"] == pytest.approx((0.5 + 0.1 * row["block"]) * 1e6 / 20000)
    assert row["host_cpu_ms"] == eager["host_cpu_ms"][3]


def test_old_records_without_host_fields_still_aggregate_with_nulls():
    rec = _record()
    del rec["cpu_probe"]
    del rec["protocol"]["step_probe_iterations"]
    for arm in rec["arms"]:
        for key in ("host_cpu_ms", "cpu_probe_before_ms", "cpu_probe_after_ms", "block"):
            del arm["timed"][key]
    sessions, steps = rows_of(rec, "s00.json", "sha", 4.8e12)
    assert len(steps) == 64 and all(r["step_probe_ns_per_iter"] is None and r["host_cpu_ms"] is None for r in steps)
    assert sessions[0]["median_host_cpu_ms"] is None


@pytest.mark.parametrize("key", ["host_cpu_ms", "cpu_probe_after_ms", "block"])
def test_a_per_step_list_of_the_wrong_length_is_refused_naming_it(key, tmp_path):
    from decodegap.analysis.aggregate import aggregate
    from decodegap.core import manifest, paths
    from decodegap.core.record import write_session

    rec = copy.deepcopy(_record())
    rec["arms"][1]["timed"][key] = rec["arms"][1]["timed"][key][:-1]
    path = paths.session_path(root=tmp_path, session=0, **CELL)
    write_session(rec, path)
    manifest.add([path], tmp_path)
    with pytest.raises(RawFileError, match=f"s00.json: arm graphed: {key} has 31 entries for 32 steps"):
        aggregate([path], 4.8e12)
