"""Provenance: from any number in report/paper_tables.tex to the raw sessions behind it.

Every rendered number is \\dgnum{KEY}{text}. report/provenance.json maps KEY to the table, the
quantity, the cell, the statistics file, the raw session files with their sha256, the environment
and code version each ran under, and the rule chain that turned them into the number.

    python -m decodegap.analysis.provenance keys [--grep TEXT]      list keys
    python -m decodegap.analysis.provenance lineage KEY [--recompute]
                                   print a number's lineage; --recompute re-reads the raw files and
                                   recomputes the number from their samples
    python -m decodegap.analysis.provenance check                   re-hash every file under results/raw/ against the
                                   manifest results/raw.sha256 (and the report's raw files against
                                   report/provenance.json); exit 1 if any was added, changed or lost
    python -m decodegap.analysis.provenance code [RAW_DIR ...]      which commits each session's measurement
                                   sources equal, from their hashes (audits the commit a record names)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from decodegap.core import paths
from decodegap.core.sources import sha256_file
from decodegap.core.config import REPO_ROOT

SCHEMA = "decodegap.provenance/1"
DEFAULT = paths.PROVENANCE
ANALYSIS_GLOBS = ("scripts/decodegap/*.py", "scripts/decodegap/core/*.py", "scripts/decodegap/analysis/*.py",
                  "scripts/decodegap/analysis/templates/*.j2", "scripts/rules/*.py", "Snakefile",
                  "workflow/rules/*.smk", "workflow/schemas/*", "config/*.yaml", "config/reference/*.yaml")


def analysis_code(root: Path = REPO_ROOT) -> dict:
    files = sorted({p for g in ANALYSIS_GLOBS for p in root.glob(g) if p.is_file()})
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(root)}\0{sha256_file(p)}\n".encode())
    commit = None
    if (root / ".git").exists():
        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20).stdout.strip() or None
        except OSError:
            commit = None
    return {"commit": commit, "sources_sha256": h.hexdigest(), "n_files": len(files)}


def rule_chain(table: str) -> list[str]:
    stage = "table_matrix" if table.startswith("matrix_") else f"table_{table}"
    return [
        f"measure: python -m decodegap.measure (one fresh process per session) -> {paths.RAW_SESSION}",
        f"cell: decodegap.analysis.aggregate -> {paths.CELL_SESSIONS}, then decodegap.analysis.stats -> {paths.CELL_STATS}",
        f"{stage}: decodegap.analysis.tables -> {paths.table_tex(table)}",
        f"paper_tables: decodegap.analysis.tables.paper_tables -> {paths.PAPER_TABLES}",
    ]


def _contributing(stats: dict, entry: dict) -> list[int]:
    scope = stats.get(entry["scope"]) or {}
    if entry.get("arm") and entry["arm"] in (scope.get("arms") or {}):
        return scope["arms"][entry["arm"]]["sessions"]
    if scope.get("speedup"):
        return scope["speedup"]["sessions"]
    arms = [a for a in (scope.get("arms") or {}).values() if a]
    return sorted({s for a in arms for s in a["sessions"]})


def _raw_files(stats: dict, entry: dict) -> list[dict]:
    used = set(_contributing(stats, entry))
    return [
        {"path": s["raw_path"], "sha256": s["raw_sha256"], "session": s["session"], "status": s["status"],
         "environment": {k: s[k] for k in ("gpu_name", "driver", "torch", "transformers")},
         "environment_record": {"path": s.get("environment_record"), "sha256": s.get("environment_sha256")} if s.get("environment_record") else None,
         "code": {"commit": s["code_commit"], "dirty": s["code_dirty"]}, "started_utc": s["started_utc"]}
        for s in stats["sessions"] if s["session"] in used
    ]


DGNUM = re.compile(r"\\dgnum\{([^{}]*)\}\{([^{}]*)\}")


def build(number_files, out: str | Path, table_files=(), stats_dirs=(), figure_files=()) -> dict:
    """report/provenance.json: every rendered number with its lineage; the sha256 of each table as
    rendered and each figure as drawn (`check` names any number edited since, and any figure
    replaced); and every session the report read, with its sha256 (`check` says when sessions were
    added or changed since: a stale report)."""
    numbers, stats_cache = {}, {}

    def stats_of(path):
        if path not in stats_cache:
            with open(path) as fh:
                stats_cache[path] = json.load(fh)
        return stats_cache[path]

    for nf in number_files:
        with open(nf) as f:
            for key, entry in json.load(f).items():
                stats = stats_of(entry["stats_file"])
                # a number derived from several cells (the anatomy's parts) rests on all their sessions
                sources = [(stats_of(i["stats_file"]), {**entry, **i}) for i in entry["inputs"].values()] if entry.get("inputs") else [(stats, entry)]
                raw = list({r["path"]: r for st, e in sources for r in _raw_files(st, e)}.values())
                numbers[key] = {**entry, "raw_files": raw, "stats_config": stats["config"], "time_source": stats["time_source"],
                                "rule_chain": rule_chain(entry["table"])}
    read = {}
    for folder in stats_dirs:
        for f in sorted(Path(folder).rglob("stats.json")):
            for sess in stats_of(f.as_posix())["sessions"]:
                read[sess["raw_path"]] = sess["raw_sha256"]
    doc = {"schema": SCHEMA, "analysis_code": analysis_code(), "numbers": dict(sorted(numbers.items())),
           "tables": {Path(t).as_posix(): sha256_file(t) for t in table_files},
           "figures": {Path(f).as_posix(): sha256_file(f) for f in figure_files}, "sessions_read": dict(sorted(read.items()))}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def load(path: str | Path = DEFAULT) -> dict:
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise SystemExit(f"{path}: not a decodegap provenance file")
    return doc


def extract(stats: dict, entry: dict) -> float | None:
    """The quantity an entry names, read from a (re)computed cell statistics record."""
    scope = stats[entry["scope"]]
    q = entry["quantity"]
    if q == "ratio_to_published":
        value = extract(stats, {**entry, "quantity": entry["reproduces"]})
        return None if value is None else value / entry["published_value"]
    arm = entry.get("arm") or (stats["arms"][0] if len(stats["arms"]) == 1 else None)
    per_arm = {
        "ms_per_step": "median_ms", "ms_per_step_ci_low": "ci_low_ms", "ms_per_step_ci_high": "ci_high_ms",
        "r_floor": "r_floor", "tokens_per_s": "tokens_per_s", "cost_usd_per_mtok": "cost_usd_per_mtok",
        "t_floor_ms": "t_floor_ms", "t_floor_no_embedding_ms": "t_floor_no_embedding_ms", "t_ceiling_ms": "t_ceiling_ms",
        "us_per_layer": "us_per_layer",
    }
    if q in per_arm and arm:
        return scope["arms"][arm][per_arm[q]]
    if q in ("kernels_per_step", "gpu_busy_ms_per_step") and arm:  # the arm's profiler pass
        return (scope["arms"][arm]["anatomy"] or {}).get(q)
    if q == "compile_s" and arm:
        return scope["arms"][arm]["compile_s"]
    if q.startswith("host_model:"):
        return scope["arms"][arm]["host_model"][q.split(":", 1)[1]]
    if q == "host_speedup_proportional":
        from decodegap.analysis.hostmodel import proportional_speedup

        return proportional_speedup(scope["arms"][arm]["host_model"], entry["gpu_bound_ms"])
    if q in ("r_floor_no_embedding", "r_ceiling", "streamed_Bps", "streamed_over_copy") and arm:
        return scope["arms"][arm][q]
    if q.startswith("gap:") and arm:  # the fused step's parts (decodegap.analysis.tables_gap.gap_parts)
        from decodegap.analysis.tables_gap import gap_parts

        return gap_parts(scope["arms"][arm])[q.split(":", 1)[1]]
    if q.startswith("kernel_ms:") and arm:  # kernel_ms:<gemv|attention>: the profiler pass's kernels by class
        return ((scope["arms"][arm]["anatomy"] or {}).get("kernel_ms_per_step") or {}).get(q.split(":", 1)[1])
    if q.startswith("variance:"):  # variance components of an arm, or of the speedup's log ratios
        target = scope["speedup"] if entry.get("arm") is None else scope["arms"][arm]
        return target["variance"][q.split(":", 1)[1]]
    if q.startswith("sensitivity:"):  # sensitivity:<filter>:<estimate|ci_low|ci_high|n_sessions|n_machines>
        _, filt, field = q.split(":")
        row = next(r for r in stats["sensitivity"][filt] if r[entry["threshold_field"]] == entry["threshold"])
        target = row["speedup"] if entry.get("arm") is None else row["arms"][arm]
        return _estimate_field(target, field)
    sp = scope.get("speedup") or {}
    if q.startswith("speedup_estimator:"):  # speedup_estimator:<name>:<estimate|ci_low|ci_high>
        _, name, field = q.split(":")
        return _estimate_field(sp["estimators"][name], field)
    if q == "speedup":
        return sp.get("estimate")
    if q == "launch_share":  # of an op-by-op time, the part a graph removes: 1 - graphed/op
        return 1 - 1 / sp["estimate"]
    if q == "n_sessions":
        return sp.get("n_sessions")
    if q == "n_machines":
        return sp.get("n_machines")
    for i, bound in enumerate(("low", "high")):
        if q == f"speedup_ci_{bound}":
            return (sp.get("ci") or [None, None])[i]
    raise KeyError(f"no rule to recompute quantity {q!r}")


def _estimate_field(target: dict, field: str):
    """A field of an estimate record: a median (median_ms, ci_low_ms, ...) or a speedup (estimate, ci)."""
    if field in ("n_sessions", "n_machines"):
        return target[field]
    if "median_ms" in target:
        return target[{"estimate": "median_ms", "ci_low": "ci_low_ms", "ci_high": "ci_high_ms"}[field]]
    if field == "estimate":
        return target["estimate"]
    return (target.get("ci") or [None, None])[0 if field == "ci_low" else 1]


def recompute_stats(stats_file: str) -> dict:
    """A cell's statistics recomputed from its raw files with the settings it recorded."""
    from decodegap.analysis.aggregate import aggregate
    from decodegap.analysis.stats import StatsConfig, cell_stats, frames

    with open(stats_file) as f:
        stats = json.load(f)
    from decodegap.core.protocol import Protocol

    files = [s["raw_path"] for s in stats["sessions"]]
    protocol = Protocol(**stats["protocol"]) if stats.get("protocol") else None  # the analysis config's, as it judged them
    sessions, steps = aggregate(files, float(stats["gpu_spec"]["b_peak_Bps"]), protocol, stats["gpu_spec"].get("device", "cuda"))
    cfg = StatsConfig(**stats["config"], time_source=stats["time_source"])
    return {**cell_stats(*frames(sessions, steps), stats["cell"], stats["gpu_spec"], cfg), "_file": stats_file}


