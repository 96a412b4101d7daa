"""The main job's time on a fresh clone, and one figure's rebuild after one new session.

    python benchmarks/main_job.py [--cores 2] [--keep DIR]

1. Copies the repository as a fresh clone holds it (tracked and new unignored files, every file's
   time new) and times `snakemake --cores N report/paper_tables.tex` there: the README's main job on
   the bundled sessions (target: 90 s on 2 cores).
2. Adds one session to that clone through `python -m decodegap.measure.ingest`, as a lent GPU's
   archive would: a synthetic record (decodegap.analysis.synthetic, labelled synthetic in its
   environment and code; it stays in the temporary clone, never in the repository) for the
   headline cell, Qwen-2.5-7B at ctx 2048, graphed.
3. Times `snakemake --cores N report/figures/ladder.png`: only the new session's (gpu, model, ctx)
   group and the figure should run (target: 30 s).

Prints the times, the jobs each ran, and whether each target is met.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAIN_TARGET_S, FIGURE_TARGET_S = 90.0, 30.0


def clone(dest: Path) -> Path:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes((REPO / rel).read_bytes())
    return dest


def timed_snakemake(root: Path, cores: int, target: str) -> tuple[float, dict]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    t = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--cores", str(cores), target], cwd=root, env=env,
                          capture_output=True, text=True)
    dt = time.perf_counter() - t
    if proc.returncode:
        sys.exit(f"snakemake {target} failed:\n{proc.stderr[-3000:]}")
    jobs = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) not in ("total", "job", "count"):
            jobs[m.group(1)] = int(m.group(2))
    return dt, jobs


def add_session(root: Path) -> str:
    import numpy as np

    from decodegap.analysis import synthetic  # the package as installed: the clone holds the same code
    from decodegap.core import paths
    from decodegap.core.record import write_session

    cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="graphed")
    folder = root / paths.session_path(session=0, **cell).parent
    session = 1 + max(int(p.stem[1:]) for p in folder.glob("s*.json"))
    record = synthetic.record(cell, session, 128, np.random.default_rng(session), base_ms=8.2)
    record["protocol"].update(min_samples=64, min_duration_s=0.2)  # judged by the config's protocol: 128 steps of 8 ms pass it
    staging = Path(tempfile.mkdtemp()) / paths.session_path(session=session, **cell)
    write_session(record, staging)
    proc = subprocess.run([sys.executable, "-m", "decodegap.measure.ingest", str(staging.parents[6])], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"ingest failed:\n{proc.stdout}{proc.stderr}")
    return staging.relative_to(staging.parents[6]).as_posix()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--keep", default=None, help="build the clone here and keep it (default: a temporary folder)")
    args = p.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="decodegap-main-job-"))
    root.mkdir(parents=True, exist_ok=True)
    clone(root)
    print(f"fresh clone: {root} ({os.cpu_count()} CPUs here, --cores {args.cores})", flush=True)
    main_s, main_jobs = timed_snakemake(root, args.cores, "report/paper_tables.tex")
    print(f"main job: snakemake --cores {args.cores} report/paper_tables.tex  {main_s:6.1f} s  "
          f"{sum(main_jobs.values())} jobs {json.dumps(main_jobs)}", flush=True)
    new = add_session(root)
    print(f"ingested one session: {new}", flush=True)
    fig_s, fig_jobs = timed_snakemake(root, args.cores, "report/figures/ladder.png")
    print(f"one figure after it: snakemake --cores {args.cores} report/figures/ladder.png  {fig_s:6.1f} s  "
          f"{sum(fig_jobs.values())} jobs {json.dumps(fig_jobs)}", flush=True)
    print(f"targets: main job <= {MAIN_TARGET_S:.0f} s: {'met' if main_s <= MAIN_TARGET_S else 'NOT met'}; "
          f"one figure <= {FIGURE_TARGET_S:.0f} s: {'met' if fig_s <= FIGURE_TARGET_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
