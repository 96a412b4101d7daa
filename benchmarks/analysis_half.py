"""Benchmark the analysis half (aggregate, stats, figures, tables, provenance) on a synthetic store
of 50 cells x 10 sessions x 256 steps, through Snakemake as a user runs it. Target: <= 60 s on 2
cores. Prints the wall time of the whole run and an in-process breakdown per stage.

    python benchmarks/analysis_half.py [--cells 50] [--sessions 10] [--steps 256] [--cores 2]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import yaml

from decodegap.analysis import synthetic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="decodegap-bench-"))
    try:
        cells = synthetic.benchmark_cells(args.cells)
        t = time.perf_counter()
        synthetic.write_store(work, cells, args.sessions, args.steps)
        print(f"store: {len(cells)} cells x {args.sessions} sessions x {args.steps} steps written in {time.perf_counter() - t:.1f} s")
        config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        config["matrix"]["gpus"] = sorted({c["gpu"] for c in cells})
        config["ab"] = []
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        cmd = ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "--configfile", str(work / "config.yaml"),
               "--cores", str(args.cores), "--quiet", "all", "--", "report/paper_tables.tex"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode:
            sys.exit(proc.stderr[-3000:])
        n_jobs = sum(1 for _ in (work / "results" / "stats").rglob("stats.json"))
        print(f"snakemake analysis half: {wall:.1f} s on {args.cores} cores ({n_jobs} cells; target <= 60 s)")

        # In-process breakdown of the same work (no job start-up), to see where time goes.
        from decodegap.analysis import aggregate, stats
        from decodegap.core.config import load_gpus

        gpus = load_gpus()
        t = time.perf_counter()
        tables = []
        for c in cells:
            files = sorted((work / "results" / "raw" / c["gpu"] / c["model"] / f"ctx{c['ctx']}" / f"{c['attn']}_{c['quant']}_{c['mode']}").glob("s*.json"))
            tables.append((c, *aggregate.aggregate(files, gpus[c["gpu"]].b_peak_Bps)))
        t_agg = time.perf_counter() - t
        t = time.perf_counter()
        for c, s, st in tables:
            stats.cell_stats(*stats.frames(s, st), c, vars(gpus[c["gpu"]]), stats.StatsConfig())
        t_stats = time.perf_counter() - t
        print(f"in-process: aggregate {t_agg:.1f} s, stats {t_stats:.1f} s for {len(cells)} cells ({t_stats / len(cells) * 1e3:.0f} ms/cell, 2000 resamples)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
