#!/usr/bin/env python3
"""Print what GPUs SLURM jobs asked for (and got), also after they ended.

Usage: job_gpus.py [--json] [JOBID ...]      (no JOBID: every job known)

Sources, in order:
  1. /var/log/slurm/jobcomp.jsonl  -- one JSON line per ended job, written by
     jobcomp.lua (installed by up.sh); kept across MinJobAge and restarts.
  2. `scontrol show job -o`        -- jobs still pending/running (or ended and
     not yet purged, MinJobAge).
Columns: job id, state, job name, comment (the snakemake plugin puts
"rule_<rule>[_wildcards_<w>]" there), requested gres (tres_per_job/-node/-task;
"gres:gpu:h200:1"), allocated gres ("gpu:h200:1"), constraint.
Standard library only.
"""
import json
import subprocess
import sys

JOBCOMP = "/var/log/slurm/jobcomp.jsonl"
REQ_KEYS = ("tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket")


def from_jobcomp():
    jobs = {}
    try:
        with open(JOBCOMP) as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                jobs[str(rec.get("job_id"))] = rec
    except FileNotFoundError:
        pass
    return jobs


def _scontrol_fields(line):
    # `scontrol show job -o`: one job per line, Key=Value separated by spaces;
    # values of the keys we need contain no spaces.
    out = {}
    for tok in line.split(" "):
        if "=" in tok:
            k, v = tok.split("=", 1)
            out.setdefault(k, v)
    return out


def from_scontrol(ids):
    cmd = ["scontrol", "show", "job", "-o"] + (list(ids)[:1] if len(ids) == 1 else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    jobs = {}
    for line in out.splitlines():
        f = _scontrol_fields(line)
        if "JobId" not in f:
            continue
        jobs[f["JobId"]] = {
            "job_id": int(f["JobId"]),
            "name": f.get("JobName"),
            "comment": f.get("Comment") if f.get("Comment") != "(null)" else None,
            "state": f.get("JobState"),
            "tres_per_job": f.get("TresPerJob"),
            "tres_per_node": f.get("TresPerNode"),
            "tres_per_task": f.get("TresPerTask"),
            "tres_per_socket": f.get("TresPerSocket"),
            "gres_alloc": None,
            "constraint": f.get("Features") if f.get("Features") != "(null)" else None,
            "source": "scontrol",
        }
    return jobs


def main(argv):
    as_json = "--json" in argv
    ids = [a for a in argv if a != "--json"]
    jobs = from_scontrol(ids)
    for jid, rec in from_jobcomp().items():  # jobcomp wins: it has the allocation
        rec["source"] = "jobcomp"
        jobs[jid] = rec
    if ids:
        jobs = {j: jobs[j] for j in ids if j in jobs}
        missing = [j for j in ids if j not in jobs]
    else:
        missing = []
    rows = sorted(jobs.values(), key=lambda r: int(r["job_id"]))
    if as_json:
        for r in rows:
            r["gpu_request"] = ",".join(r[k] for k in REQ_KEYS if r.get(k)) or None
            print(json.dumps(r, sort_keys=True))
    else:
        print("JOBID\tSTATE\tCOMMENT\tREQUEST\tALLOC\tCONSTRAINT\tNAME")
        for r in rows:
            req = ",".join(r[k] for k in REQ_KEYS if r.get(k)) or "-"
            print("\t".join(str(x) for x in (
                r["job_id"], r.get("state") or "-", r.get("comment") or "-", req,
                r.get("gres_alloc") or "-", r.get("constraint") or "-",
                r.get("name") or "-")))
    for j in missing:
        print(f"job {j}: unknown (not in {JOBCOMP} nor in scontrol)", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
