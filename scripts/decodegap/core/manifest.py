"""The manifest of the measured data: results/raw.sha256 names every file under results/raw/ (the
sessions) and results/environment/ (each GPU type's environment records) with its sha256, in
sha256sum's format ("<hex>  <path>"; `sha256sum -c results/raw.sha256` checks it too). It is
committed with the data and only grows: the commands that add data (measure, the environment stage,
ingest) append their lines under a lock; no command rewrites or drops a line.

Every reader holds the data to it:
- the workflow, when it plans (`tree_problems`): a file on disk that no line lists, a listed file
  that is missing, a link or anything but a regular file under the data folders stops the run,
  naming the path and the command that fixes it; a listed session is never planned for measuring
  again, present or not;
- the analysis, when it reads a session (`expect`): the bytes it reads must hash to the listed sha256;
- `provenance check` re-hashes every file (`audit`).
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from decodegap.core import paths
from decodegap.core.errors import RawFileError
from decodegap.core.sources import sha256_file

DATA_ROOTS = (paths.RAW_ROOT, paths.ENVIRONMENT_ROOT)  # the folders the manifest covers
INGEST = "python -m decodegap.measure.ingest"


def manifest_path(root: str | Path = ".") -> Path:
    return Path(root) / paths.MANIFEST


def root_of(data_file: str | Path) -> Path | None:
    """The tree a data file belongs to (the folder holding its results/raw/ or results/environment/), or None."""
    parts = Path(os.path.abspath(data_file)).parts
    for i in range(len(parts) - 1):
        if parts[i] == "results" and parts[i + 1] in ("raw", "environment"):
            return Path(*parts[:i])
    return None


def _valid_rel(rel: str) -> bool:
    segments = rel.split("/")
    return any(rel.startswith(r + "/") for r in DATA_ROOTS) and ".." not in segments and "" not in segments and "." not in segments


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
        if not sep or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha) or not _valid_rel(rel):
            raise RawFileError(f"{path}:{n}: not a manifest line ('<sha256>  results/raw/...' or 'results/environment/...'): {line[:120]!r}")
        if out.get(rel, sha) != sha:
            raise RawFileError(f"{path}:{n}: {rel} is listed twice with different hashes")
        out[rel] = sha
    return out


def add(files, root: str | Path = ".") -> list[str]:
    """Append the lines of newly recorded files; returns the paths added. A file already listed with
    the same hash is skipped; one listed with another hash is refused (a recorded file changed)."""
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
                if not _valid_rel(rel):
                    raise RawFileError(f"{rel}: not under {' or '.join(DATA_ROOTS)}/ of {root}: the manifest lists only those")
                sha = sha256_file(file)
                if listed.get(rel, sha) != sha:
                    raise RawFileError(f"{rel}: the manifest lists it with sha256 {listed[rel][:16]}..., the file now has "
                                       f"{sha[:16]}...; a recorded file is never replaced")
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


def restore_hint(rel: str) -> str:
    return f"restore it with `git checkout -- {rel}` (or from the archive it came in, with `{INGEST} ARCHIVE`)"


@dataclass
class Walk:
    """What lies under the data folders, by kind."""

    files: list[str] = field(default_factory=list)  # regular files
    odd: list[str] = field(default_factory=list)  # "path: why": links, folders as links, FIFOs, devices, sockets


def walk(root: str | Path = ".") -> Walk:
    """Every entry under results/raw/ and results/environment/, never following a link."""
    root = Path(root)
    out = Walk()
    for data in DATA_ROOTS:
        top = root / data
        for p in (root / "results", top):
            if p.is_symlink():
                out.odd.append(f"{p.relative_to(root).as_posix()}: a symbolic link (the data folders must be real folders)")
        if not top.is_dir() or top.is_symlink() or (root / "results").is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                rel = p.relative_to(root).as_posix()
                mode = os.lstat(p).st_mode
                if stat.S_ISLNK(mode):
                    out.odd.append(f"{rel}: a symbolic link (data must be a regular file under the tree)")
                elif stat.S_ISREG(mode):
                    if os.lstat(p).st_nlink > 1 and data == paths.RAW_ROOT:
                        out.odd.append(f"{rel}: a hard link shared with another file (one session, one file)")
                    else:
                        out.files.append(rel)
                elif not stat.S_ISDIR(mode):
                    out.odd.append(f"{rel}: not a regular file (a FIFO, device or socket)")
    out.files.sort()
    return out


def tree_problems(root: str | Path = ".") -> list[str]:
    """Why the data under root cannot be trusted as it stands, one line per problem (none: it can):
    an entry that is not a regular file, a file no manifest line lists, a listed file that is gone.
    Names only (no hashing: that is the reader's job and `provenance check`'s)."""
    root = Path(root)
    listed = read(root)
    w = walk(root)
    out = list(w.odd)
    on_disk = set(w.files)
    for rel in w.files:
        if rel not in listed and not Path(rel).name.startswith("."):
            out.append(f"{rel}: not in {paths.MANIFEST}: data enters the tree only through the commands that list it; "
                       f"add it with `{INGEST} {rel}` (it is checked first), or remove it")
    for rel in sorted(set(listed) - on_disk):
        if not any(o.startswith(rel + ":") for o in w.odd):
            out.append(f"{rel}: listed in {paths.MANIFEST} but missing; {restore_hint(rel)}. A listed session is never "
                       "measured again")
    return out


def expect(path: str | Path, data: bytes, sha256: str, listed: dict[str, str], root: str | Path = ".") -> None:
    """The bytes a reader took from `path` are the listed ones: RawFileError naming the file otherwise."""
    rel = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root))).as_posix()
    if rel not in listed:
        raise RawFileError(f"{rel}: not in {paths.MANIFEST}; add it with `{INGEST} {rel}` (it is checked first)")
    if listed[rel] != sha256:
        raise RawFileError(f"{rel}: its sha256 {sha256[:16]}... is not the {listed[rel][:16]}... {paths.MANIFEST} lists: "
                           f"the recorded file changed; {restore_hint(rel)}")


@dataclass
class Audit:
    checked: int = 0
    added: list[str] = field(default_factory=list)  # on disk, not in the manifest
    changed: list[str] = field(default_factory=list)  # hash differs from the manifest's
    missing: list[str] = field(default_factory=list)  # in the manifest, not on disk
    odd: list[str] = field(default_factory=list)  # links and other non-regular entries

    @property
    def ok(self) -> bool:
        return not (self.added or self.changed or self.missing or self.odd)


def audit(root: str | Path = ".") -> Audit:
    """Re-hash every file under the data folders against the manifest."""
    root = Path(root)
    listed = read(root)
    w = walk(root)
    result = Audit(checked=len(w.files), odd=list(w.odd))
    for rel in w.files:
        if rel not in listed:
            result.added.append(rel)
        elif sha256_file(root / rel) != listed[rel]:
            result.changed.append(rel)
    present = set(w.files) | {o.split(":", 1)[0] for o in w.odd}
    result.missing = sorted(set(listed) - present)
    return result
