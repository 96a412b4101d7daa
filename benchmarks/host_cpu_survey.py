"""Which of this host's CPUs run at full speed, and how steadily: the CPU probe of
decodegap.timing, pinned to each CPU in turn. On a shared VM host a CPU whose physical core is
also busy for someone else runs the probe slower, and a launch-bound (eager) decode step with it.

    python benchmarks/host_cpu_survey.py [--seconds-per-cpu 2] [--cpus 0 1 2]

Prints, per CPU, the probe's ns per iteration (p10, median, p90) and the fraction of probes
slower than 1.25 x the fastest tail over all CPUs (decodegap's host-nominal rule); the last line
names the steadiest CPU, for `taskset -c CPU` or the batch runner's --cpus.
"""

import argparse
import os
import time

import numpy as np

from decodegap.analysis.stats import StatsConfig
from decodegap.measure.timing import cpu_probe_ms
from decodegap.core.protocol import Protocol

ITERATIONS = Protocol().step_probe_iterations  # the per-step probe of the measurement protocol
SLOW_FACTOR = StatsConfig().host_nominal_factor  # slower than this x the fast tail: not host-nominal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds-per-cpu", type=float, default=2.0)
    ap.add_argument("--cpus", type=int, nargs="*", default=sorted(os.sched_getaffinity(0)))
    a = ap.parse_args()
    samples = {}
    for cpu in a.cpus:
        os.sched_setaffinity(0, {cpu})
        xs, end = [], time.perf_counter() + a.seconds_per_cpu
        while time.perf_counter() < end:
            xs.append(cpu_probe_ms(ITERATIONS) * 1e6 / ITERATIONS)
        samples[cpu] = np.array(xs)
    tail = np.quantile(np.concatenate(list(samples.values())), 0.01)
    print(f"fast tail (1st percentile, all CPUs): {tail:.1f} ns/iteration; slow = above {SLOW_FACTOR * tail:.1f}")
    print("cpu  probes  p10   median  p90   slow")
    slow = {}
    for cpu, xs in samples.items():
        slow[cpu] = float(np.mean(xs > SLOW_FACTOR * tail))
        p10, med, p90 = np.quantile(xs, [0.1, 0.5, 0.9])
        print(f"{cpu:3d}  {xs.size:6d}  {p10:5.1f} {med:6.1f}  {p90:5.1f}  {100 * slow[cpu]:5.1f} %")
    best = min(slow, key=lambda c: (slow[c], np.median(samples[c])))
    print(f"steadiest cpu: {best}")


if __name__ == "__main__":
    main()
