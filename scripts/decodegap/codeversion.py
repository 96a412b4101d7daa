"""The code a session ran: git commit, dirty flag and sha256 of every measurement source.

The hashes are the ground truth: they are taken from the files that actually ran. The commit comes
from git when the checkout has one, else from DECODEGAP_GIT_COMMIT / DECODEGAP_GIT_DIRTY, which a
launcher sets when it ships a copy of the tree without .git (as the lent GPU's tool does).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from decodegap.config import REPO_ROOT

# What decides a measured number: the package and the cards/GPU tables it reads.
SOURCE_GLOBS = ("scripts/decodegap/*.py", "config/models.yaml", "config/gpus.yaml")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({p for g in SOURCE_GLOBS for p in root.glob(g) if p.is_file()})


def sources_sha256(files: dict[str, str]) -> str:
    """One hash over (path, hash) pairs in path order."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def code_version(root: Path = REPO_ROOT) -> dict:
    files = {str(p.relative_to(root)): sha256_file(p) for p in source_files(root)}
    commit = _git(root, "rev-parse", "HEAD") if (root / ".git").exists() else None
    if commit:
        status = _git(root, "status", "--porcelain", "--", "scripts/decodegap", "config/models.yaml", "config/gpus.yaml")
        dirty, origin = bool(status), "git"
    elif os.environ.get("DECODEGAP_GIT_COMMIT"):
        commit = os.environ["DECODEGAP_GIT_COMMIT"]
        dirty = os.environ.get("DECODEGAP_GIT_DIRTY", "unknown").lower() in ("1", "true", "yes")
        origin = "env"
    else:
        commit, dirty, origin = None, None, "unknown"
    return {
        "commit": commit,
        "dirty": dirty,
        "commit_origin": origin,
        "sources_sha256": sources_sha256(files),
        "files": files,
    }
