"""The measurement sources and their hashes: the files that decide a measured number (the core,
the measurement wing, the cards and GPU tables), sha256 of a file, one hash over a set of files,
and which commits of the history hold exactly a record's sources. Both wings use it: the
measurement to record what ran, the analysis to audit it (`provenance code`).
"""


from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from decodegap.core.config import REPO_ROOT

# What decides a measured number: the package and the cards/GPU tables it reads.
# Records before the two wings list scripts/decodegap/*.py; records before the attention and weight
# paths became one file each list measure/attention.py and measure/weights.py (the globs match both).
SOURCE_GLOBS = ("scripts/decodegap/*.py", "scripts/decodegap/core/*.py", "scripts/decodegap/measure/*.py",
                "scripts/decodegap/measure/*/*.py", "config/models.yaml", "config/gpus.yaml")
SOURCE_PATHSPECS = ("scripts/decodegap", "config/models.yaml", "config/gpus.yaml")  # the same, for git


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({p for g in SOURCE_GLOBS for p in root.glob(g) if p.is_file()})


def source_hashes(root: Path = REPO_ROOT) -> dict[str, str]:
    """{path relative to root: sha256} of the measurement sources under root: what a session records
    (measure.codeversion), and what a tree of other code would record (envs/pin_code.sh)."""
    return {str(p.relative_to(root)): sha256_file(p) for p in source_files(root)}


def sources_sha256(files: dict[str, str]) -> str:
    """One hash over (path, hash) pairs in path order."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None



@functools.lru_cache(maxsize=None)
def _committed_sources(root: Path, rev: str) -> dict[str, str]:
    """{path: git blob id} of the measurement sources at rev (cached: `provenance code` asks once
    per group of sessions, over the same history)."""
    listing = git(root, "ls-tree", "-r", rev, "--", *SOURCE_PATHSPECS) or ""
    tree = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if any(Path(path).match(g) for g in SOURCE_GLOBS):
            tree[path] = meta.split()[2]
    return tree


@functools.lru_cache(maxsize=None)
def _blob_sha256(root: Path, blob: str) -> str:
    data = subprocess.run(["git", "-C", str(root), "cat-file", "blob", blob], capture_output=True, timeout=20).stdout
    return hashlib.sha256(data).hexdigest()


def matching_commits(files: dict[str, str], root: Path = REPO_ROOT, max_commits: int = 1000) -> list[str] | None:
    """Commits reachable from HEAD (newest first) whose measurement sources hash exactly to
    `files` (a record's code.files); None without a git history. A file the record lists that a
    commit lacks, or a source a commit has that the record lacks, is a mismatch."""
    revs = git(root, "rev-list", f"--max-count={max_commits}", "HEAD")
    if revs is None:
        return None
    out = []
    for rev in revs.split():
        tree = _committed_sources(root, rev)
        if set(tree) == set(files) and all(_blob_sha256(root, tree[p]) == h for p, h in files.items()):
            out.append(rev)
    return out
