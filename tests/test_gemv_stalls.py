"""benchmarks/gemv_stalls.py without a GPU: reading Nsight Compute's raw CSV (its units row, its notes
between), labelling the profiled kernels in launch order, and the table it prints."""

import csv
import importlib.util
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("gemv_stalls", ROOT / "benchmarks" / "gemv_stalls.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _ncu_csv(m, kernels, time_unit="ns"):
    """What `ncu --csv --page raw --metrics ...` prints: ==PROF== notes and the launches' own lines
    among the quoted rows, a header, a units row, a row per kernel."""
    head = ["ID", "Process ID", "Kernel Name", *m.METRICS.values()]
    units = ["", "", "", time_unit, "%", "%", "%", "", "register/thread", *["inst"] * (len(m.METRICS) - 6)]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(head)
    w.writerow(units)
    for i, (name, time, dram, stall_wait, stall_long) in enumerate(kernels):
        vals = {metric: "0" for metric in m.METRICS.values()}
        vals.update({m.METRICS["time_us"]: time, m.METRICS["dram_pct"]: dram, m.METRICS["stall_wait"]: stall_wait,
                     m.METRICS["stall_long_scoreboard"]: stall_long, m.METRICS["stall_selected"]: "1"})
        w.writerow([str(i), "4242", name, *vals.values()])
    return "==PROF== Connected to process 4242\nPROFILE a label\n" + buf.getvalue() + "==PROF== Disconnected\n"


def test_the_csv_is_read_in_microseconds_whatever_unit_ncu_gives():
    m = _module()
    kernels = [("_gate_up_kernel", "29,696", "52.1", "1.4", "10.6"), ("stream_read", "19680", "78.8", "1.4", "77.4")]
    rows = m.parse_csv(_ncu_csv(m, kernels))
    assert [r["kernel"] for r in rows] == ["_gate_up_kernel", "stream_read"]
    assert rows[0]["time_us"] == pytest.approx(29.696) and rows[0]["dram_pct"] == 52.1 and rows[1]["stall_long_scoreboard"] == 77.4
    assert m.parse_csv(_ncu_csv(m, kernels, "us"))[1]["time_us"] == pytest.approx(19680)
    with pytest.raises(ValueError, match="in 'cycle'"):
        m.parse_csv(_ncu_csv(m, kernels, "cycle"))
    assert m.parse_csv("==PROF== Connected\n==ERROR== no kernels were profiled\n") == []


def test_rows_take_their_launches_labels_and_the_table_sets_each_format_against_read_only():
    m = _module()
    rows = m.parse_csv(_ncu_csv(m, [("_gate_up_kernel", "30000", "52.1", "1.4", "10.6"), ("stream_read", "20000", "78.8", "1.4", "77.4"),
                                    ("_linear_kernel", "10000", "40.2", "1.0", "7.9"), ("stream_read", "10000", "69.7", "1.4", "73.8")]))
    labels = ["qwen2.5-7b int4-triton gate_up (int4_pairs 4x512/4w)", "qwen2.5-7b int4-triton gate_up read-only (72.2 MB)",
              "qwen2.5-7b int4-triton down (int4_pairs 8x1024/8w)", "qwen2.5-7b int4-triton down read-only (36.1 MB)"]
    m.label_rows(rows, labels)
    table = m.report(rows)
    assert "qwen2.5-7b int4-triton gate_up (int4_pairs 4x512/4w)" in table and "long_scoreboard 10.6" in table
    assert "GEMVs   40.00 us, read-only   30.00 us: 1.33x" in table
    with pytest.raises(SystemExit, match="4 kernels profiled for 3 launches"):
        m.label_rows(rows, labels[:3])
    with pytest.raises(SystemExit, match="profiled kernel '_gate_up_kernel' where the launches say 'qwen2.5-7b int4-triton gate_up read-only"):
        m.label_rows(rows, labels[1:] + labels[:1])


def test_without_nsight_compute_it_says_so():
    with pytest.raises(SystemExit, match="Nsight Compute not found \\('no-such-ncu'\\)"):
        _module().main(["--ncu", "no-such-ncu"])


def test_a_shape_change_is_profiled_over_the_table_with_the_x_pairs_lever():
    """--shapes profiles launch shapes other than the table's (e.g. a pipelined loop_stages shape): the
    change lands on the named read and role only, --x-pairs still turns the lever on beside it, and a
    misspelt key is resolve's error naming it, before ncu runs anything."""
    m = _module()
    piped = {"rows": 4, "block_k": 512, "warps": 4, "loop_stages": 3}
    table = m.profiled_table("cpu", ("fp8",), {"gemv": {"int4_pairs": {"gate_up": piped}}})
    assert table.gemv_for("int4_pairs", "gate_up").loop_stages == 3 and table.x_pairs == {"fp8": True}
    assert table.gemv_for("int4_pairs", "down").loop_stages is None
    assert m.profiled_table("cpu").gemv_for("int4_pairs", "gate_up").loop_stages is None
    with pytest.raises(ValueError, match="unknown key.*loop_stage"):
        m.profiled_table("cpu", (), {"gemv": {"int4_pairs": {"gate_up": {**piped, "loop_stage": 3}}}})
