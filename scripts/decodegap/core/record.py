"""The session record: its one builder, its schema, an atomic write that never overwrites, and a
checked read."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
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
    out = []
    for e in sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path)):
        while e.context:  # oneOf/anyOf: the deepest error of the alternatives says what is wrong, not the whole value
            e = max(e.context, key=lambda c: len(c.absolute_path))
        out.append(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:200]}")
    return out


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


@dataclass(frozen=True)
class Limits:
    """What a session file may be, stated once (the reader and ingest hold every file to it)."""

    max_bytes: int = 16 * 2**20  # the largest bundled session is 0.35 MB; a 200 MB file is not a session
    max_depth: int = 24  # a record nests 7 levels; JSON nested deeper is not a record
    max_number: float = 1e18  # anything larger is no measurement (steps and bytes are bounded by the schema)


LIMITS = Limits()


def _walk_values(record, limits: Limits) -> str | None:
    """Why a parsed record holds what no record can (a string that is not valid Unicode, nesting
    past the limit, an absurd number), or None. Iterative: a deep document cannot exhaust the stack."""
    stack = [(record, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > limits.max_depth:
            return f"nests deeper than {limits.max_depth} levels (at {where or '<root>'})"
        if isinstance(value, dict):
            for k, v in value.items():
                if not _valid_text(k):
                    return f"holds a key that is not valid Unicode (a lone surrogate) under {where or '<root>'}"
                stack.append((v, depth + 1, f"{where}/{k}"))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{where}/{i}") for i, v in enumerate(value))
        elif isinstance(value, str):
            if not _valid_text(value):
                return f"holds a string that is not valid Unicode (a lone surrogate) at {where}"
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > limits.max_number:
            return f"holds the absurd number {value!r} at {where} (beyond {limits.max_number:g})"
    return None


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def read_bytes(path: str | Path, limits: Limits = LIMITS) -> bytes:
    """A session file's bytes, refusing links, non-regular files and files over the size limit
    before reading them (O_NOFOLLOW: a link swapped in after a check is not followed either)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if path.is_symlink():
            raise RawFileError(f"{path}: a symbolic link; a session must be a regular file of the tree") from None
        raise RawFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RawFileError(f"{path}: not a regular file; a session is one")
        if info.st_size > limits.max_bytes:
            raise RawFileError(f"{path}: {info.st_size} bytes, over the {limits.max_bytes} a session file may have")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limits.max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > limits.max_bytes:
        raise RawFileError(f"{path}: over the {limits.max_bytes} bytes a session file may have")
    return data


