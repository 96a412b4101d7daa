"""The anatomy of a decode step, from an untimed profiler pass at the end of a session.

After the timed steps (never during them), each arm runs `protocol.profile_steps` more steps under
torch.profiler. From the trace:
  kernels_per_step       device kernels launched per step (a graph replay's kernels included:
                         CUPTI traces graph nodes one by one)
  gpu_busy_ms_per_step   the union of the kernels' intervals on the device, per step: the time the
                         GPU spent working, gaps excluded
  host_ops               the host-side operators with the most CPU time per step (aten level: the
                         attention dispatch among them), their calls and self/total CPU ms
  kernels                the device kernels with the most time per step, by name: ms_per_step is
                         the profiler's (each launch from its start to its end), exclusive_ms_per_step
                         the part no kernel started before it still covers (records from 2026-12-02
                         on). Under programmatic dependent launch a kernel starts before the one
                         before it ends and waits inside it, so ms_per_step counts that wait and the
                         kernels' sum passes the busy time; the exclusive times add up to it exactly
  kernel_names           every kernel name seen, with its calls per step: which attention kernel
                         ran (decodegap.measure.attention checks it against the path)
The profiler slows the host side, so nothing here is a step time: the timed samples are.
"""

from __future__ import annotations

TOP = 15  # operators and kernels kept per arm


def _busy_ms(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (us in, ms out)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e3


def _exclusive_us(intervals: list[tuple[float, float, str]]) -> dict[str, float]:
    """Each name's time (us) that no kernel started before it still covers: kernels in order of
    start, each credited from the later of its start and the furthest end so far. The credits add
    up to the union of the intervals (_busy_ms), so a dependent kernel that launched early and
    waited (PDL) is credited only with what it ran after the kernel before it."""
    out: dict[str, float] = {}
    end = float("-inf")
    for a, b, name in sorted(intervals):
        out[name] = out.get(name, 0.0) + max(0.0, b - max(a, end))
        end = max(end, b)
    return out


def summarize(events, n_steps: int) -> dict:
    """The step anatomy from a profiler's FunctionEvents (torch.profiler.profile().events())."""
    from torch.autograd import DeviceType

    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    host = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]
    by_kernel: dict[str, list[float]] = {}
    for k in kernels:
        by_kernel.setdefault(k.name, []).append(k.time_range.elapsed_us())
    by_op: dict[str, list[tuple[float, float]]] = {}
    for e in host:
        by_op.setdefault(e.name, []).append((e.cpu_time_total, e.self_cpu_time_total))
    ops = sorted(by_op.items(), key=lambda kv: -sum(t for t, _ in kv[1]))[:TOP]
    top_kernels = sorted(by_kernel.items(), key=lambda kv: -sum(kv[1]))[:TOP]
    exclusive = _exclusive_us([(k.time_range.start, k.time_range.end, k.name) for k in kernels])
    return {
        "steps": n_steps,
        "kernels_per_step": len(kernels) / n_steps,
        "gpu_busy_ms_per_step": _busy_ms([(k.time_range.start, k.time_range.end) for k in kernels]) / n_steps if kernels else None,
        "host_ops": [{"name": name, "calls_per_step": len(v) / n_steps,
                      "cpu_total_ms_per_step": sum(t for t, _ in v) / 1e3 / n_steps,
                      "cpu_self_ms_per_step": sum(s for _, s in v) / 1e3 / n_steps} for name, v in ops],
        "kernels": [{"name": name[:200], "calls_per_step": len(v) / n_steps, "ms_per_step": sum(v) / 1e3 / n_steps,
                     "exclusive_ms_per_step": exclusive[name] / 1e3 / n_steps} for name, v in top_kernels],
        "kernel_names": {name[:200]: len(v) / n_steps for name, v in sorted(by_kernel.items())},
    }


def profile_steps(decoder, n_steps: int, device: str) -> dict:
    """Run n_steps more steps of `decoder` under the profiler and summarize them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(n_steps):
            decoder.launch()
            decoder.read_token()
        if device == "cuda":
            torch.cuda.synchronize()
    return summarize(prof.events(), n_steps)
