"""Measured device copy bandwidth: the reachable ceiling beside the datasheet's B_peak.

A device-to-device copy of a buffer much larger than the last-level cache, counting bytes read plus
bytes written, median of several repetitions after a warm-up.
"""

from __future__ import annotations

import statistics
import time

import torch

DEFAULT_BYTES = {"cuda": 1 << 30, "cpu": 1 << 26}  # 1 GiB on a GPU (>> 60 MB of L2), 64 MiB on a CPU


def copy_bandwidth_Bps(device: str, nbytes: int | None = None, repeats: int = 10) -> float:
    device_type = torch.device(device).type
    nbytes = nbytes or DEFAULT_BYTES[device_type]
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: first touch, allocator, kernel load
    times_s = []
    for _ in range(repeats):
        if device_type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times_s.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            times_s.append(time.perf_counter() - t0)
    del src, dst
    if device_type == "cuda":
        torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times_s)
