"""The manifest of the measured data: results/raw.sha256 names every file under results/raw/ with
its sha256, in sha256sum's format ("<hex>  <path>"; `sha256sum -c results/raw.sha256` checks it
too). It is committed with the sessions and only grows: the commands that add sessions (measure,
ingest) append their lines under a lock; no command rewrites or drops a line. `provenance check`
re-hashes every file against it and reports added, changed and missing files.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from decodegap.core import paths
from decodegap.core.errors import RawFileError
from decodegap.core.sources import sha256_file


def manifest_path(root: str | Path = ".") -> Path:
    return Path(root) / paths.MANIFEST


def root_of(session_file: str | Path) -> Path | None:
    """The tree a session file belongs to (the folder holding its results/raw/), or None."""
    parts = Path(os.path.abspath(session_file)).parts
    for i in range(len(parts) - 1):
        if parts[i : i + 2] == ("results", "raw"):
            return Path(*parts[:i])
    return None


def read(root: str | Path = ".") -> dict[str, str]:
    """path (relative to root) -> sha256; an empty dict when there is no manifest yet."""
    path = manifest_path(root)
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        sha, sep, rel = line.partition("  ")
        if not sep or len(sha) != 64 or not rel.startswith(paths.RAW_ROOT + "/"):
            raise RawFileError(f"{path}:{n}: not a manifest line ('<sha256>  results/raw/...'): {line[:120]!r}")
        if out.get(rel, sha) != sha:
            raise RawFileError(f"{path}:{n}: {rel} is listed twice with different hashes")
        out[rel] = sha
    return out


def add(files, root: str | Path = ".") -> list[str]:
    """Append the lines of newly recorded files; returns the paths added. A file already listed with
    the same hash is skipped; one listed with another hash is refused (a recorded session changed)."""
    root = Path(root)
    path = manifest_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    added = []
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # concurrent measurement jobs append to one file
        try:
            listed = read(root)
            lines = []
            for file in files:
                rel = Path(os.path.relpath(os.path.abspath(file), os.path.abspath(root))).as_posix()
                sha = sha256_file(file)
                if listed.get(rel, sha) != sha:
                    raise RawFileError(f"{rel}: the manifest lists it with sha256 {listed[rel][:16]}..., the file now has "
                                       f"{sha[:16]}...; a recorded session is never replaced")
                if rel not in listed:
                    lines.append(f"{sha}  {rel}\n")
                    listed[rel] = sha
                    added.append(rel)
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    return added


@dataclass
class Audit:
    checked: int = 0
    added: list[str] = field(default_factory=list)  # on disk, not in the manifest
    changed: list[str] = field(default_factory=list)  # hash differs from the manifest's
    missing: list[str] = field(default_factory=list)  # in the manifest, not on disk

    @property
    def ok(self) -> bool:
        return not (self.added or self.changed or self.missing)


def audit(root: str | Path = ".") -> Audit:
    """Re-hash every file under results/raw/ against the manifest."""
    root = Path(root)
    listed = read(root)
    raw = root / paths.RAW_ROOT
    on_disk = sorted(p.relative_to(root).as_posix() for p in raw.rglob("*") if p.is_file() or p.is_symlink()) if raw.is_dir() else []
    result = Audit(checked=len(on_disk))
    for rel in on_disk:
        if rel not in listed:
            result.added.append(rel)
        elif not (root / rel).is_file() or sha256_file(root / rel) != listed[rel]:
            result.changed.append(rel)
    result.missing = sorted(set(listed) - set(on_disk))
    return result
