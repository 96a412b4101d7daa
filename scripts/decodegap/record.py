"""The session record: its schema, an atomic write that never overwrites, and a checked read."""

from __future__ import annotations

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from decodegap.config import REPO_ROOT
from decodegap.errors import RawFileError, SessionExists

SCHEMA_ID = "decodegap.session/1"
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "session.schema.json"


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

    Returns "written", or "unchanged" when the same bytes are already there. The bytes go to a
    temporary file in the same folder, are synced, then hard-linked into place: the link fails if
    the target appeared meanwhile, so two writers can never clobber each other, and a reader (or a
    killed job) never sees half a file.
    """
    path = Path(path)
    data = encode(record)
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
            with open(path, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    finally:
        os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return "written"


def read_session(path: str | Path) -> dict:
    """A raw session, or RawFileError naming the file when it is corrupt, truncated or foreign."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            record = json.loads(f.read())
    except json.JSONDecodeError as exc:
        raise RawFileError(f"{path}: not valid JSON (truncated or corrupt?): {exc}") from None
    except UnicodeDecodeError:
        raise RawFileError(f"{path}: not text; not a session record") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_ID:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        raise RawFileError(f"{path}: foreign schema {found!r}; expected {SCHEMA_ID!r}")
    errors = schema_errors(record)
    if errors:
        raise RawFileError(f"{path}: does not match {SCHEMA_ID}: " + "; ".join(errors[:5]))
    return record