def recompute(entry: dict) -> tuple[float | None, str]:
    """Re-read the cell's raw files (every input cell's, for a derived number) and recompute it."""
    from decodegap.analysis.latex import fmt

    if entry["quantity"].startswith("stepmodel:"):
        from decodegap.analysis.tables import step_model_numbers

        fresh = [recompute_stats(f) for f in sorted({i["stats_file"] for i in entry["inputs"].values()})]
        value = step_model_numbers(fresh)[0][entry["quantity"].split(":", 1)[1]] * entry.get("scale", 1.0)
    elif entry["quantity"].startswith("quant:"):
        from decodegap.analysis.tables import quant_numbers

        fresh = {name: recompute_stats(i["stats_file"]) for name, i in entry["inputs"].items()}
        value = quant_numbers(fresh["quant"], fresh["bf16"], entry["arm"])[entry["quantity"].split(":", 1)[1]]
    elif entry["quantity"] == "floor:over_bf16_graphed":
        from decodegap.analysis.tables import over_bf16_graphed

        fresh = {name: recompute_stats(i["stats_file"]) for name, i in entry["inputs"].items()}
        value = over_bf16_graphed(fresh["cell"], entry["arm"], fresh["bf16"], entry["bf16_arm"], scope=entry["inputs"]["cell"]["scope"])
    elif entry["quantity"].startswith("anatomy:"):
        from decodegap.analysis import anatomy

        fresh = [recompute_stats(f) for f in sorted({i["stats_file"] for i in entry["inputs"].values()})]
        group = anatomy.group_key(entry["cell"])
        row = next(r for r in anatomy.rows(fresh) if (r["gpu"], r["model"], r["ctx"], r["attn"], r["quant"]) == group)
        value = row[entry["quantity"].split(":", 1)[1]]
    else:
        value = extract(recompute_stats(entry["stats_file"]), entry)
        if value is not None and entry.get("scale") is not None:  # the unit shown (%), as the table applied it
            value = value * entry["scale"]
    return value, fmt(value, entry["digits"])


