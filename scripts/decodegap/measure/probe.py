"""The host CPU probe, without torch (llama.cpp's process runs it too: decodegap.measure.engines.llamacpp)."""

from __future__ import annotations

import time

PROBE_ITERATIONS = 20_000


def cpu_probe_ms(iterations: int = PROBE_ITERATIONS) -> float:
    """Wall time of a fixed pure-Python loop: this core's speed for interpreter work right now.

    An eager decode step is mostly interpreter and dispatcher work on one core, so its time tracks
    this probe when the host's speed changes (frequency, a busy SMT sibling, a shared VM host).
    Run between blocks (PROBE_ITERATIONS) and around every step (Protocol.step_probe_iterations,
    about 0.08 ms at full speed), never inside a timed step."""
    t0 = time.perf_counter_ns()
    acc = 0
    for i in range(iterations):
        acc += i & 7
    return (time.perf_counter_ns() - t0) / 1e6
