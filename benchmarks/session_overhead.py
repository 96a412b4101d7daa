"""Print the time each session spent outside its timed loop (imports, build, prefill, warm-up,
capture), from the records themselves. Target on the H200 for a 7B card: <= 15 s per session, so
that the whole bundled matrix fits in 15 device-minutes.

    python benchmarks/session_overhead.py results/raw/h200 [--commit PREFIX]

--commit keeps the sessions measured by one code version (e.g. those run with the batch runner's
compiled-module cache), so a change to the overhead can be read side by side with the old one.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from decodegap.record import read_session  # noqa: E402

PHASES = ("process_start_to_main", "imports", "bandwidth", "build", "prefill", "prepare", "warmup", "timed", "outside_timed_loop")


def main(root: str, commit: str | None = None) -> None:
    rows = []
    for path in sorted(Path(root).rglob("s*.json")):
        rec = read_session(path)
        if commit and not (rec["code"]["commit"] or "").startswith(commit):
            continue
        ph = rec["time"]["phases_s"]
        rows.append({k: ph.get(k) or 0.0 for k in PHASES} | {"mode": rec["cell"]["mode"], "total": rec["time"]["duration_s"]})
    if not rows:
        sys.exit(f"no sessions under {root}" + (f" with code commit {commit}*" if commit else ""))
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
    ap.add_argument("--commit", default=None, help="only sessions whose recorded code commit starts with this")
    a = ap.parse_args()
    main(a.root, a.commit)