def lineage(doc: dict, key: str, do_recompute: bool = False) -> int:
    entry = doc["numbers"].get(key)
    if entry is None:
        close = [k for k in doc["numbers"] if key in k][:10]
        print(f"unknown key {key!r}" + ("; keys containing it:\n  " + "\n  ".join(close) if close else ""), file=sys.stderr)
        return 2
    c = entry["cell"]
    print(f"{key}\n  value {entry['text']} ({entry['quantity']}, scope {entry['scope']}" + (f", arm {entry['arm']}" if entry.get("arm") else "") + ")")
    print(f"  table {entry['table']}  cell gpu={c['gpu']} model={c['model']} ctx={c['ctx']} attn={c['attn']} quant={c['quant']} mode={c['mode']}")
    print(f"  statistics {entry['stats_file']}  ({entry['stats_config']}, time source {entry['time_source']})")
    print("  rule chain:")
    for step in entry["rule_chain"]:
        print(f"    {step}")
    print(f"  raw sessions ({len(entry['raw_files'])}):")
    bad = 0
    for r in entry["raw_files"]:
        now = sha256_file(r["path"]) if Path(r["path"]).exists() else None
        ok = "ok" if now == r["sha256"] else ("MISSING" if now is None else "CHANGED")
        bad += ok != "ok"
        env, code = r["environment"], r["code"]
        print(f"    {r['path']}  sha256 {r['sha256'][:16]}... {ok}  [{r['status']}] {env['gpu_name']}, driver {env['driver']}, "
              f"torch {env['torch']}, transformers {env['transformers']}, code {code['commit']}{' (dirty)' if code['dirty'] else ''}")
        rec = r.get("environment_record")
        if rec:  # the GPU type's environment stage the session ran under
            print(f"      environment record {rec['path']}  sha256 {rec['sha256'][:16]}...")
    print(f"  analysis code {doc['analysis_code']['commit']} (sources {doc['analysis_code']['sources_sha256'][:16]}...)")
    if do_recompute:
        value, text = recompute(entry)
        same = text == entry["text"]
        print(f"  recomputed from the raw samples: {text} -> {'reproduces' if same else 'DIFFERS FROM'} {entry['text']}")
        bad += not same
    return 1 if bad else 0


