"""Add measured data to a tree from archives, folders or files: what a lent GPU sends back.

    python -m decodegap.measure.ingest sessions.tar.gz [MORE ...] [--root DIR] [--dry-run]
        [--max-session-bytes N] [--max-archive-bytes N]

Every member whose path holds `results/raw/<gpu>/<model>/ctx<ctx>/<cell>/sNN.json` (a session) or
`results/environment/<gpu>[@<time>].json` (an environment record) is checked completely first, as
the analysis checks it: a regular file within the size limit, readable, finite, valid Unicode, on its
schema, its status agreeing with its own samples, under its canonical name and its own cell, a GPU
UUID for a CUDA GPU type's timed steps, no samples identical to another session's, and no path the
manifest already lists with other bytes (a listed session's slot is never refilled, even when its
file is gone). Only then are the accepted members written under --root, each with an exclusive
create, read-only, and their lines appended to the manifest results/raw.sha256. Nothing recorded
is ever replaced.

An archive is read as a stream: each member's size is bounded before a byte of it is read, and the
archive stops being read when its decompressed bytes pass --max-archive-bytes (a compression bomb
costs that much and no more). Links, devices, FIFOs, absolute paths and '..' are refused one line
each, and the rest of the archive is still read. The summary says how many members were added,
already recorded, ignored (not data) and refused.

Exit status: 0 when every data member was added or already there; 1 when any was refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from decodegap.core import manifest, paths
from decodegap.core.errors import DecodegapError, SessionExists
from decodegap.core.record import LIMITS, analysis_problems, filed_problem, parse_session, SampleIndex, write_exclusive

MAX_ARCHIVE_BYTES = 2 * 2**30  # decompressed, per archive: a device call brings back at most 64 MiB compressed


@dataclass
class Result:
    added: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def __getitem__(self, key):  # result["added"], as callers read it
        return getattr(self, key)


class _Counted:
    """A read-only stream that stops once more than `limit` bytes came through it."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.count = raw, limit, 0

    def read(self, n=-1):
        data = self.raw.read(n)
        self.count += len(data)
        if self.count > self.limit:
            raise _TooLarge(self.count)
        return data


class _TooLarge(Exception):
    pass


def _decompressed(source: Path):
    """The archive's bytes as a stream, decompressed by what its first bytes say it is."""
    import bz2
    import gzip
    import lzma

    with open(source, "rb") as f:
        magic = f.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(source, "rb")
    if magic[:3] == b"BZh":
        return bz2.open(source, "rb")
    if magic[:6] == b"\xfd7zXZ\x00":
        return lzma.open(source, "rb")
    return open(source, "rb")


def data_path(name: str) -> str | None:
    """The tree path (results/raw/... or results/environment/...) a member's name holds, or None."""
    parts = PurePosixPath(name).parts
    for i in range(len(parts) - 1):
        if parts[i] == "results" and parts[i + 1] in ("raw", "environment"):
            return "/".join(parts[i:])
    return None


def _unsafe(name: str) -> str | None:
    p = PurePosixPath(name)
    if p.is_absolute():
        return "an absolute path"
    if ".." in p.parts:
        return "a path with '..'"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not valid Unicode"
    return None