def parse_session(data: bytes, path: str | Path, limits: Limits = LIMITS) -> dict:
    """A session from its bytes, or RawFileError naming the file when they are corrupt, truncated,
    foreign, not finite (JSON's NaN and Infinity), not valid Unicode, nested or sized past the
    limits, off their schema, or when the status contradicts the record's own samples."""
    try:
        record = json.loads(data, parse_constant=_refuse_constant)
    except _NonFinite as exc:
        raise RawFileError(f"{path}: holds {exc} where a number must be finite") from None
    except json.JSONDecodeError as exc:
        raise RawFileError(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    except UnicodeDecodeError:
        raise RawFileError(f"{path}: not text; not a session record") from None
    except RecursionError:
        raise RawFileError(f"{path}: nests deeper than {limits.max_depth} levels; not a session record") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_ID:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        if not isinstance(found, (str, type(None))) or (isinstance(found, str) and not _valid_text(found)):
            found = "(not a name)"
        raise RawFileError(f"{path}: foreign schema {found!r}; expected {SCHEMA_ID!r}")
    odd = _walk_values(record, limits)
    if odd:
        raise RawFileError(f"{path}: {odd}")
    errors = schema_errors(record)
    if errors:
        raise RawFileError(f"{path}: does not match {SCHEMA_ID}: " + "; ".join(errors[:5]))
    if errors is not None:  # only a schema-checked record has the fields the check reads
        try:
            Protocol.from_record(record["protocol"])
        except ValueError as exc:
            raise RawFileError(f"{path}: states a protocol no session runs under: {exc}") from None
        wrong = contradictions(record)
        if wrong:
            raise RawFileError(f"{path}: status '{record['status']}' contradicts its own data: " + "; ".join(wrong[:5]))
    return record


def read_session(path: str | Path) -> dict:
    """A raw session, checked (parse_session) after a bounded read of a regular file (read_bytes)."""
    return parse_session(read_bytes(path), path)


def filed_problem(record: dict, path: str | Path) -> str | None:
    """Why a session record cannot stand at `path`: not its one canonical file name (s07.json, never
    s7.json or s007.json beside it), or the folder of another cell."""
    if Path(path).name != paths.canonical_name(record["session"]):
        return (f"holds session {record['session']}, whose one file name is {paths.canonical_name(record['session'])}; "
                "a second name would count it twice")
    from_path = paths.parse_session_path(path)
    if from_path is not None:
        in_file = {**record["cell"], "session": record["session"]}
        if from_path != in_file:
            diff = {k: (from_path[k], in_file[k]) for k in from_path if from_path[k] != in_file[k]}
            return f"filed under another cell; (path, file) disagree on {diff}"
    return None


def read_filed_session(path: str | Path) -> dict:
    """A session as the analysis takes it: read_session's checks, under its canonical name and
    filed under its own cell's folder."""
    record = read_session(path)
    why = filed_problem(record, path)
    if why:
        raise RawFileError(f"{path}: {why}")
    return record


def analysis_problems(record: dict, gpu_device: str | None) -> list[str]:
    """What the analysis refuses in a record its schema admits: arms that are not the cell's mode's
    arms, per-step lists of another length than the steps, and, for a cell of a CUDA GPU type
    (`gpu_device`, the analysis config's), timed steps from another device or with no GPU UUID (the
    machine it ran on is the statistics' unit: it cannot be guessed from a host name)."""
    from decodegap.core.cells import OWN_MODEL, arms_of, gguf_format, mode_quant_problem
    from decodegap.core.errors import ConfigError

    out = []
    try:
        expected = arms_of(record["cell"]["mode"])
    except ConfigError as exc:
        return [str(exc)]
    cell = record["cell"]
    mismatch = mode_quant_problem(cell["mode"], cell["quant"])  # a cell no session command measures
    if mismatch:
        out.append(mismatch)
    for arm in record["arms"]:
        if arm["mode"] in OWN_MODEL:
            out.extend(_own_model_problems(record, arm, gguf_format(cell["quant"])))
    modes = [a["mode"] for a in record["arms"]]
    if modes and modes != expected:
        out.append(f"its arms are {modes}, not the arms {expected} of mode {record['cell']['mode']}")
    for arm in record["arms"]:
        timed = arm["timed"]
        n = len(timed["host_ms"])
        for k in ("device_ms", "host_cpu_ms", "tokens", "block", "cpu_probe_before_ms", "cpu_probe_after_ms"):
            if timed.get(k) is not None and len(timed[k]) != n:
                out.append(f"arm {arm['mode']}: {k} has {len(timed[k])} entries for {n} steps")
        if ("cpu_probe_before_ms" in timed) != ("cpu_probe_after_ms" in timed):
            out.append(f"arm {arm['mode']}: one of the step probes is missing")
    if record["arms"] and gpu_device == "cuda":
        env = record["environment"]
        if env.get("device_type") != "cuda":
            out.append(f"timed on device {env.get('device_type')!r}, but gpu '{record['cell']['gpu']}' is a CUDA GPU type")
        if not (env.get("gpu") or {}).get("uuid"):
            out.append("no GPU UUID: the machine it ran on is unknown (the statistics resample machines)")
    return out


def _own_model_problems(record: dict, arm: dict, fmt: str) -> list[str]:
    """An engine's arm on its own model file (llama.cpp's GGUF): the file it names must be the cell's
    format, and the floor's bytes the file's (the session takes them from the file; a record whose
    floor says otherwise was not written by it)."""
    g = (arm.get("engine") or {}).get("gguf")
    if not isinstance(g, dict):
        return [f"arm {arm['mode']}: no model file recorded (engine.gguf): its bytes cannot be traced to one"]
    out = []
    if g.get("format") != fmt:
        out.append(f"arm {arm['mode']}: its file's format is {g.get('format')!r}, not the cell's {fmt!r}")
    floor = record.get("floor") or {}
    tensor_bytes = g.get("tensor_bytes")
    no_embedding = None if tensor_bytes is None else tensor_bytes - (0 if g.get("tied_embeddings") else g.get("embedding_bytes") or 0)
    if floor.get("weight_bytes") != tensor_bytes or floor.get("weight_bytes_no_embedding") != no_embedding:
        out.append(f"arm {arm['mode']}: its floor's weight bytes ({floor.get('weight_bytes')}, {floor.get('weight_bytes_no_embedding')} "
                   f"without the embedding table) are not its file's ({tensor_bytes}, {no_embedding})")
    return out


class SampleIndex:
    """Which recorded session a record's step times come from, so a session's samples are never
    counted twice: renamed, shuffled, cut short, merged with another's or filed under another cell.

    A record shares samples with a session when, in one of its timed arms, at least
    SHARED_FRACTION of the arm's distinct host step times (and at least MIN_SHARED of them) are
    that session's too. Host times have nanosecond resolution; between the 722 bundled H200
    sessions the largest natural overlap is 6.4 % of an arm's values (two attention-layer cells
    timing the same cuDNN kernel, whose steps last 0.24 ms), 1.6 % for every other cell."""

    SHARED_FRACTION = 0.5
    MIN_SHARED = 16

    def __init__(self):
        self._owners: dict[float, list[str]] = {}

    @staticmethod
    def _arms(record: dict) -> list[set[float]]:
        out = []
        for arm in record.get("arms") or []:
            host = (arm.get("timed") or {}).get("host_ms") or []
            values = {float(x) for x in host if isinstance(x, (int, float)) and not isinstance(x, bool)}
            if len(values) >= SampleIndex.MIN_SHARED:
                out.append(values)
        return out

    def twin(self, record: dict, name: str) -> str | None:
        """The session (other than `name`) whose samples this record shares, or None."""
        for values in self._arms(record):
            counts: dict[str, int] = {}
            for x in values:
                for owner in self._owners.get(x, ()):
                    if owner != name:
                        counts[owner] = counts.get(owner, 0) + 1
            need = max(self.MIN_SHARED, self.SHARED_FRACTION * len(values))
            hits = [o for o, n in counts.items() if n >= need]
            if hits:
                return sorted(hits)[0]
        return None

    def add(self, record: dict, name: str) -> None:
        for values in self._arms(record):
            for x in values:
                owners = self._owners.setdefault(x, [])
                if name not in owners:
                    owners.append(name)


def rejudge(record: dict, protocol: Protocol) -> tuple[str, list[str]]:
    """The record's status and reasons under `protocol` (the analysis config's), never under a
    looser one the record states: the reasons its samples decide are judged again; the others
    (an error, a foreign process, throttled clocks, an attention fallback) stand as recorded."""
    from decodegap.core.protocol import SAMPLE_REASONS, sample_reasons

    reasons = [r for r in record["reasons"] if not r.startswith(SAMPLE_REASONS)]
    if record["arms"] and not record.get("error"):
        reasons = sample_reasons(record["arms"], protocol) + reasons
    elif not reasons:
        reasons = list(record["reasons"])
    return ("invalid" if reasons else "valid"), reasons


def machine_id(environment: dict) -> str:
    """The machine a session ran on: its GPU's UUID (the host name where a CPU stand-in ran it: the
    analysis refuses a CUDA GPU type's timed session without a UUID), with the host's boot id where
    the record has one (sessions from 2026-11-29 evening on)."""
    gpu = environment.get("gpu") or {}
    name = gpu.get("uuid") or environment.get("hostname") or "unknown"
    return f"{name}/{environment['boot_id']}" if environment.get("boot_id") else name
