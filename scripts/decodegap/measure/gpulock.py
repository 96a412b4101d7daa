"""One measurement per GPU at a time, also without a scheduler.

Under SLURM the allocation already gives a job its own GPU. On a workstation, Snakemake's
`resources: gpu=1` only counts jobs; it does not say which GPU each may use. So a measurement takes
an exclusive lock on one GPU (a file lock the kernel drops when the process dies, however it
dies) and pins itself to that GPU before CUDA starts. A second measurement waits for a free GPU.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCK_DIR = Path(os.environ.get("DECODEGAP_LOCK_DIR", "/tmp/decodegap-gpu-locks"))


def visible_gpus() -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else every GPU nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    from decodegap.measure.environment import _nvidia_smi

    rows = _nvidia_smi(["--query-gpu=index", "--format=csv,noheader"]) or []
    return [r[0] for r in rows] or ["0"]


def acquire(log=print, poll_s: float = 2.0, timeout_s: float | None = None):
    """Lock a free GPU, pin this process to it, and return the open lock file (keep it open)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    gpus = visible_gpus()
    start, announced = time.monotonic(), False
    while True:
        for gpu in gpus:
            f = open(LOCK_DIR / f"gpu-{gpu.replace('/', '_')}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before CUDA initialises: device 0 is this GPU
            log(f"gpu lock: GPU {gpu} of {','.join(gpus)} ({f.name})")
            return f
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise TimeoutError(f"no free GPU among {gpus} after {timeout_s} s")
        if not announced:
            log(f"gpu lock: all of GPU {','.join(gpus)} busy with other measurements; waiting")
            announced = True
        time.sleep(poll_s)