class Ingest:
    """Check every member of the given sources, then write what passed (unless dry_run)."""

    def __init__(self, root: str | Path = ".", dry_run: bool = False, say=print, max_session_bytes: int = LIMITS.max_bytes,
                 max_archive_bytes: int = MAX_ARCHIVE_BYTES):
        self.root, self.dry_run, self.say = Path(root), dry_run, say
        self.limits = type(LIMITS)(max_bytes=max_session_bytes, max_depth=LIMITS.max_depth, max_number=LIMITS.max_number)
        self.max_archive_bytes = max_archive_bytes
        self.result = Result()
        self.listed = manifest.read(self.root)
        self.devices = _gpu_devices(self.root)
        self.accepted: dict[str, tuple[bytes, str]] = {}  # rel -> (bytes, what) of members that passed
        self._samples: SampleIndex | None = None  # the step times of every session in the tree

    # --- reading ----------------------------------------------------------------------------
    def source(self, source: Path) -> None:
        if source.is_dir():
            for p in sorted(source.rglob("*")):
                rel_name = p.relative_to(source).as_posix()
                if p.is_symlink() or (not p.is_dir() and not p.is_file()):
                    if data_path(rel_name):
                        self.refuse(f"{source}: {rel_name}", "a link or not a regular file")
                    continue
                if p.is_file():
                    self.file(source, p, rel_name)
        elif source.is_file() and not source.is_symlink() and data_path(source.resolve().as_posix()) and not tarfile.is_tarfile(source):
            self.file(source.parent, source, data_path(source.resolve().as_posix()))
        elif source.is_file() and tarfile.is_tarfile(source):
            self.archive(source)
        else:
            self.result.refused.append(f"{source}: neither a folder, a data file nor a tar archive")

    def file(self, source: Path, path: Path, name: str) -> None:
        rel = data_path(name)
        if rel is None:
            self.result.ignored.append(f"{source}: {name}")
            return
        size = path.stat().st_size
        if size > self.limits.max_bytes:
            self.refuse(rel, f"{size} bytes, over the {self.limits.max_bytes} a data file may have (--max-session-bytes)")
            return
        with open(path, "rb") as f:
            self.member(rel, f.read(self.limits.max_bytes + 1), f"{source}: {name}")

    def archive(self, source: Path) -> None:
        seen = 0
        try:
            with _decompressed(source) as stream:
                # the decompressed bytes are what is bounded, read as a stream (never to disk)
                with tarfile.open(fileobj=_Counted(stream, self.max_archive_bytes), mode="r|") as tar:
                    for member in tar:
                        seen += 1
                        self.tar_member(source, tar, member)
        except _TooLarge as exc:
            self.result.refused.append(f"{source}: the archive expands past {self.max_archive_bytes} bytes ({exc.args[0]} read): "
                                       "the rest of it was not read (--max-archive-bytes)")
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            self.result.refused.append(f"{source}: unreadable after {seen} member(s): {type(exc).__name__}: {exc}")

    def tar_member(self, source: Path, tar, member) -> None:
        name = member.name
        where = f"{source}: {name}"
        rel = data_path(name)
        unsafe = _unsafe(name)
        if unsafe:
            self.refuse(where, f"{unsafe}: not written")
            return
        if member.isdir():
            return
        if not member.isfile():
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk() else
                    "a FIFO" if member.isfifo() else "a device" if member.isdev() else "not a regular file")
            if rel is not None or member.issym() or member.islnk():
                self.refuse(where, f"{kind}: only regular files are data")
            return
        if rel is None:
            self.result.ignored.append(where)
            return
        if member.size > self.limits.max_bytes:
            self.refuse(rel, f"{member.size} bytes, over the {self.limits.max_bytes} a data file may have (--max-session-bytes)")
            return
        f = tar.extractfile(member)
        self.member(rel, f.read(self.limits.max_bytes + 1), where)

    # --- checking ---------------------------------------------------------------------------
    def refuse(self, what: str, why: str) -> None:
        self.result.refused.append(f"{what}: {why}")

    def member(self, rel: str, data: bytes, where: str) -> None:
        if len(data) > self.limits.max_bytes:
            self.refuse(rel, f"over the {self.limits.max_bytes} bytes a data file may have (--max-session-bytes)")
            return
        sha = hashlib.sha256(data).hexdigest()
        if rel in self.accepted:
            if self.accepted[rel][1] != sha:
                self.refuse(rel, f"given twice with different bytes ({where})")
            return
        listed = self.listed.get(rel)
        if listed is not None and listed != sha:
            gone = "" if (self.root / rel).exists() else " (its file is missing: " + manifest.restore_hint(rel) + ")"
            self.refuse(rel, f"already recorded with other bytes; a recorded file is never replaced{gone}")
            return
        try:
            why = self.check_environment(rel, data) if rel.startswith(paths.ENVIRONMENT_ROOT + "/") else self.check_session(rel, data)
        except DecodegapError as exc:
            why = str(exc).replace(f"{rel}: ", "", 1)
        if why:
            self.refuse(rel, why)
            return
        if (self.root / rel).exists() and (self.root / rel).read_bytes() == data and listed == sha:
            self.result.already.append(rel)
            return
        self.accepted[rel] = (data, sha)

    def check_session(self, rel: str, data: bytes) -> str | None:
        if paths.parse_session_path(rel) is None:
            return f"not a session path of the grammar {paths.RAW_SESSION}"
        record = parse_session(data, rel, self.limits)
        why = filed_problem(record, rel)
        if why:
            return why
        problems = analysis_problems(record, self.devices.get(record["cell"]["gpu"]))
        if problems:
            return "; ".join(problems)
        twin = self.samples().twin(record, rel)
        if twin is not None:
            return f"its samples are those of {twin} (half or more of an arm's step times): a copy of a session is not a new one"
        self.samples().add(record, rel)
        return None

    def check_environment(self, rel: str, data: bytes) -> str | None:
        from decodegap.core.record import _walk_values  # the same limits as a session's

        name = PurePosixPath(rel).name
        gpu = name.split("@", 1)[0].removesuffix(".json")
        if PurePosixPath(rel).parent.as_posix() != paths.ENVIRONMENT_ROOT or not name.endswith(".json") or not gpu:
            return f"not an environment record's path ({paths.ENVIRONMENT_ROOT}/<gpu>@<time>.json)"
        try:
            record = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            return f"not valid JSON: {type(exc).__name__}"
        if not isinstance(record, dict) or record.get("schema") != "decodegap.environment/1":
            return "not a decodegap environment record (schema decodegap.environment/1)"
        odd = _walk_values(record, self.limits)
        if odd:
            return odd
        missing = [k for k in ("gpu", "attention", "weights", "libraries", "definition_sha256") if k not in record]
        if missing:
            return f"an environment record lacking {', '.join(missing)}"
        if record["gpu"] != gpu:
            return f"the record of gpu {record['gpu']!r} under the name of {gpu!r}"
        return None

    def samples(self) -> SampleIndex:
        """The step times of every session already in the tree (read once, unchecked: the tree's
        own sessions were checked when they entered)."""
        if self._samples is None:
            self._samples = SampleIndex()
            for rel in self.listed:
                if rel.startswith(paths.RAW_ROOT + "/") and (self.root / rel).is_file():
                    try:
                        record = json.loads((self.root / rel).read_bytes())
                    except (OSError, ValueError):
                        continue
                    self._samples.add(record, rel)
        return self._samples

    # --- writing ----------------------------------------------------------------------------
    def write(self) -> None:
        for rel, (data, _sha) in sorted(self.accepted.items()):
            if self.dry_run:
                self.result.added.append(rel)
                continue
            target = self.root / rel
            try:
                state = write_exclusive(data, target)
            except SessionExists:
                self.refuse(rel, "appeared while ingesting with other bytes; a recorded file is never replaced")
                continue
            newly_listed = manifest.add([target], self.root)
            if state == "written" or newly_listed:  # a new file, or a file of the tree listed only now
                self.result.added.append(rel)
                self.say(f"[ingest] added {rel}")
            else:
                self.result.already.append(rel)