def check(doc: dict | None, root: str | Path = ".") -> int:
    """Is the report what the data and the analysis make it? Every data file against the committed
    manifest (added, changed, missing, links); no two sessions holding the same samples; the report
    against the sessions now configured (one it did not read, or read with other bytes, makes it
    stale, e.g. after `snakemake --touch`); every raw file behind a number against the hash the
    report used; every table against its rendered hash, naming any number edited since."""
    from decodegap.core import manifest
    from decodegap.core.errors import DecodegapError

    root = Path(root)
    bad = []
    try:
        audit = manifest.audit(root)
    except DecodegapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    listed = manifest.manifest_path(root)
    if not listed.exists():
        bad.append(f"no manifest: {listed} (the commands that add sessions write it)")
    bad += [f"added (not in {paths.MANIFEST}): {p}" for p in audit.added]
    bad += [f"changed (sha256 differs from {paths.MANIFEST}): {p}" for p in audit.changed]
    bad += [f"missing (listed in {paths.MANIFEST}): {p}" for p in audit.missing]
    bad += [f"not a regular file: {p}" for p in audit.odd]
    print(f"checked {audit.checked} files under {paths.RAW_ROOT}/ and {paths.ENVIRONMENT_ROOT}/ against {paths.MANIFEST}: "
          + ("all as recorded" if audit.ok else f"{len(audit.added)} added, {len(audit.changed)} changed, {len(audit.missing)} missing, "
                                                  f"{len(audit.odd)} not regular files"))
    twins = _identical_samples(root, [p for p in manifest.walk(root).files if p.startswith(paths.RAW_ROOT + "/")])
    bad += twins
    print(f"checked every session's samples against every other's: " + ("no copies" if not twins else f"{len(twins)} copies"))
    if doc is None:
        print(f"no report yet ({DEFAULT}): only the data were checked; build it with `snakemake report/paper_tables.tex`")
    else:
        bad += _stale(doc, root)
        files = {r["path"]: r["sha256"] for e in doc["numbers"].values() for r in e["raw_files"]}
        n_bad = len(bad)
        for path, sha in sorted(files.items()):
            full = root / path
            if not full.exists():
                bad.append(f"missing: {path} (behind a number of the report)")
            elif sha256_file(full) != sha:
                bad.append(f"changed: {path} (the report used sha256 {sha[:16]}..., now {sha256_file(full)[:16]}...)")
        print(f"checked {len(files)} raw files behind {len(doc['numbers'])} numbers of the report: "
              + ("all unchanged" if len(bad) == n_bad else f"{len(bad) - n_bad} changed or missing"))
        edited = _edited_tables(doc, root)
        bad += edited
        print(f"checked {len(doc.get('tables') or {})} tables and {len(doc.get('figures') or {})} figure files against their hashes as built: " + ("all as built" if not edited else f"{len(edited)} differ"))
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


