"""Where a GEMV's warps wait: the fused step's GEMV kernels, launched as the step launches them (the
table's shape, norm and input: tune.as_the_step_reads), read out by Nsight Compute's hardware counters,
beside the read-only kernel over the same bytes (benchmarks/floor_limit.py's ceiling kernel).

    python benchmarks/gemv_stalls.py [--models qwen2.5-7b] [--quant bf16 fp8 int4-triton] [--roles gate_up down]
        [--x-pairs fp8] [--shapes '{"gemv": {"int4_pairs": {"gate_up": {...}}}}'] [--ncu ncu] [--json out.json]
    python benchmarks/gemv_stalls.py --launch ...      # the launches alone (what ncu profiles; no counters)
    python benchmarks/gemv_stalls.py --report out.json # an earlier run's table again (no GPU)

Why: timing says how far each GEMV is from the read-only kernel (floor_limit.py --parts gemv ceiling);
the counters say what its warps do meanwhile. Per kernel: its time under the profiler, DRAM throughput
(% of peak), issue slots busy (% of the multiprocessors' peak, one instruction a scheduler a clock),
achieved occupancy (% of the warps a multiprocessor holds), eligible warps a scheduler a cycle, and the
cycles an issued instruction waits, by stall reason (smsp__average_warps_issue_stalled_<reason>
_per_issue_active: a warp's reasons summed over all warps, per instruction issued). A kernel bound by
the memory shows DRAM near its peak; one bound by its own instruction stream shows few eligible warps
and the stall it waits on most: long_scoreboard (a global load's data), wait (a fixed-latency
dependency), math_pipe_throttle or mio_throttle (a pipe or the load/store queue full), barrier.

How: the parent runs ncu (`--clock-control none`: the clocks as the GPU sets them, METHOD.md) on this
script with --launch, which launches each kernel once, eagerly (Triton compiles on the host first); ncu
flushes the caches before each pass (`--cache-control all`), so every kernel reads its weight from HBM,
as the step does. ncu's CSV (`--csv --page raw`) is parsed into one row per kernel, in launch order.
Needs a CUDA GPU and Nsight Compute with access to the counters (the lent H200's Firecracker
machines have it; gVisor ones do not: the error says so).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import time

FORMAT_OF = {"bf16": "dense", "fp8": "fp8", "int4-triton": "int4"}
STALLS = ("long_scoreboard", "wait", "math_pipe_throttle", "mio_throttle", "lg_throttle", "short_scoreboard", "barrier",
          "not_selected", "selected", "dispatch_stall", "no_instruction", "branch_resolving", "drain", "membar", "sleeping",
          "tex_throttle", "imc_miss", "misc")
METRICS = {  # column -> ncu metric
    "time_us": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue_pct": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "eligible_per_cycle": "smsp__warps_eligible.avg.per_cycle_active",
    "registers": "launch__registers_per_thread",
    **{f"stall_{s}": f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS},
}
READ_SHAPE = (4096, 4, 8)  # the read-only kernel's (int32 words a block, blocks a program, warps): one of floor_limit's READ_SHAPES
KERNELS = "^(_linear_kernel|_gate_up_kernel|_qkv_rope_kernel|stream_read)"  # the GEMVs' kernels and the read-only one


def launches(models, quants, roles, x_pairs=(), shapes=None):
    """Each (label, launch) the profile takes, in order: per card, format and role the step's GEMV as
    the step launches it, then the read-only kernel over the same bytes. `shapes`: a change to the GPU's
    table entry (launch.resolve's dict form, as floor_limit's levers give it) to profile instead."""
    import torch

    # the ceiling part's read-only kernel, from floor_limit.py beside this file (loaded by its path: the
    # package alone is put on the path, in workflow/rules/common.smk)
    spec = importlib.util.spec_from_file_location("floor_limit", os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_limit.py"))
    floor_limit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor_limit)
    read_launch = floor_limit.read_launch

    from decodegap.core.config import load_models
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import RoleBench, _key, as_the_step_reads

    device = torch.device("cuda")
    cards, table = load_models(), profiled_table(device, x_pairs, shapes)
    for key in models:
        arch = cards[key].architecture
        for quant in quants:
            fmt = FORMAT_OF[quant]
            for role in roles:
                if role == "lm_head" and fmt != "dense":
                    continue
                bench = RoleBench(role, fmt, arch, device, torch.bfloat16, copies=1, qkv_bias=cards[key].model_type == "qwen2")
                read, shape, given = as_the_step_reads(table, fmt, role, arch["hidden_size"])
                yield f"{key} {quant} {role} ({read} {_key(shape)})", \
                    lambda b=bench, s=shape, g=given: b.launch(s, 0, **g)
                buf = torch.empty(bench.bytes // 4, dtype=torch.int32, device=device).random_()
                block, iters, _ = READ_SHAPE
                out = torch.empty(-(-buf.numel() // (block * iters)), dtype=torch.float32, device=device)
                yield f"{key} {quant} {role} read-only ({bench.bytes / 1e6:.1f} MB)", \
                    lambda b=buf, o=out: read_launch(b, o, READ_SHAPE)
                del bench, buf


def profiled_table(device, x_pairs=(), shapes=None):
    """The launch shapes profiled: the device's table entry, changed by `shapes` (launch.resolve's dict
    form) and with the lever x_pairs on for the formats `x_pairs`; a bad change is resolve's error."""
    from decodegap.measure import fused_kernels as fk

    change = dict(shapes or {})
    if x_pairs:
        change["x_pairs"] = {**change.get("x_pairs", {}), **{fmt: True for fmt in x_pairs}}
    return fk.resolve(change or None, device)


