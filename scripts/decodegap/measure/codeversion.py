"""The code a session ran: git commit, dirty flag and sha256 of every measurement source.

The hashes are the ground truth: they are taken from the files that actually ran. The commit comes
from DECODEGAP_GIT_COMMIT / DECODEGAP_GIT_DIRTY when a launcher sets them (it ships a copy of the
tree whose .git, if any, need not be the commit it copied: the lent GPU's copy carried a stale one),
else from git. `decodegap.core.sources.matching_commits` answers from the hashes alone which commits
a record's sources equal, so a wrong or dirty commit in a record can be audited
(`python -m decodegap.analysis.provenance code`).
"""

from __future__ import annotations

import os
from pathlib import Path

from decodegap.core.config import REPO_ROOT
from decodegap.core.sources import SOURCE_PATHSPECS, git, source_hashes, sources_sha256


def _dirty(root: Path) -> bool:
    return bool(git(root, "status", "--porcelain", "--", *SOURCE_PATHSPECS))


def code_version(root: Path = REPO_ROOT) -> dict:
    files = source_hashes(root)
    commit = git(root, "rev-parse", "HEAD") if (root / ".git").exists() else None
    git_commit = commit
    if os.environ.get("DECODEGAP_GIT_COMMIT"):
        commit, origin = os.environ["DECODEGAP_GIT_COMMIT"], "env"
        flag = os.environ.get("DECODEGAP_GIT_DIRTY")
        if flag is not None:
            dirty = flag.lower() in ("1", "true", "yes")
        else:  # unsaid: git can tell only if it holds that very commit; else unknown, never "clean"
            dirty = _dirty(root) if git_commit == commit else None
    elif commit:
        dirty, origin = _dirty(root), "git"
    else:
        commit, dirty, origin = None, None, "unknown"
    return {
        "commit": commit,
        "dirty": dirty,
        "commit_origin": origin,
        "sources_sha256": sources_sha256(files),
        "files": files,
    }
