"""Print the time each session spent outside its timed loop (imports, build, prefill, warm-up,
capture), from the records themselves. Target on the H200 for a 7B card: <= 15 s per session, so
that the whole bundled matrix fits in 15 device-minutes.

    python benchmarks/session_overhead.py results/raw/h200 [--since 2026-11-29T10:40] [--until ...]
    python benchmarks/session_overhead.py results/raw/h200 --by attn --mode layer

--since/--until keep the sessions started in a window (UTC, ISO 8601), e.g. the runs made with
the batch runner's compiled-module cache, so a change to the overhead reads beside the old one.
--by attn groups by attention path as well (sessions that ran only): a JIT-built path (flex,
FlashInfer) against SDPA's sessions of the same mode, whose ratio is issue 12's target (<= 1).
"""

import argparse
import statistics
import sys
from pathlib import Path

from decodegap.core.record import read_session

PHASES = ("process_start_to_main", "imports", "bandwidth", "build", "prefill", "prepare", "warmup", "timed", "outside_timed_loop")


def main(root: str, since: str | None = None, until: str | None = None, by: str | None = None, mode: str | None = None) -> None:
    rows = []
    for path in sorted(Path(root).rglob("s*.json")):
        rec = read_session(path)
        started = rec["time"]["started_utc"][:19]
        if (since and started < since) or (until and started >= until) or (mode and rec["cell"]["mode"] != mode):
            continue
        if by and not rec["arms"]:  # a session that never ran (ruled out, not possible) has no overhead to compare
            continue
        ph = rec["time"]["phases_s"]
        label = rec["cell"]["mode"] + (f" {rec['cell'][by]}" if by else "")
        rows.append({k: ph.get(k) or 0.0 for k in PHASES} | {"mode": label, "total": rec["time"]["duration_s"]})
    if not rows:
        sys.exit(f"no sessions under {root}" + (f" started in [{since}, {until})" if since or until else ""))
    print(f"{len(rows)} sessions under {root}; seconds per session (median / max):")
    for mode in sorted({r["mode"] for r in rows}):
        sel = [r for r in rows if r["mode"] == mode]
        print(f"  {mode:18s} n={len(sel):3d}  " + "  ".join(
            f"{k}={statistics.median(r[k] for r in sel):.1f}/{max(r[k] for r in sel):.1f}" for k in PHASES + ("total",)))
    outside = [r["outside_timed_loop"] for r in rows]
    total_min = sum(r["total"] for r in rows) / 60
    print(f"outside the timed loop: median {statistics.median(outside):.1f} s, max {max(outside):.1f} s (target <= 15 s); "
          f"all {len(rows)} sessions took {total_min:.1f} min end to end")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="results/raw/h200")
    ap.add_argument("--since", default=None, help="only sessions started at or after this UTC time (ISO 8601)")
    ap.add_argument("--until", default=None, help="only sessions started before this UTC time")
    ap.add_argument("--by", default=None, choices=["attn", "quant", "model", "ctx"], help="group by this cell key too")
    ap.add_argument("--mode", default=None, help="only sessions of this mode (e.g. layer)")
    a = ap.parse_args()
    main(a.root, a.since, a.until, a.by, a.mode)
