"""The code a session ran: the commit a launcher names wins over a copied .git, and the record's
source hashes alone say which commits hold exactly that code."""

import hashlib
import subprocess
from pathlib import Path

import pytest

from decodegap.core import sources
from decodegap.core.config import REPO_ROOT
from decodegap.measure import codeversion

HAS_GIT = (REPO_ROOT / ".git").exists()


def _sources_at(rev: str) -> dict:
    """sha256 of every measurement source as committed at rev (not as on disk)."""
    listing = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True, check=True).stdout
    out = {}
    for path in listing.splitlines():
        if any(Path(path).match(g) for g in sources.SOURCE_GLOBS):
            blob = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout
            out[path] = hashlib.sha256(blob).hexdigest()
    return out


def test_launcher_commit_wins_over_a_copied_git(monkeypatch):
    monkeypatch.setenv("DECODEGAP_GIT_COMMIT", "0123abcd" * 5)
    monkeypatch.setenv("DECODEGAP_GIT_DIRTY", "0")
    v = codeversion.code_version()
    assert (v["commit"], v["dirty"], v["commit_origin"]) == ("0123abcd" * 5, False, "env")
    assert v["sources_sha256"] == sources.sources_sha256(v["files"])  # hashes come from disk regardless


def test_unsaid_dirty_flag_is_unknown_unless_git_holds_that_commit(monkeypatch):
    monkeypatch.setenv("DECODEGAP_GIT_COMMIT", "f" * 40)  # a commit this checkout is not at
    monkeypatch.delenv("DECODEGAP_GIT_DIRTY", raising=False)
    v = codeversion.code_version()
    assert v["commit"] == "f" * 40 and v["dirty"] is None  # unknown, never a silent "clean"


@pytest.mark.skipif(not HAS_GIT, reason="needs the repository's git history")
def test_matching_commits_finds_the_commit_whose_sources_a_record_holds():
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    files = _sources_at(head)
    assert head in sources.matching_commits(files, max_commits=50)
    changed = dict(files)
    changed[next(p for p in files if p.endswith(".py"))] = "0" * 64  # code that was never committed
    assert sources.matching_commits(changed, max_commits=50) == []
    fewer = {k: v for k, v in files.items() if k != "config/gpus.yaml"}
    assert sources.matching_commits(fewer, max_commits=50) == []
