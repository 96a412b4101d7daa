"""Per-step timing: device events around the enqueued work, the host clock from launch until the
new token is on the host (what a streaming consumer waits for), and the launching thread's CPU
time over the same step (how much of the step the host spent working, not waiting)."""

from __future__ import annotations

import time

import torch


class StepTimer:
    def __init__(self, device_type: str, capacity: int, probe_iterations: int = 0, device_clock: bool = True):
        # device_clock False: an engine that owns its loop reports its steps (add), with no events around them
        self.cuda = device_type == "cuda" and device_clock
        self.capacity = capacity
        self.probe_iterations = probe_iterations
        self._probe_before: list[float] = []
        self._probe_after: list[float] = []
        if self.cuda:
            # Events are made up front: creating them inside the timed loop would be timed too.
            self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
            self._ends = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
        self._host_ns: list[int] = []
        self._cpu_ns: list[int] = []
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self._host_ns)

    def step(self, decoder) -> int:
        i = len(self._host_ns)
        if i >= self.capacity:
            raise RuntimeError(f"timer capacity {self.capacity} exceeded")
        if self.probe_iterations:  # the host core's speed just before and just after, untimed
            self._probe_before.append(cpu_probe_ms(self.probe_iterations))
        c0 = time.thread_time_ns()  # outside the wall window: the wall clock times only the step
        t0 = time.perf_counter_ns()
        if self.cuda:
            self._starts[i].record()
        decoder.launch()
        if self.cuda:
            self._ends[i].record()
        token = decoder.read_token()
        self._host_ns.append(time.perf_counter_ns() - t0)
        self._cpu_ns.append(time.thread_time_ns() - c0)
        if self.probe_iterations:
            self._probe_after.append(cpu_probe_ms(self.probe_iterations))
        self.tokens.append(token)
        return token

    def add(self, host_ns: int, cpu_ns: int, token: int, probe_before_ms: float | None = None,
            probe_after_ms: float | None = None) -> None:
        """One step timed by an engine's own loop (decodegap.measure.modes.GenerateDecoder): its host
        and thread-CPU nanoseconds, its token, and the host probes run just before and after it."""
        if len(self._host_ns) >= self.capacity:
            raise RuntimeError(f"timer capacity {self.capacity} exceeded")
        if self.probe_iterations:
            self._probe_before.append(probe_before_ms)
            self._probe_after.append(probe_after_ms)
        self._host_ns.append(host_ns)
        self._cpu_ns.append(cpu_ns)
        self.tokens.append(token)

    def host_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self._host_ns]

    def host_cpu_ms(self) -> list[float]:
        """CPU time of the launching thread per step. A busy-waiting sync counts as CPU time, so
        read it against host_ms: equal means the host was running the step throughout."""
        return [ns / 1e6 for ns in self._cpu_ns]

    def samples(self) -> dict:
        out = {"host_ms": self.host_ms(), "device_ms": self.device_ms(), "host_cpu_ms": self.host_cpu_ms(), "tokens": self.tokens}
        if self.probe_iterations:
            out["cpu_probe_before_ms"], out["cpu_probe_after_ms"] = self._probe_before, self._probe_after
        return out

    def device_ms(self) -> list[float] | None:
        """Event times; None on a CPU, which has no device clock apart from the host's."""
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(self._starts[: len(self)], self._ends[: len(self)])]


def timed(fn, device_type: str) -> tuple[object, float, float | None]:
    """Run fn() once; return (result, host ms, device ms or None)."""
    if device_type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        return result, (time.perf_counter_ns() - t0) / 1e6, start.elapsed_time(end)
    t0 = time.perf_counter_ns()
    result = fn()
    return result, (time.perf_counter_ns() - t0) / 1e6, None


from decodegap.measure.probe import PROBE_ITERATIONS, cpu_probe_ms  # noqa: E402,F401 - torch-free, for llama.cpp's process too