def _identical_samples(root: Path, rels: list[str]) -> list[str]:
    from decodegap.core.record import SampleIndex

    seen, out = SampleIndex(), []
    for rel in sorted(rels):
        try:
            record = json.loads((root / rel).read_bytes())
        except (OSError, ValueError):
            continue  # unreadable: the manifest audit and the analysis say so
        twin = seen.twin(record, rel)
        if twin is not None:
            out.append(f"copied samples: {rel} holds the step times of {twin}")
        else:
            seen.add(record, rel)
    return out


def _configured_sessions(root: Path) -> list[str] | None:
    """The session files the shipped config's cells hold now (None when the config cannot be read)."""
    from decodegap.core.cells import Plan
    from decodegap.core.config import load_yaml
    from decodegap.core.errors import DecodegapError

    try:
        plan = Plan(load_yaml(root / "config" / "config.yaml"), root=root)
    except (DecodegapError, OSError) as exc:
        print(f"warning: the config's cells could not be listed ({exc}); the report is compared with every listed session", file=sys.stderr)
        return None
    return sorted({f for c in plan.cells() for f in plan.raw_files(c)})


def _stale(doc: dict, root: Path) -> list[str]:
    """Sessions configured now that the report did not read, or read with other bytes."""
    from decodegap.core import manifest

    read = doc.get("sessions_read")
    if read is None:
        return [f"{DEFAULT} predates the record of the sessions it read: rebuild it (snakemake report/paper_tables.tex)"]
    now = _configured_sessions(root)
    listed = manifest.read(root)
    if now is None:
        now = [p for p in listed if p.startswith(paths.RAW_ROOT + "/")]
    unread = [p for p in now if p not in read]
    other = [p for p in now if p in read and listed.get(p) not in (None, read[p])]
    out = []
    if unread:
        out.append(f"stale report: {len(unread)} session(s) under {paths.RAW_ROOT}/ are not in it (first: {unread[0]}); "
                   "rebuild with `snakemake report/paper_tables.tex` (after `snakemake --touch`, with `--forcerun cells`)")
    out += [f"stale report: {p} was read with sha256 {read[p][:16]}..., the manifest lists {listed[p][:16]}..." for p in other]
    return out


def _edited_tables(doc: dict, root: Path) -> list[str]:
    out = []
    texts = {k: e["text"] for k, e in doc["numbers"].items()}
    for table, sha in sorted((doc.get("tables") or {}).items()):
        path = root / table
        if not path.exists():
            out.append(f"missing table: {table}")
            continue
        if sha256_file(path) == sha:
            continue
        found = dict(DGNUM.findall(path.read_text(errors="replace")))
        changed = [f"{k}: {v!r} (provenance has {texts[k]!r})" for k, v in found.items() if k in texts and texts[k] != v]
        unknown = [k for k in found if k not in texts]
        detail = "; ".join(changed[:5] + [f"{k}: a number provenance never recorded" for k in unknown[:3]]) or "text other than the numbers"
        out.append(f"edited table: {table} differs from what the report rendered ({detail}); rebuild it: snakemake -f {table}")
    for figure, sha in sorted((doc.get("figures") or {}).items()):
        path = root / figure
        if not path.exists():
            out.append(f"missing figure: {figure}")
        elif sha256_file(path) != sha:
            out.append(f"edited figure: {figure} is not the file the report drew (changed by hand, or redrawn alone "
                       f"since): rebuild the report: snakemake -f {figure} {DEFAULT}")
    return out


