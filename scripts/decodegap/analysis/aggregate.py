"""Raw session JSON -> two Parquet tables with an explicit schema.

sessions: one row per (session, arm): cell keys, status and reasons, floor inputs, environment and
          code summary, and the raw file's path and sha256. A session that never ran an arm (an
          expected failure) still has one row, arm = null, so invalid cells flow through.
steps:    one row per timed step: cell keys, session, arm, step index, block, host and device ms,
          the launching thread's CPU ms, and the host core's speed from the CPU probes (before the
          step's block; around the step itself).

The floor columns (b_peak_Bps, t_floor_s, t_floor_no_embedding_s) divide the recorded bytes by the
B_peak of the analysis config, the one value every artifact of a report uses (a corrected datasheet
figure needs no re-measurement); measured_b_peak_Bps and measured_t_floor_s keep what the
measurement itself saw, as provenance.

A raw file stops the run with an error naming it when it is not the file the manifest lists (not
listed, or other bytes), corrupt, truncated or foreign, filed under another cell's folder, from a
CUDA GPU type without a GPU UUID, or holding the same samples as another session. Validity is
judged by the analysis config's protocol, never by a looser one a record states
(decodegap.core.record.rejudge): `status` and `reasons` are the analysis's verdict, and a verdict
that differs from the record's own is said in `warnings`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import hashlib

from decodegap.core import manifest
from decodegap.core.errors import RawFileError
from decodegap.core.floor import MemoryFloor
from decodegap.core.protocol import Protocol
from decodegap.core.record import analysis_problems, filed_problem, machine_id, parse_session, read_bytes, rejudge, SampleIndex

_KEY = pa.dictionary(pa.int32(), pa.string())
CELL_FIELDS = [
    pa.field("gpu", _KEY, nullable=False),
    pa.field("model", _KEY, nullable=False),
    pa.field("ctx", pa.int32(), nullable=False),
    pa.field("attn", _KEY, nullable=False),
    pa.field("quant", _KEY, nullable=False),
    pa.field("mode", _KEY, nullable=False),
    pa.field("session", pa.int32(), nullable=False),
    pa.field("arm", _KEY),
]
SESSIONS_SCHEMA = pa.schema(
    CELL_FIELDS
    + [
        pa.field("status", _KEY, nullable=False),
        pa.field("reasons", pa.string(), nullable=False),  # "; "-joined
        pa.field("warnings", pa.string(), nullable=False),
        pa.field("error_kind", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("n_steps", pa.int32(), nullable=False),
        pa.field("median_host_ms", pa.float64()),
        pa.field("median_device_ms", pa.float64()),
        pa.field("median_host_cpu_ms", pa.float64()),
        pa.field("prefill_host_ms", pa.float64()),
        # the untimed profiler pass after the timed steps (null before 2026-11-29 or when it failed)
        pa.field("kernels_per_step", pa.float64()),
        pa.field("gpu_busy_ms_per_step", pa.float64()),
        pa.field("host_ops_json", pa.string()),  # top host operators: [{name, calls_per_step, cpu_*_ms_per_step}]
        pa.field("kernels_json", pa.string()),  # top kernels: [{name, calls_per_step, ms_per_step}]
        # which attention kernels ran, by family (decodegap.measure.attention): {family: [names]}; null
        # before 2026-11-30 or off the GPU
        pa.field("attention_kernels_json", pa.string()),
        pa.field("layers_per_step", pa.int32()),  # mode layer: attention calls per timed step
        pa.field("compile_s", pa.float64()),  # modes compiled and fused: the compiling first call, outside the samples
        pa.field("logit_rel_l2", pa.float64()),  # mode fused: its logits against the model's (relative L2, worst step)
        pa.field("param_count", pa.int64()),
        pa.field("weight_bytes", pa.int64()),
        pa.field("weight_bytes_no_embedding", pa.int64()),
        pa.field("kv_bytes", pa.int64()),
        pa.field("b_peak_Bps", pa.float64()),  # the analysis config's: what the report divides by
        pa.field("copy_bandwidth_Bps", pa.float64()),
        pa.field("t_floor_s", pa.float64()),
        pa.field("t_floor_no_embedding_s", pa.float64()),
        pa.field("measured_b_peak_Bps", pa.float64()),  # the record's: what the measurement saw
        pa.field("measured_t_floor_s", pa.float64()),
        # the machine: GPU UUID (else hostname) and, where recorded, the host's boot id; the
        # statistics resample machines first
        pa.field("machine", pa.string(), nullable=False),
        pa.field("gpu_uuid", pa.string()),
        pa.field("boot_id", pa.string()),
        pa.field("environment_record", pa.string()),  # the GPU type's environment record the session ran under
        pa.field("environment_sha256", pa.string()),
        pa.field("gpu_name", pa.string()),
        pa.field("driver", pa.string()),
        pa.field("torch", pa.string()),
        pa.field("transformers", pa.string()),
        pa.field("code_commit", pa.string()),
        pa.field("code_dirty", pa.bool_()),
        pa.field("sources_sha256", pa.string()),
        pa.field("started_utc", pa.string()),
        pa.field("duration_s", pa.float64()),
        pa.field("raw_path", pa.string(), nullable=False),
        pa.field("raw_sha256", pa.string(), nullable=False),
    ]
)
STEPS_SCHEMA = pa.schema(
    CELL_FIELDS
    + [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("block", pa.int32()),
        pa.field("host_ms", pa.float64(), nullable=False),
        pa.field("device_ms", pa.float64()),
        pa.field("host_cpu_ms", pa.float64()),  # launching thread's CPU time; null before 2026-11-29
        # Host core speed as ns per iteration of the CPU probe (higher: slower core): the probe run
        # before this step's block, and the slower of the probes just before and after the step.
        pa.field("block_probe_ns_per_iter", pa.float64()),
        pa.field("step_probe_ns_per_iter", pa.float64()),
    ]
)


def _median(xs):
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def floor_columns(record: dict, b_peak_Bps: float) -> dict:
    """The record's bytes over the analysis config's B_peak (MemoryFloor, the one formula), beside
    the floor the record itself states."""
    floor = record.get("floor")
    measured = {"measured_b_peak_Bps": (floor or {}).get("b_peak_Bps", record["gpu_spec"]["b_peak_Bps"]),
                "measured_t_floor_s": (floor or {}).get("t_floor_s")}
    if not floor:  # the session failed before its model was built
        return {"b_peak_Bps": b_peak_Bps, "t_floor_s": None, "t_floor_no_embedding_s": None, **measured}
    f = MemoryFloor(floor["weight_bytes"], floor["weight_bytes_no_embedding"], floor["kv_bytes"], b_peak_Bps, floor["copy_bandwidth_Bps"])
    return {"b_peak_Bps": b_peak_Bps, "t_floor_s": f.t_floor_s, "t_floor_no_embedding_s": f.t_floor_no_embedding_s, **measured}


def anatomy_columns(anatomy: dict | None) -> dict:
    if not anatomy or "error" in anatomy:
        return {"kernels_per_step": None, "gpu_busy_ms_per_step": None, "host_ops_json": None, "kernels_json": None}
    return {"kernels_per_step": anatomy["kernels_per_step"], "gpu_busy_ms_per_step": anatomy["gpu_busy_ms_per_step"],
            "host_ops_json": json.dumps(anatomy["host_ops"]), "kernels_json": json.dumps(anatomy["kernels"])}


def rows_of(record: dict, path: str | Path, sha256: str, b_peak_Bps: float, verdict: tuple[str, list[str]] | None = None) -> tuple[list[dict], list[dict]]:
    """The record's rows; `verdict` (status, reasons): the analysis's own, where it judged the record."""
    cell = {**record["cell"], "session": record["session"]}
    floor = record.get("floor") or {}
    env, code = record["environment"], record["code"]
    status, reasons = verdict or (record["status"], record["reasons"])
    warnings = list(record["warnings"])
    if status != record["status"]:
        warnings.append(f"judged {status} under the analysis config's protocol (the record says {record['status']})")
    common = {
        "status": status,
        "reasons": "; ".join(reasons),
        "warnings": "; ".join(warnings),
        "error_kind": (record.get("error") or {}).get("kind"),
        "seed": record["seed"],
        **{k: floor.get(k) for k in ("param_count", "weight_bytes", "weight_bytes_no_embedding", "kv_bytes", "copy_bandwidth_Bps")},
        **floor_columns(record, b_peak_Bps),
        "machine": machine_id(env),
        "gpu_uuid": (env.get("gpu") or {}).get("uuid"),
        "boot_id": env.get("boot_id"),
        "environment_record": (env.get("environment_record") or {}).get("path"),
        "environment_sha256": (env.get("environment_record") or {}).get("sha256"),
        "gpu_name": (env.get("gpu") or {}).get("name") or env.get("device_type"),
        "driver": (env.get("gpu") or {}).get("driver"),
        "torch": env["libraries"].get("torch"),
        "transformers": env["libraries"].get("transformers"),
        "code_commit": code.get("commit"),
        "code_dirty": code.get("dirty"),
        "sources_sha256": code.get("sources_sha256"),
        "started_utc": record["time"]["started_utc"],
        "duration_s": record["time"]["duration_s"],
        "raw_path": Path(path).as_posix(),
        "raw_sha256": sha256,
    }
    sessions, steps = [], []
    for arm in record["arms"] or [None]:
        if arm is None:
            sessions.append({**cell, "arm": None, "n_steps": 0, "median_host_ms": None, "median_device_ms": None, "median_host_cpu_ms": None,
                             "prefill_host_ms": None, **anatomy_columns(None), **common, "attention_kernels_json": None,
                             "layers_per_step": None, "compile_s": None, "logit_rel_l2": None})
            continue
        timed = arm["timed"]
        host, device = timed["host_ms"], timed["device_ms"]
        cpu = timed.get("host_cpu_ms")
        sessions.append(
            {
                **cell, "arm": arm["mode"], "n_steps": len(host), "median_host_ms": _median(host),
                "median_device_ms": _median(device) if device else None,
                "median_host_cpu_ms": _median(cpu) if cpu else None,
                "prefill_host_ms": arm["prefill"]["host_ms"], **anatomy_columns(arm.get("anatomy")), **common,
                "attention_kernels_json": json.dumps(arm["attention_kernels"]) if "attention_kernels" in arm else None,
                "layers_per_step": arm.get("layers_per_step"),
                "compile_s": arm.get("compile_s"),
                "logit_rel_l2": (arm.get("logit_check") or {}).get("rel_l2_max"),
            }
        )
        n = len(host)  # every per-step list has n entries (decodegap.core.record.analysis_problems)
        blocks = timed.get("block") or [None] * n
        block_probe = record.get("cpu_probe") or {}
        per_block = [ms * 1e6 / block_probe["iterations"] for ms in block_probe.get("ms_before_block") or []]
        block_x = [per_block[b] if b is not None and b < len(per_block) else None for b in blocks]
        step_iters = record["protocol"].get("step_probe_iterations") or 0
        if step_iters and timed.get("cpu_probe_before_ms"):
            step_x = [max(a, z) * 1e6 / step_iters for a, z in zip(timed["cpu_probe_before_ms"], timed["cpu_probe_after_ms"])]
        else:
            step_x = [None] * n
        for i, (h, d, c, b, bx, sx) in enumerate(zip(host, device or [None] * n, cpu or [None] * n, blocks, block_x, step_x)):
            steps.append({**cell, "arm": arm["mode"], "step": i, "block": b, "host_ms": h, "device_ms": d, "host_cpu_ms": c,
                          "block_probe_ns_per_iter": bx, "step_probe_ns_per_iter": sx})
    return sessions, steps


def read_checked(path: str | Path, gpu_device: str | None, listed_by_root: dict) -> tuple[dict, str]:
    """A session as the analysis takes it, and its sha256: the bytes the manifest of its tree lists
    (results/raw.sha256 beside its results/raw/), every check of decodegap.core.record, filed under its
    own cell, and what the analysis refuses beyond the schema (analysis_problems)."""
    root = manifest.root_of(path)
    if root is None:
        raise RawFileError(f"{path}: not under a results/raw/ tree; sessions are read only where a manifest lists them")
    data = read_bytes(path)
    sha = hashlib.sha256(data).hexdigest()
    if root not in listed_by_root:
        listed_by_root[root] = manifest.read(root)
    manifest.expect(path, data, sha, listed_by_root[root], root)
    record = parse_session(data, path)
    why = filed_problem(record, path)
    if why:
        raise RawFileError(f"{path}: {why}")
    problems = analysis_problems(record, gpu_device)
    if problems:
        raise RawFileError(f"{path}: " + "; ".join(problems))
    return record, sha


def aggregate(raw_files: list[str | Path], b_peak_Bps: float, protocol: Protocol | None = None, gpu_device: str | None = "cuda",
              seen_samples: SampleIndex | None = None) -> tuple[pa.Table, pa.Table]:
    """One cell's raw sessions as its sessions and steps tables. b_peak_Bps: the analysis config's;
    protocol: the analysis config's, which judges every session (None: the protocol's defaults);
    gpu_device: the cell's GPU type's device (cuda: its timed sessions need a GPU UUID);
    seen_samples: the step times already read (a group of cells shares one index: a session's
    samples filed again under another session, even of another cell, are refused)."""
    protocol = protocol or Protocol()
    sessions, steps = [], []
    seen: dict[tuple, str] = {}
    seen_samples = SampleIndex() if seen_samples is None else seen_samples
    listed: dict = {}
    for path in sorted(raw_files, key=lambda p: Path(p).as_posix()):
        record, sha = read_checked(path, gpu_device, listed)
        key = (*record["cell"].values(), record["session"])
        if key in seen:
            raise RawFileError(f"{path}: session {record['session']} of this cell is also recorded in {seen[key]}; "
                               "one session, one file")
        seen[key] = Path(path).as_posix()
        twin = seen_samples.twin(record, Path(path).as_posix())
        if twin is not None:
            raise RawFileError(f"{path}: its samples are those of {twin} (half or more of an arm's step times): the "
                               "same session's steps filed twice count it twice; remove the copy")
        seen_samples.add(record, Path(path).as_posix())
        s, t = rows_of(record, path, sha, b_peak_Bps, rejudge(record, protocol))
        sessions += s
        steps += t
    return pa.Table.from_pylist(sessions, schema=SESSIONS_SCHEMA), pa.Table.from_pylist(steps, schema=STEPS_SCHEMA)


def concat(parquet_files: list[str | Path], schema: pa.Schema, out: str | Path) -> None:
    """One table from per-cell tables (the combined view users load)."""
    tables = [pq.read_table(p, schema=schema) for p in parquet_files]
    table = pa.concat_tables(tables).unify_dictionaries() if tables else schema.empty_table()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