def _gpu_devices(root: Path) -> dict[str, str]:
    """Each GPU type's device (cuda, cpu) as the tree's config merges it (config/gpus.yaml and the
    config's `gpus:` overrides), falling back to the package's tables."""
    from decodegap.core.config import GPUS_YAML, load_gpus, load_yaml

    table = root / "config" / "gpus.yaml"
    config = root / "config" / "config.yaml"
    try:
        overrides = (load_yaml(config) or {}).get("gpus") if config.is_file() else None
        gpus = load_gpus(table if table.is_file() else GPUS_YAML, overrides)
    except DecodegapError:
        gpus = load_gpus(GPUS_YAML)
    return {k: g.device for k, g in gpus.items()}


def ingest(sources, root: str | Path = ".", dry_run: bool = False, say=print, **limits) -> Result:
    run = Ingest(root, dry_run, say, **limits)
    for source in map(Path, sources):
        before = len(run.accepted) + len(run.result.already) + len(run.result.refused)
        run.source(source)
        if len(run.accepted) + len(run.result.already) + len(run.result.refused) == before and source.exists() \
                and (source.is_dir() or tarfile.is_tarfile(source)):
            run.result.refused.append(f"{source}: holds no file under results/raw/ or results/environment/")
    run.write()
    return run.result


def project_root(start: Path) -> Path | None:
    """The decodegap checkout that holds `start` (a folder with a Snakefile and config/), or None.
    Without --root, ingest writes there, not into whatever folder it was started from: run from
    scripts/ it once wrote a second results/ tree under scripts/."""
    for folder in (start, *start.parents):
        if (folder / "Snakefile").is_file() and (folder / "config").is_dir():
            return folder
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.measure.ingest", description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", help="tar archives (.tar, .tar.gz, ...), folders holding results/raw/ trees, or data files")
    p.add_argument("--root", help="the repository (or a new folder) whose results/ receives the data (default: the "
                   "decodegap checkout that holds the current folder)")
    p.add_argument("--dry-run", action="store_true", help="check and report, write nothing")
    p.add_argument("--max-session-bytes", type=int, default=LIMITS.max_bytes, help="largest data file accepted (default: %(default)s)")
    p.add_argument("--max-archive-bytes", type=int, default=MAX_ARCHIVE_BYTES,
                   help="decompressed bytes read from one archive at most (default: %(default)s)")
    args = p.parse_args(argv)
    if args.max_session_bytes < 1 or args.max_archive_bytes < 1:
        p.error("the limits must be positive")
    if args.root is None:
        args.root = project_root(Path.cwd().resolve())
        if args.root is None:
            p.error(f"{Path.cwd()} is not inside a decodegap checkout (no Snakefile and config/ here or above): "
                    "run ingest from the repository, or name the tree with --root")
        if args.root != Path.cwd().resolve():
            print(f"[ingest] into {args.root}, the checkout that holds {Path.cwd()}")
    try:
        result = ingest(args.sources, args.root, args.dry_run, max_session_bytes=args.max_session_bytes,
                        max_archive_bytes=args.max_archive_bytes)
    except DecodegapError as exc:  # the tree's own manifest is unreadable
        print(f"[ingest] error: {exc}", file=sys.stderr)
        return 1
    for line in result.refused:
        print(f"[ingest] refused: {line}", file=sys.stderr)
    verb = "would add" if args.dry_run else "added"
    print(f"[ingest] {verb} {len(result.added)}, already recorded {len(result.already)}, ignored {len(result.ignored)} "
          f"(not data), refused {len(result.refused)}")
    return 1 if result.refused else 0


if __name__ == "__main__":
    sys.exit(main())