def run_launches(models, quants, roles, x_pairs=(), shapes=None) -> None:
    """--launch: each kernel launched once (ncu flushes the caches before each profiled pass, so each
    reads its weight from HBM), its label printed before it, in the order ncu profiles them."""
    import torch

    for label, launch in launches(models, quants, roles, x_pairs, shapes):
        print(f"PROFILE {label}", flush=True)
        launch()
        torch.cuda.synchronize()


TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}  # ncu's time units


def parse_csv(text: str) -> list[dict]:
    """ncu --csv --page raw: a header row (with "Kernel Name"), a units row (no kernel name: the time
    in ns, us or ms), then one row per profiled kernel; other lines (ncu's ==PROF== notes,
    the launches' own output) are skipped."""
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if ln.startswith('"')))))
    at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if at is None:
        return []
    head, out, units = rows[at], [], {}
    for r in rows[at + 1:]:
        rec = dict(zip(head, r))
        if not rec.get("Kernel Name"):
            units = rec  # the units row
            continue
        row = {"kernel": rec["Kernel Name"]}
        for col, metric in METRICS.items():
            try:
                row[col] = float(rec.get(metric, "").replace(",", ""))
            except ValueError:
                row[col] = None
        unit = units.get(METRICS["time_us"], "nsecond")
        if unit not in TO_US:
            raise ValueError(f"gemv_stalls: ncu gave {METRICS['time_us']} in {unit!r}, not one of {', '.join(TO_US)}")
        if row["time_us"] is not None:
            row["time_us"] *= TO_US[unit]
        out.append(row)
    return out


def label_rows(rows: list[dict], labels: list[str]) -> None:
    """Each profiled kernel gets the label --launch printed before it, in order; a count or a kernel that
    does not match its label (the read-only kernel for a read-only label, a GEMV's for the others) is
    an error rather than a table of mislabelled rows."""
    if len(rows) != len(labels):
        raise SystemExit(f"gemv_stalls: {len(rows)} kernels profiled for {len(labels)} launches: the rows cannot be labelled")
    for row, label in zip(rows, labels):
        if (row["kernel"] == "stream_read") != (" read-only " in label):
            raise SystemExit(f"gemv_stalls: profiled kernel {row['kernel']!r} where the launches say {label!r}")
        row["label"] = label


