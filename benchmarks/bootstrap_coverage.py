"""Coverage of the cell interval over simulated cells with a known true median.

Each simulated cell: machines x sessions x steps, step = truth x (1 + machine + session + step
noise), normal effects with the relative SDs below. For each design and each interval scheme it
prints how often the 95 % interval covers the truth, and the interval's mean width (% of the truth).

    python benchmarks/bootstrap_coverage.py [--draws 300] [--resamples 1000]

Schemes: the default (resample machines, keep their sessions and steps; Student-t on the bootstrap
SE with U-1 degrees of freedom, log scale), the same with percentile intervals, the three-level
percentile bootstrap (machines, sessions, steps), and the session bootstrap that ignores machines
(sessions, steps: the scheme before issue 11).
"""

from __future__ import annotations

import argparse
import time

from decodegap.analysis.stats import StatsConfig
from decodegap.analysis.synthetic import coverage

DESIGNS = [  # machines, sessions per machine, steps, machine SD, session SD, step SD
    (2, 3, 64, 0.02, 0.005, 0.02),
    (3, 3, 64, 0.02, 0.005, 0.02),
    (5, 2, 64, 0.02, 0.005, 0.02),
    (10, 2, 64, 0.02, 0.005, 0.02),
    (3, 3, 64, 0.0, 0.005, 0.02),
    (5, 2, 64, 0.0, 0.005, 0.02),
    (5, 2, 64, 0.0, 0.0, 0.02),
]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=300)
    p.add_argument("--resamples", type=int, default=1000)
    args = p.parse_args(argv)
    schemes = {
        "machines, student-t (default)": StatsConfig(n_resamples=args.resamples),
        "machines, percentile": StatsConfig(n_resamples=args.resamples, interval="percentile"),
        "machines+sessions+steps, percentile": StatsConfig(n_resamples=args.resamples, levels=("machines", "sessions", "steps"), interval="percentile"),
        "sessions+steps, percentile (machines ignored)": StatsConfig(n_resamples=args.resamples, levels=("sessions", "steps"), interval="percentile"),
    }
    print(f"{args.draws} simulated cells per design, {args.resamples} resamples; coverage of the 95 % interval (width, % of truth)")
    print(f"{'M':>3} {'n/M':>4} {'sd_m':>5} {'sd_s':>5} {'sd_e':>5}  " + "  ".join(f"{k[:34]:>34}" for k in schemes))
    t0 = time.perf_counter()
    for m, n, steps, sm, ss, se in DESIGNS:
        cells = []
        for cfg in schemes.values():
            r = coverage(cfg, m, n, steps, sm, ss, se, args.draws)
            cells.append(f"{100 * r['coverage']:5.1f} % ({100 * r['mean_rel_width']:6.2f} %)")
        print(f"{m:>3} {n:>4} {sm:>5} {ss:>5} {se:>5}  " + "  ".join(f"{c:>34}" for c in cells), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
