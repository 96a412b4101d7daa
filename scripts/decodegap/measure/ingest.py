"""Add measured sessions to results/raw/ from an archive or a folder: what a lent GPU sends back.

    python -m decodegap.measure.ingest sessions.tar.gz [MORE ...] [--root .] [--dry-run]

Every file inside the source whose path holds `results/raw/<gpu>/<model>/ctx<ctx>/<cell>/sNN.json`
is checked as the analysis checks it (readable, finite, on its schema, its status agreeing with its
own samples, canonical name, filed under its own cell), then written under --root with an
exclusive create, read-only, and its line appended to the manifest results/raw.sha256. A session
already recorded with the same bytes is skipped; one whose bytes differ is refused, and so is
every record the analysis would refuse. Nothing recorded is ever replaced.

Exit status: 0 when every session file was added or already there; 1 when any was refused.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

from decodegap.core import manifest, paths
from decodegap.core.errors import DecodegapError, SessionExists
from decodegap.core.record import read_filed_session, write_exclusive


def session_files(folder: Path) -> list[tuple[Path, str]]:
    """(file, its path relative to a tree root: results/raw/...) for every file under a results/raw/."""
    out = []
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        parts = p.relative_to(folder).parts
        for i in range(len(parts) - 1):
            if parts[i : i + 2] == ("results", "raw"):
                out.append((p, Path(*parts[i:]).as_posix()))
                break
    return out


def ingest(sources, root: str | Path = ".", dry_run: bool = False, say=print) -> dict[str, list[str]]:
    root = Path(root)
    result: dict[str, list[str]] = {"added": [], "already": [], "refused": []}
    with tempfile.TemporaryDirectory(prefix="decodegap-ingest-") as tmp:
        for n, source in enumerate(map(Path, sources)):
            if source.is_dir():
                folder = source
            elif source.is_file() and tarfile.is_tarfile(source):
                folder = Path(tmp) / str(n)
                with tarfile.open(source) as tar:
                    tar.extractall(folder, filter="data")  # no absolute paths, links out or devices
            else:
                result["refused"].append(f"{source}: neither a folder nor a tar archive")
                continue
            found = session_files(folder)
            if not found:
                result["refused"].append(f"{source}: holds no file under results/raw/")
            for file, rel in found:
                if paths.parse_session_path(rel) is None:
                    result["refused"].append(f"{source}: {rel}: not a session path of the grammar {paths.RAW_SESSION}")
                    continue
                staged = Path(tmp) / "check" / rel  # read_filed_session checks the path it is filed under
                staged.parent.mkdir(parents=True, exist_ok=True)
                data = file.read_bytes()
                staged.write_bytes(data)
                try:
                    record = read_filed_session(staged)
                except DecodegapError as exc:
                    result["refused"].append(f"{source}: {str(exc).replace(str(staged), rel)}")
                    continue
                target = root / rel
                if dry_run:
                    if not target.exists():
                        result["added"].append(rel)
                    elif target.read_bytes() == data:
                        result["already"].append(rel)
                    else:
                        result["refused"].append(f"{rel}: already recorded with other bytes")
                    continue
                try:
                    state = write_exclusive(data, target)
                except SessionExists:
                    result["refused"].append(f"{rel}: already recorded with other bytes; a recorded session is never replaced")
                    continue
                manifest.add([target], root)
                result["already" if state == "unchanged" else "added"].append(rel)
                if state == "written":
                    say(f"[ingest] added {rel} ({record['status']})")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.measure.ingest", description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", help="tar archives (.tar, .tar.gz, ...) or folders holding results/raw/ trees")
    p.add_argument("--root", default=".", help="the repository whose results/raw/ receives the sessions (default: .)")
    p.add_argument("--dry-run", action="store_true", help="check and report, write nothing")
    args = p.parse_args(argv)
    result = ingest(args.sources, args.root, args.dry_run)
    for line in result["refused"]:
        print(f"[ingest] refused: {line}", file=sys.stderr)
    verb = "would add" if args.dry_run else "added"
    print(f"[ingest] {verb} {len(result['added'])}, already recorded {len(result['already'])}, refused {len(result['refused'])}")
    return 1 if result["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
