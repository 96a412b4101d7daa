"""Benchmark the memory and time of the per-cell hierarchical bootstrap on a cell of very unequal
sessions: one of 1,000,000 steps plus 9 of 128, with the default 2000 resamples. Target: the peak
resident memory increase stays within 2 GiB (padding every session to the longest asked for
~30 GiB here). Prints the peak resident increase (ru_maxrss), the traced peak of numpy's
allocations (tracemalloc), the wall time and PASS/FAIL.

    python benchmarks/bootstrap_memory.py [--long 1000000] [--short 9] [--short-steps 128] [--resamples 2000]
"""

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import numpy as np

from decodegap.analysis.stats import StatsConfig, hierarchical_bootstrap_medians

LIMIT_BYTES = 2 * 1024**3


def max_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB, macOS bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--long", type=int, default=1_000_000, help="steps of the one long session")
    ap.add_argument("--short", type=int, default=9, help="number of short sessions")
    ap.add_argument("--short-steps", type=int, default=128)
    ap.add_argument("--resamples", type=int, default=StatsConfig().n_resamples)
    args = ap.parse_args()
    data = np.random.default_rng(0)
    sessions = [data.normal(5.0, 0.2, args.long)] + [data.normal(5.1, 0.2, args.short_steps) for _ in range(args.short)]
    n_steps = sum(len(s) for s in sessions)
    print(f"cell: 1 session x {args.long} steps + {args.short} x {args.short_steps} ({n_steps} steps), {args.resamples} resamples")
    padded_gib = args.resamples * len(sessions) * args.long * 8 / 1024**3
    print(f"padding to the longest session would need {padded_gib:.1f} GiB per (resamples, sessions, longest) float64 array")

    rss_before = max_rss_bytes()
    t = time.perf_counter()
    boot = hierarchical_bootstrap_medians(sessions, args.resamples, np.random.default_rng(StatsConfig().seed))
    wall = time.perf_counter() - t
    rss_increase = max_rss_bytes() - rss_before

    tracemalloc.start()  # a second run, traced: numpy reports its allocations to tracemalloc
    hierarchical_bootstrap_medians(sessions, args.resamples, np.random.default_rng(StatsConfig().seed))
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    lo, hi = np.quantile(boot, [0.025, 0.975])
    print(f"bootstrap: {wall:.2f} s wall; median {np.median(np.concatenate(sessions)):.4f}, 95 % interval [{lo:.4f}, {hi:.4f}]")
    print(f"peak resident increase (ru_maxrss): {rss_increase / 1024**2:.1f} MiB; traced peak (tracemalloc): {traced_peak / 1024**2:.1f} MiB")
    ok = max(rss_increase, traced_peak) <= LIMIT_BYTES
    print(f"{'PASS' if ok else 'FAIL'}: peak memory increase {'within' if ok else 'over'} 2 GiB")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
