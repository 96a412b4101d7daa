"""Which version of the measured code each cell's headline takes, and what the newer versions still lack.

    python -m decodegap.analysis.versions [--gpu h200] [--mode ab-graphed-fused] [--raw results/raw] [--call]

A cell of decodegap's own kernels reports the newest sources version with two or more completed sessions
(stats.newest_code_sessions), and an interval is only as good as its machines: a version recorded on one
machine waits, footnoted, while the headline stays on older code. Before a lent-GPU call, this says, per
GPU type and mode, which version heads each cell and on how many machines, which newer versions wait and
for what, and the call that completes each: the commit to pin (envs/pin_code.sh), the environment record
its first machine ran (SHAPES_FROM, so both machines run one set of launch shapes), and the batch lines
with each cell's next free session number. It reads the raw sessions only (no report build needed);
2026-12-06's plans were made by hand from the same fields.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from decodegap.analysis.stats import NEWEST_CODE_MIN_SESSIONS, _only_unstable, newest_code_sessions
from decodegap.core import paths
from decodegap.core.cells import OWN_KERNELS, arms_of
from decodegap.core.config import REPO_ROOT, ConfigError, load_gpus
from decodegap.core.paths import CELL_KEYS
from decodegap.core.registry import unit_package
from decodegap.core.sources import git, source_hashes, sources_sha256


def completed(record: dict) -> bool:
    """A session whose timed loop ran to the end (stats' scope `completed`): valid, or invalid only for
    its spread ("unstable: ..."); a session that failed (out of memory, a refused kernel) is not."""
    if record.get("status") == "valid":
        return True
    reasons = record.get("reasons") or []
    return bool(reasons) and _only_unstable("; ".join(map(str, reasons)))


def scan(raw: Path, gpu: str | None = None, mode: str | None = None) -> list[dict]:
    """One row per session file under `raw` (results/raw/ by the path grammar), filtered by GPU type and
    mode before a file is read: its cell, number, whether it completed, and what ran it (sources hash,
    commit, GPU UUID, environment record's file name, start time). A file that is not a session's path is
    skipped; one that is but does not parse is an error naming it (ingest would have refused it)."""
    rows = []
    for path in sorted(raw.glob("*/*/ctx*/*/s*.json")):
        keys = paths.parse_session_path(path)  # the grammar's results/raw/... within the path
        if keys is None or (gpu and keys["gpu"] != gpu) or (mode and keys["mode"] != mode):
            continue
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"{path}: not a readable session record ({exc})") from exc
        env = rec.get("environment") or {}
        code = rec.get("code") or {}
        rows.append({**{k: keys[k] for k in CELL_KEYS}, "session": keys["session"], "completed": completed(rec),
                     "sources": code.get("sources_sha256") or "unknown", "commit": code.get("commit") or "unknown",
                     "machine": (env.get("gpu") or {}).get("uuid") or "unknown",
                     "record": Path((env.get("environment_record") or {}).get("path") or "none").name,
                     "started": (rec.get("time") or {}).get("started_utc") or ""})
    return rows


def own_kernels(mode: str) -> bool:
    """Whether a mode's cells read an arm of decodegap's own kernels, whose headline is the newest version
    with two sessions; every other cell pools the completed sessions of every version (stats)."""
    try:
        return any(arm in OWN_KERNELS for arm in arms_of(mode))
    except ConfigError:
        return False


def cell_versions(rows: list[dict]) -> dict:
    """cell key tuple -> {"versions": [newest first: {sources, sessions, machines, commits, records,
    first}], "headline": the sources hash the report heads the cell with (stats.newest_code_sessions; a
    single version heads its cell), or None where the cell pools every version (not an own kernel's, or
    no version with enough sessions), "pooled_machines", "next": the cell's next free session number}.
    Versions are ordered by their last completed session's start, as stats orders them."""
    by_cell: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by_cell[tuple(r[k] for k in CELL_KEYS)].append(r)
    out = {}
    for cell, sessions in by_cell.items():
        done = [s for s in sessions if s["completed"] and s["sources"] != "unknown"]
        versions: dict[str, list[dict]] = defaultdict(list)
        for s in done:
            versions[s["sources"]].append(s)
        ordered = sorted(versions, key=lambda v: max((s["started"], s["session"]) for s in versions[v]), reverse=True)
        listing = [{"sources": v, "sessions": len(versions[v]),
                    "machines": sorted({s["machine"] for s in versions[v]}),
                    "commits": sorted({s["commit"] for s in versions[v]}),
                    "records": sorted({s["record"] for s in versions[v]}),
                    "first": min(versions[v], key=lambda s: (s["started"], s["session"]))} for v in ordered]
        if not own_kernels(cell[CELL_KEYS.index("mode")]):
            headline = None  # pooled whatever the versions
        elif len(listing) == 1:
            headline = listing[0]["sources"]
        else:  # the report's rule, from stats itself
            newest = newest_code_sessions([{"session": s["session"], "sources_sha256": s["sources"], "started_utc": s["started"]}
                                           for s in done], {s["session"] for s in done})
            headline = newest[0] if newest else None
        out[cell] = {"versions": listing, "headline": headline, "pooled_machines": sorted({s["machine"] for s in done}),
                     "next": max(s["session"] for s in sessions) + 1}
    return out


def wanting(cells: dict) -> dict:
    """sources hash -> the cells where that version, the cell's newest, wants another machine: it is newer
    than the cell's headline and waits (or no version has two sessions, and the cell pools them all), or
    it is the headline and ran on one machine only. An older version is never asked for: once the newest
    has its second machine it heads the cell. A cell that pools every version (not an own kernel's, or
    none with two sessions) wants another machine only while all its sessions ran on one; any code
    serves it, so those come under "any". Each entry: (cell, the version's listing, the cell's next free
    session number)."""
    out: dict[str, list] = defaultdict(list)
    for cell, info in cells.items():
        if not info["versions"]:
            continue
        newest = info["versions"][0]
        if not own_kernels(cell[CELL_KEYS.index("mode")]):
            if len(info["pooled_machines"]) < 2:
                out["any"].append((cell, newest, info["next"]))
        elif newest["sources"] != info["headline"] or len(newest["machines"]) < 2:
            out[newest["sources"]].append((cell, newest, info["next"]))
    return out


def batch_groups(entries: list) -> list[tuple[str, list]]:
    """The `B ...` lines (envs/lent_gpu.sh) that record one more session of each cell, at its next free
    number, each with the wanting() entries it runs: cells grouped by path, weight path and number, then
    contexts with the same cards merged."""
    groups: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for entry in entries:
        _, model, ctx, attn, quant, mode = entry[0]
        groups[(mode, attn, quant, entry[2])][ctx].append(entry)
    out = []
    for (mode, attn, quant, nxt), by_ctx in sorted(groups.items()):
        merged: dict[tuple, list] = defaultdict(list)
        for ctx, held in sorted(by_ctx.items()):
            merged[tuple(sorted(e[0][1] for e in held))].append((ctx, held))
        for models, ctxs in merged.items():
            out.append((f"B --models {' '.join(models)} --ctx {' '.join(str(c) for c, _ in ctxs)} --modes {mode} --attn {attn} "
                        f"--quant {quant} --sessions {nxt}", [e for _, held in ctxs for e in held]))
    return out


def batch_lines(entries: list) -> list[str]:
    """batch_groups' lines alone."""
    return [line for line, _ in batch_groups(entries)]


def first_run(entries: list) -> dict:
    """The earliest session of a waiting version over its cells (wanting's entries): its commit is the
    one to pin, its environment record the launch shapes a second machine takes."""
    return min((e[1]["first"] for e in entries), key=lambda s: (s["started"], s["session"]))


def shapes_from(first: dict) -> str:
    """The SHAPES_FROM= setting that stages a second machine from the first one's record ('' if none)."""
    return f"SHAPES_FROM=results/environment/{first['record']} " if first["record"] != "none" else ""


def report(rows: list[dict], here: str | None = None) -> str:
    """The plan as text, per GPU type and mode; `here`: this checkout's sources hash (a version that is
    this checkout's code needs no pinned tree)."""
    here = here or sources_sha256(source_hashes(REPO_ROOT))  # what this checkout's code would record
    out = []
    for gpu, mode in sorted({(r["gpu"], r["mode"]) for r in rows}):
        cells = cell_versions([r for r in rows if (r["gpu"], r["mode"]) == (gpu, mode)])
        out.append(f"{gpu} {mode}: {len(cells)} cells")
        if own_kernels(mode):
            heads: dict[str, list] = defaultdict(list)
            for cell, info in cells.items():
                v = next((v for v in info["versions"] if v["sources"] == info["headline"]), None)
                heads[info["headline"] or "pooled"].append(len(v["machines"]) if v else len(info["pooled_machines"]))
            for h, machines in sorted(heads.items(), key=lambda kv: -len(kv[1])):
                out.append(f"  headline {h[:8]}: {len(machines)} cells, on {min(machines)}-{max(machines)} machines" if h != "pooled" else
                           f"  no version with {NEWEST_CODE_MIN_SESSIONS} sessions: {len(machines)} cells pool every version's sessions "
                           f"(on {min(machines)}-{max(machines)} machines)")
        else:
            n = [len(info["pooled_machines"]) for info in cells.values()]
            out.append(f"  not an own kernel's cell: each pools every version's completed sessions, on {min(n)}-{max(n)} machines"
                       + (" (0: none completed, a failure recorded)" if min(n) == 0 else ""))
        wants = wanting(cells)
        for version, entries in sorted(wants.items(), key=lambda kv: -len(kv[1])):
            if version == "any":
                out.append(f"  {len(entries)} cells ran on one machine: any code records a second")
            else:
                first = first_run(entries)
                machines = sorted({m for e in entries for m in e[1]["machines"]})
                waits = sum(1 for cell, _, _ in entries if cells[cell]["headline"] != version)
                commits = sorted({c for e in entries for c in e[1]["commits"]})
                out.append(f"  {version[:8]}, the newest in {len(entries)} cells, wants another machine ({waits} of them headed by "
                           f"older code or pooled); ran on {', '.join(m[:12] for m in machines)}, commits {', '.join(c[:7] for c in commits)}")
                shapes = shapes_from(first)
                if version == here:
                    out.append(f"    this checkout's code: SHA=<HEAD> TUNE_S=0 {shapes}bash -c '. envs/lent_gpu.sh; stage; ...'")
                else:
                    out.append(f"    bash envs/pin_code.sh {first['commit']}")
                    out.append(f"    cd .pinned && SHA={first['commit']} TUNE_S=0 {shapes}bash -c '. envs/lent_gpu.sh; stage; ...'")
            out.extend(f"      {line}" for line in batch_lines(entries))
        if not wants:
            out.append("  every cell's newest version heads it, on two or more machines" if own_kernels(mode)
                       else "  every cell with a completed session ran on two or more machines")
    return "\n".join(out) if out else "no sessions match"


COMMAND_LIMIT_CHARS = 2000  # the lent GPU's limit on one call's command line (the device tool's `command`)


# The packages every lent GPU has without a carried wheel (torch's own kernels, and Triton for our own):
# a pooled cell on these paths can ride along in any call, at no staging cost beyond its checks.
BUILT_IN_PACKAGES = ("torch", "triton")


def built_in(cell: tuple) -> bool:
    """Whether a cell's attention and weight paths run on a lent GPU with no carried wheel."""
    return (unit_package("attention", cell[CELL_KEYS.index("attn")]) in BUILT_IN_PACKAGES
            and unit_package("weights", cell[CELL_KEYS.index("quant")]) in BUILT_IN_PACKAGES)


def call(rows: list[dict], here: str | None = None, head: str | None = None, deadline_s: int = 575) -> tuple[list[str], list[str], str]:
    """One lent-GPU call that completes, on whichever GPU type it lands, the version that type waits for
    in the most cells: a call that asks for one kind may run on another (2026-12-06: five asks for an
    H200 started none, and one landed on an H100), so the command matches the device's name as
    core.config.gpu_key_of_name does (config/gpus.yaml's device_name_match, any case, the longest
    first: an L40S is not an L4) and runs that type's branch, from that version's
    pinned tree (.pinned-<gpu>, one per type, carried together) with the record its first machine ran,
    the attention and weight paths its lines use, and its batch lines under one daemon that the call
    collects. Returns (the pin_code.sh lines to run here first, the folders to carry, the command).
    After a branch's own-kernel lines come the pooled cells that ran on one machine (any code records
    their second: the report pools every version), on paths with no carried wheel (built_in), as many
    as the command's length allows; the daemon runs them in order, so they take only time the version's
    own lines leave. A type where only such cells wait runs them on this checkout's code."""
    here = here or sources_sha256(source_hashes(REPO_ROOT))
    gpus = load_gpus()
    pins, carry, plans = [], [], []
    for gpu in sorted({r["gpu"] for r in rows}):
        match = gpus[gpu].device_name_match if gpu in gpus else None
        if not match:  # a device of this type could not be told by its name, as a measurement could not run on it
            print(f"versions --call: GPU type {gpu!r} has no device_name_match in config/gpus.yaml: no branch for it", file=sys.stderr)
            continue
        waiting: dict[str, list] = defaultdict(list)
        spare: list = []  # pooled cells on one machine, any code's
        for mode in sorted({r["mode"] for r in rows if r["gpu"] == gpu}):
            for version, entries in wanting(cell_versions([r for r in rows if (r["gpu"], r["mode"]) == (gpu, mode)])).items():
                if version == "any":
                    spare.extend(e for e in entries if built_in(e[0]))
                else:
                    waiting[version].extend(entries)
        if not waiting and not spare:
            continue
        version, entries = max(waiting.items(), key=lambda kv: (len(kv[1]), kv[0])) if waiting else (here, [])
        first = first_run(entries) if entries else None
        if version == here:  # this checkout's own code: the tree's root, no pinned folder
            where, sha = "", head or git(REPO_ROOT, "rev-parse", "HEAD") or "<this checkout's full commit>"
        else:
            folder = f".pinned-{gpu}"
            pins.append(f"bash envs/pin_code.sh {first['commit']} {folder}")
            carry.append(folder)
            where, sha = f"cd {folder} && ", first["commit"]
        plans.append({"match": match, "where": where, "sha": sha, "shapes": shapes_from(first) if first else "",
                      "lines": batch_groups(entries), "spare": batch_groups(spare), "taken": 0})
    if not plans:
        return [], [], ""
    plans.sort(key=lambda p: -len(p["match"]))  # the longest name first, as gpu_key_of_name

    def command_of() -> str:
        branches = []
        for p in plans:
            lines = p["lines"] + p["spare"][:p["taken"]]
            cells = [e[0] for _, held in lines for e in held]
            attn = " ".join(sorted({c[CELL_KEYS.index("attn")] for c in cells}))
            quant = " ".join(sorted({c[CELL_KEYS.index("quant")] for c in cells}))
            batches = "; ".join(line for line, _ in lines)
            branches.append(f"*{p['match'].lower()}*) {p['where']}SHA={p['sha']} TUNE_S=0 ATTN_PATHS=\"{attn}\" QUANT_PATHS=\"{quant}\" "
                            f"{p['shapes']}bash -c '. envs/lent_gpu.sh; stage; daemon \"{batches}\" {deadline_s}; collect {deadline_s + 10}';;")
        return ("G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo \"device: $G\"\ncase \"${G,,}\" in\n"
                + "\n".join(branches) + "\n*) echo \"no plan for the device $G\";;\nesac")

    for p in plans:  # the spare lines, one at a time, while the command fits one call
        while p["taken"] < len(p["spare"]):
            p["taken"] += 1
            if len(command_of()) > COMMAND_LIMIT_CHARS:
                p["taken"] -= 1
                break
    return pins, carry, command_of()


def print_call(rows: list[dict]) -> int:
    """--call: the pins, the carry list and the command, or why there is none; exit 1 where the command
    is longer than one call takes (plan fewer GPU types with --gpu)."""
    pins, carry, command = call(rows)
    if not command:
        print("nothing waits: every own-kernel cell's newest version heads it on two or more machines")
        return 0
    print("# here, before the call (and again after each ingest, to refresh the manifests):")
    print("\n".join(pins) if pins else "# (this checkout's own code: nothing to pin)")
    print(f"# then: run(carry={json.dumps(carry)}, timeout_s=600, command=<below>); ingest $OUT/sessions.tar.gz as after any call")
    print(command)
    print(f"# {len(command)} characters (a call takes {COMMAND_LIMIT_CHARS})")
    if len(command) > COMMAND_LIMIT_CHARS:
        print(f"error: the command is {len(command)} characters, more than one call's {COMMAND_LIMIT_CHARS}: "
              "plan fewer GPU types (--gpu) or modes (--mode)", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.analysis.versions", description=__doc__.split("\n\n")[0])
    p.add_argument("--raw", default="results/raw", help="the raw sessions' folder (default: %(default)s)")
    p.add_argument("--gpu", default=None, help="one GPU type (config/gpus.yaml key)")
    p.add_argument("--mode", default=None, help="one mode ('all' for every mode; default: ab-graphed-fused, with --call all: a "
                                                "pooled cell on one machine rides along in a call)")
    p.add_argument("--call", action="store_true",
                   help="print one lent-GPU call that completes, on whichever GPU type it lands, the version that type waits "
                        "for in the most cells (the pins to run first, the folders to carry, the command)")
    args = p.parse_args(argv)
    raw = Path(args.raw)
    if not raw.is_dir() or raw.resolve().as_posix().split("/")[-2:] != ["results", "raw"]:
        p.error(f"--raw {raw}: not a results/raw folder")
    mode = args.mode or ("all" if args.call else "ab-graphed-fused")
    rows = scan(raw.resolve(), args.gpu, None if mode == "all" else mode)
    if args.call:
        return print_call(rows)
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
