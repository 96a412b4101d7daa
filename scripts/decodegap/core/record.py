"""The session record: its one builder, its schema, an atomic write that never overwrites, and a
checked read."""

from __future__ import annotations

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from decodegap.core import paths
from decodegap.core.config import REPO_ROOT, GpuSpec, ModelCard
from decodegap.core.errors import RawFileError, SessionExists
from decodegap.core.floor import MemoryFloor
from decodegap.core.protocol import Protocol, contradictions

SCHEMA_ID = "decodegap.session/1"
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "session.schema.json"


def build_record(*, cell: dict, session: int, seed: int, reasons: list[str], warnings: list[str], protocol: Protocol,
                 arms: list[dict], block_order: list[str], cpu_probe: dict | None, floor: dict | None, card: ModelCard,
                 gpu: GpuSpec, environment: dict, code: dict, time: dict, error: dict | None) -> dict:
    """The one session-record builder. The measure command and the synthetic records of tests and
    benchmarks both call it, so a fixture cannot drift from what a device writes. The status follows
    from the reasons: a record without any is valid."""
    return {
        "schema": SCHEMA_ID,
        "cell": {k: cell[k] for k in paths.CELL_KEYS},
        "session": session,
        "seed": seed,
        "status": "invalid" if reasons else "valid",
        "reasons": list(reasons),
        "warnings": list(warnings),
        "protocol": protocol.as_record(),
        "arms": arms,
        "block_order": block_order,
        "cpu_probe": cpu_probe,
        "floor": floor,
        "model": {
            "display_name": card.display_name, "model_type": card.model_type, "architecture": dict(card.architecture),
            "published_params": card.published_params, "checkpoint": card.checkpoint, "source": card.source,
        },
        "gpu_spec": {k: v for k, v in vars(gpu).items() if k != "key"},  # what the measurement saw
        "environment": environment,
        "code": code,
        "time": time,
        "error": error,
    }


def floor_record(floor: MemoryFloor, kv_bytes_per_token: int, param_count: int) -> dict:
    """The record's floor block: W, K and the floors at the bandwidths the measurement saw."""
    return {**floor.as_record(), "kv_bytes_per_token": kv_bytes_per_token, "param_count": param_count}


@lru_cache(maxsize=1)
def _validator():
    try:
        import jsonschema
    except ImportError:
        return None
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(record: dict) -> list[str] | None:
    """Schema violations as 'path: message' lines; None when jsonschema is not installed."""
    validator = _validator()
    if validator is None:
        return None
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}" for e in errors]


def encode(record: dict) -> bytes:
    return (json.dumps(record, indent=1, allow_nan=False) + "\n").encode()


def write_session(record: dict, path: str | Path) -> str:
    """Write `record` to `path` atomically; never replace an existing, different file.
    Returns "written", or "unchanged" when the same bytes are already there."""
    return write_exclusive(encode(record), path)


def write_exclusive(data: bytes, path: str | Path) -> str:
    """Put `data` at `path` atomically and read-only, never replacing a different file.

    The bytes go to a temporary file in the same folder, are synced, then hard-linked into place:
    the link fails if the target appeared meanwhile, so two writers can never clobber each other,
    and a reader (or a killed job) never sees half a file. (A rename would replace the target.)
    """
    path = Path(path)
    if path.exists():
        if path.read_bytes() == data:
            return "unchanged"
        raise SessionExists(f"{path}: a different session is already recorded there; sessions are never overwritten")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o444)  # read-only: a session is data, never edited in place
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SessionExists(f"{path}: appeared while writing; sessions are never overwritten") from None
        except OSError:
            # A filesystem without hard links: exclusive create, then the same bytes.
            try:
                with open(path, "xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except FileExistsError:
                raise SessionExists(f"{path}: appeared while writing; sessions are never overwritten") from None
            os.chmod(path, 0o444)
    finally:
        os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return "written"


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NonFinite(name)


def read_session(path: str | Path) -> dict:
    """A raw session, or RawFileError naming the file when it is unreadable, corrupt, truncated,
    foreign, not finite (JSON's NaN and Infinity), off its schema, or when its status contradicts
    its own samples (see validity.contradictions)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            record = json.loads(f.read(), parse_constant=_refuse_constant)
    except _NonFinite as exc:
        raise RawFileError(f"{path}: holds {exc} where a number must be finite") from None
    except json.JSONDecodeError as exc:
        raise RawFileError(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    except UnicodeDecodeError:
        raise RawFileError(f"{path}: not text; not a session record") from None
    except OSError as exc:
        raise RawFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_ID:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        raise RawFileError(f"{path}: foreign schema {found!r}; expected {SCHEMA_ID!r}")
    errors = schema_errors(record)
    if errors:
        raise RawFileError(f"{path}: does not match {SCHEMA_ID}: " + "; ".join(errors[:5]))
    if errors is not None:  # only a schema-checked record has the fields the check reads
        wrong = contradictions(record)
        if wrong:
            raise RawFileError(f"{path}: status '{record['status']}' contradicts its own data: " + "; ".join(wrong[:5]))
    return record


def read_filed_session(path: str | Path) -> dict:
    """A session as the analysis takes it: read_session's checks, under its one canonical file name
    (s07.json, never s7.json or s007.json beside it), and filed under its own cell's folder."""
    record = read_session(path)
    if Path(path).name != paths.canonical_name(record["session"]):
        raise RawFileError(f"{path}: holds session {record['session']}, whose one file name is "
                           f"{paths.canonical_name(record['session'])}; a second name would count it twice")
    from_path = paths.parse_session_path(path)
    if from_path is not None:
        in_file = {**record["cell"], "session": record["session"]}
        if from_path != in_file:
            diff = {k: (from_path[k], in_file[k]) for k in from_path if from_path[k] != in_file[k]}
            raise RawFileError(f"{path}: filed under another cell; (path, file) disagree on {diff}")
    return record


def machine_id(environment: dict) -> str:
    """The machine a session ran on: its GPU's UUID (else the hostname), with the host's boot id
    where the record has one (sessions from 2026-11-29 evening on)."""
    gpu = environment.get("gpu") or {}
    name = gpu.get("uuid") or environment.get("hostname") or "unknown"
    return f"{name}/{environment['boot_id']}" if environment.get("boot_id") else name