def code(raw_dirs: list[str]) -> int:
    """Group sessions by their measurement sources' hash and name the commits with exactly those
    sources. Exit 1 when a group matches no commit in the history (code that was never committed)
    or a record names a commit the history does not have; 2 for a folder that does not exist."""
    from decodegap.core.sources import git, matching_commits
    from decodegap.core.record import read_session

    missing = [d for d in raw_dirs if not Path(d).is_dir()]
    if missing:
        print(f"error: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    groups: dict[str, dict] = {}
    n_sessions = 0
    for d in raw_dirs:
        for path in sorted(Path(d).rglob("s*.json")):
            c = read_session(path)["code"]
            g = groups.setdefault(c["sources_sha256"], {"files": c["files"], "claimed": set(), "commits": set(), "n": 0})
            g["claimed"].add(f"{c['commit'] or 'none'}{' (dirty)' if c['dirty'] else ''} [{c['commit_origin']}]")
            if c["commit"]:
                g["commits"].add(c["commit"])
            g["n"] += 1
            n_sessions += 1
    if not n_sessions:
        print(f"error: no session under {', '.join(raw_dirs)}", file=sys.stderr)
        return 2
    unmatched = 0
    for sha, g in groups.items():
        found = matching_commits(g["files"])
        if found is None:
            print("no git history here: cannot match sources to commits", file=sys.stderr)
            return 2
        unknown = sorted(c for c in g["commits"] if git(REPO_ROOT, "cat-file", "-e", f"{c}^{{commit}}") is None)
        unmatched += bool(unknown) or not found
        misnamed = sorted(c for c in g["commits"] if c not in unknown and git(REPO_ROOT, "rev-parse", c) not in found)
        first = ", ".join(f[:10] for f in found[-1:]) + (f" (+{len(found) - 1} later commits with the same sources)" if len(found) > 1 else "")
        print(f"sources {sha[:16]}...  {g['n']} sessions; record says {', '.join(sorted(g['claimed']))}; "
              f"sources first committed in: {first if found else 'NO COMMIT'}"
              + (f"; UNKNOWN COMMIT {', '.join(unknown)} (not in this repository's history)" if unknown else "")
              + (f"; the commit named, {', '.join(c[:10] for c in misnamed)}, does not hold these sources: the sessions ran the "
                 "code of the commit found (a dirty tree, or a commit taken from another checkout)" if misnamed and found else ""))
    return 1 if unmatched else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.analysis.provenance", description=__doc__.split("\n\n")[0])
    p.add_argument("--provenance", default=DEFAULT)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keys", help="list the keys of every rendered number")
    k.add_argument("--grep", default="")
    ln = sub.add_parser("lineage", help="print where a number came from")
    ln.add_argument("key")
    ln.add_argument("--recompute", action="store_true", help="recompute it from the raw samples")
    sub.add_parser("check", help="re-hash every raw file against the manifest (and the report's); exit 1 if any was added, changed or lost")
    cd = sub.add_parser("code", help="match each session's measurement sources to the commits that hold them")
    cd.add_argument("raw_dirs", nargs="*", default=["results/raw"])
    args = p.parse_args(argv)
    if args.cmd == "code":
        return code(args.raw_dirs)
    if args.cmd == "check":
        return check(load(args.provenance) if Path(args.provenance).exists() else None)  # no report: said, exit 1
    doc = load(args.provenance)
    if args.cmd == "keys":
        for key, e in doc["numbers"].items():
            if args.grep in key:
                print(f"{key}\t{e['text']}")
        return 0
    if args.cmd == "lineage":
        return lineage(doc, args.key, args.recompute)


if __name__ == "__main__":
    sys.exit(main())