def report(rows: list[dict]) -> str:
    """The table: a line per kernel (time under the profiler, DRAM %, issue slots %, occupancy %, eligible
    warps a scheduler a cycle, registers, the stall reasons an instruction waits longest on), then per
    card and format the GEMVs' summed time against the read-only kernel's over the same bytes."""
    lines = [f"{'kernel':58s} {'us':>7s} {'DRAM%':>6s} {'issue%':>6s} {'occ%':>5s} {'elig':>5s} {'regs':>4s}  "
             "cycles an issued instruction waited, by reason (the four longest of the total)"]
    f = lambda v, w, p: f"{v:{w}.{p}f}" if v is not None else " " * (w - 1) + "?"  # noqa: E731
    sums: dict = {}
    for r in rows:
        stalls = sorted(((r.get(f"stall_{s}") or 0, s) for s in STALLS if s != "selected"), reverse=True)[:4]
        total = sum(r.get(f"stall_{s}") or 0 for s in STALLS)
        label = r.get("label", r["kernel"])
        lines.append(f"{label[:58]:58s} {f(r['time_us'], 7, 2)} {f(r['dram_pct'], 6, 1)} {f(r['issue_pct'], 6, 1)} "
                     f"{f(r['occupancy_pct'], 5, 1)} {f(r['eligible_per_cycle'], 5, 2)} {f(r['registers'], 4, 0)}  "
                     f"total {total:5.1f}: " + " ".join(f"{s} {v:.1f}" for v, s in stalls))
        card_fmt = " ".join(label.split()[:2])
        kind = "read" if " read-only " in label else "gemv"
        sums.setdefault(card_fmt, {"gemv": 0.0, "read": 0.0})[kind] += r["time_us"] or 0.0
    lines.append("")
    for card_fmt, t in sums.items():
        if t["read"]:
            lines.append(f"{card_fmt:34s} GEMVs {t['gemv']:7.2f} us, read-only {t['read']:7.2f} us: {t['gemv'] / t['read']:.2f}x")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b"])
    ap.add_argument("--quant", nargs="+", default=["bf16", "fp8", "int4-triton"], choices=sorted(FORMAT_OF))
    ap.add_argument("--roles", nargs="+", default=["qkv", "o", "gate_up", "down"])
    ap.add_argument("--ncu", default="ncu", help="Nsight Compute's command line")
    ap.add_argument("--x-pairs", nargs="+", default=[], choices=("int4", "fp8"),
                    help="these formats' GEMVs reading f16 pairs (the lever x_pairs) whatever the table says")
    ap.add_argument("--shapes", type=json.loads, default=None, metavar="JSON",
                    help="a change to the GPU's launch shapes to profile instead of the table's (launch.resolve's dict form, "
                         "e.g. '{\"gemv\": {\"int4_pairs\": {\"down\": {\"rows\": 8, \"block_k\": 1024, \"warps\": 8, \"loop_stages\": 3}}}}')")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--launch", action="store_true", help="(what ncu runs) the launches alone")
    ap.add_argument("--report", metavar="JSON", help="print the table of an earlier run's --json file (no GPU)")
    a = ap.parse_args(argv)
    if a.launch:
        run_launches(a.models, a.quant, a.roles, a.x_pairs, a.shapes)
        return 0
    if a.report:
        with open(a.report) as fh:
            print(report(json.load(fh)))
        return 0
    ncu = shutil.which(a.ncu) or a.ncu
    if not os.path.exists(ncu):
        raise SystemExit(f"gemv_stalls: Nsight Compute not found ({a.ncu!r}); give --ncu its path")
    t0 = time.perf_counter()
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--csv", "--page", "raw", "--kernel-name", f"regex:{KERNELS}",
           "--metrics", ",".join(METRICS.values()), sys.executable, os.path.abspath(__file__), "--launch",
           "--models", *a.models, "--quant", *a.quant, "--roles", *a.roles] + (["--x-pairs", *a.x_pairs] if a.x_pairs else []) \
        + (["--shapes", json.dumps(a.shapes)] if a.shapes else [])
    print(f"[{time.perf_counter() - t0:6.1f} s] {' '.join(cmd[:8])} ... (ncu: each launch of the kernels {KERNELS})", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    labels = [ln.removeprefix("PROFILE ").strip() for ln in done.stdout.splitlines() if ln.startswith("PROFILE ")]
    if a.json:  # ncu's own output first, whatever the parsing below makes of it
        with open(f"{a.json}.ncu.csv", "w") as fh:
            fh.write(done.stdout)
    rows = parse_csv(done.stdout)
    if done.returncode or not rows:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"gemv_stalls: ncu exited {done.returncode} with {len(rows)} profiled kernels "
                         "(no access to the counters: a gVisor machine, or ncu's ERR_NVGPUCTRPERM)")
    label_rows(rows, labels)
    print(f"[{time.perf_counter() - t0:6.1f} s] {len(rows)} kernels profiled\n")
    print(report(rows))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
