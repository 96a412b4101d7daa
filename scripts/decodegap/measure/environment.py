"""The machine a session ran on: software versions, CPU, GPU, clocks and throttle state, and other
processes on the GPU. Everything is best effort: a missing tool is recorded as missing, never fatal."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys

# Every library whose version can change a decode step's time: the stack, and each attention and
# weight path's package (from the paths' own units). Absent ones are recorded as null.
STACK = ("torch", "transformers", "accelerate", "triton", "numpy", "safetensors")


def libraries() -> tuple[str, ...]:
    from decodegap.measure.attention import PATHS as ATTENTION
    from decodegap.measure.weights import PATHS as WEIGHTS

    units = [p.package for p in ATTENTION.values()] + [p.package for p in WEIGHTS.values()]
    return tuple(dict.fromkeys([*STACK, *units]))

# NVML clock-event bits that mean the clocks were pulled down by heat or power: a session timed
# under them is not measuring the GPU as specified.
THROTTLE_BITS = {
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}
INFO_BITS = {
    0x0000000000000001: "gpu_idle",
    0x0000000000000002: "applications_clocks_setting",
    0x0000000000000004: "sw_power_cap",
    0x0000000000000100: "display_clock_setting",
}


def library_versions() -> dict[str, str | None]:
    out = {}
    for name in libraries():
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_smi(args: list[str]) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in proc.stdout.strip().splitlines() if line.strip()]


def decode_clock_reasons(mask: int) -> list[str]:
    names = {**THROTTLE_BITS, **INFO_BITS}
    return [name for bit, name in names.items() if mask & bit]


def gpu_uuid(device) -> str | None:
    """The nvidia-smi id of torch's device (CUDA_VISIBLE_DEVICES renumbers, the UUID does not)."""
    import torch

    try:
        return f"GPU-{torch.cuda.get_device_properties(device).uuid}"
    except Exception:  # older torch, or no CUDA
        return None


def gpu_snapshot(uuid: str | None = None) -> dict | None:
    """Clocks, temperature, power and clock-event (throttle) reasons now, from nvidia-smi."""
    fields = ["clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "power.draw", "pstate"]
    select = [f"--id={uuid}"] if uuid else []
    for reasons_field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        rows = _nvidia_smi(select + [f"--query-gpu={','.join(fields + [reasons_field])}", "--format=csv,noheader,nounits"])
        if rows:
            break
    else:
        return None
    row = rows[0]
    snap = dict(zip(["sm_clock_MHz", "mem_clock_MHz", "max_sm_clock_MHz", "temperature_C", "power_W", "pstate"], row))
    for k in ("sm_clock_MHz", "mem_clock_MHz", "max_sm_clock_MHz", "temperature_C", "power_W"):
        try:
            snap[k] = float(snap[k])
        except (TypeError, ValueError):
            snap[k] = None
    try:
        mask = int(row[-1], 16)
    except ValueError:
        mask = None
    snap["clock_reasons_mask"] = mask
    snap["clock_reasons"] = decode_clock_reasons(mask) if mask is not None else None
    snap["throttled"] = [THROTTLE_BITS[b] for b in THROTTLE_BITS if mask and mask & b] if mask is not None else None
    return snap


def gpu_processes(uuid: str | None = None) -> list[dict] | None:
    """Compute processes on this GPU (all GPUs' when its UUID is unknown)."""
    rows = _nvidia_smi(["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"])
    if rows is None:
        return None
    procs = []
    for row in rows:
        if len(row) < 4 or (uuid and row[0] != uuid):
            continue
        try:
            procs.append({"pid": int(row[1]), "name": row[2], "used_memory_MiB": float(row[3])})
        except ValueError:
            continue
    return procs


def foreign_processes(procs: list[dict] | None, own_pid: int | None = None) -> tuple[list[dict], list[str]]:
    """Processes on the GPU that are not this one, and warnings where that cannot be told.

    In a container the GPU's pids belong to another namespace: then our own pid is not listed, and
    only a second process (beyond the one that must be ours) is evidence of a foreign one.
    """
    if procs is None:
        return [], ["nvidia-smi unavailable: foreign GPU processes not checked"]
    own_pid = os.getpid() if own_pid is None else own_pid
    if any(p["pid"] == own_pid for p in procs):
        return [p for p in procs if p["pid"] != own_pid], []
    if len(procs) <= 1:
        warnings = ["own process not listed by nvidia-smi (pid namespace?); foreign processes judged by count"] if procs else []
        return [], warnings
    return procs[1:], ["own process not listed by nvidia-smi (pid namespace?); foreign processes judged by count"]


def host_snapshot() -> dict:
    """Host CPU load now: eager decode is launch-bound, so a busy host slows it directly."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"loadavg_1_5_15": load, "cpu_affinity": affinity, **cpu_time_counters()}


def cpu_time_counters() -> dict:
    """Cumulative counters whose differences between snapshots say where host time went:
    steal_s, time the hypervisor ran something else on this machine's virtual CPUs (all CPUs
    summed; 0 on bare metal), and run_delay_ms, time this thread waited for a CPU in the
    scheduler's queue. None where the kernel does not expose them."""
    out = {"steal_s": None, "run_delay_ms": None}
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()  # "cpu user nice system idle iowait irq softirq steal ..."
        out["steal_s"] = int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/thread-self/schedstat") as f:
            out["run_delay_ms"] = int(f.read().split()[1]) / 1e6  # "on-cpu-ns run-delay-ns slices"
    except (OSError, ValueError, IndexError):
        pass
    return out


def device_problem(gpu) -> str | None:
    """Why this host cannot stand for the GPU type (no CUDA, another device), or None: checked
    before a session measures and before the environment stage records its verdicts."""
    import torch

    if gpu.device != "cuda":
        return None
    if not torch.cuda.is_available():
        return f"gpu '{gpu.key}' needs CUDA, but torch {torch.__version__} sees no CUDA device on this host"
    name = torch.cuda.get_device_name(0)
    if gpu.device_name_match and gpu.device_name_match.lower() not in name.lower():
        return f"gpu '{gpu.key}' expects a device named like '{gpu.device_name_match}', this host has '{name}'"
    return None


def boot_id() -> str | None:
    """This host's boot id (Linux): a lent GPU that comes back on a rebooted or another host is
    another machine, though its UUID is the same."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def static_environment(device: str) -> dict:
    import torch

    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),  # with the GPU UUID, names the machine (the statistics' top level)
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "libraries": library_versions(),
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device_type": torch.device(device).type,
        "gpu": None,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {
            "name": props.name,
            "memory_bytes": props.total_memory,
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "driver": None,
            "uuid": None,
        }
        uuid = gpu_uuid(device)
        rows = _nvidia_smi(([f"--id={uuid}"] if uuid else []) + ["--query-gpu=driver_version,uuid", "--format=csv,noheader"])
        if rows:
            gpu["driver"], gpu["uuid"] = rows[0][0], rows[0][1]
        env["gpu"] = gpu
    return env
