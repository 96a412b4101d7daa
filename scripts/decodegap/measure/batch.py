"""Measure many sessions on one GPU without Snakemake: each in a fresh process, one after another,
skipping sessions already recorded, and starting none that could not finish before a deadline.

    python -m decodegap.measure.batch --gpu h200 --models qwen2.5-7b mistral-7b-v0.3 \
        --ctx 2048 4096 --modes eager graphed --sessions 0 1 --deadline-s 540

This is the runner for a lent GPU with a hard time limit per call (and a workstation without a
scheduler); on a cluster, `snakemake --profile slurm` calls the same measurement command.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from decodegap.core import paths


def planned(args) -> list[dict]:
    """Sessions in the order they run: every cell's first session before any cell's second, so a
    deadline leaves cells with fewer sessions rather than some with none. Each mode gets the weight
    paths it reads (generate bf16, llamacpp its GGUF formats), and llama.cpp's cells run one card at a
    time: the machine's GGUF cache holds about two cards' files, so card after card never rewrites one."""
    from decodegap.core.cells import OWN_MODEL, mode_quant_problem

    cells = []
    quants = args.quant if isinstance(args.quant, list) else [args.quant]
    for session, attn, quant, model, ctx, mode in itertools.product(args.sessions, args.attn, quants, args.models, args.ctx, args.modes):
        if mode_quant_problem(mode, quant) is None:
            cells.append(dict(gpu=args.gpu, model=model, ctx=ctx, attn=attn, quant=quant, mode=mode, session=session))
    # a stable sort: the other cells keep their order, then the engine's, card by card
    return sorted(cells, key=lambda c: (c["session"], c["mode"] in OWN_MODEL, args.models.index(c["model"]) if c["mode"] in OWN_MODEL else 0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.measure.batch", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--ctx", nargs="+", type=int, required=True)
    p.add_argument("--modes", nargs="+", required=True)
    p.add_argument("--sessions", nargs="+", type=int, required=True)
    p.add_argument("--attn", nargs="+", default=["sdpa"], help="attention paths (default: sdpa)")
    p.add_argument("--quant", nargs="+", default=["bf16"], help="weight paths (default: bf16)")
    p.add_argument("--root", default=".")
    p.add_argument("--listed-in", nargs="+", default=[], metavar="TREE",
                   help="also skip every session these trees' manifests (TREE/results/raw.sha256) list, present or not, as the "
                        "workflow does: a lent GPU's call whose tree carries the manifest but not results/raw/ (too large to carry)")
    p.add_argument("--deadline-s", type=float, default=None, help="start no session after this many seconds")
    p.add_argument("--deadline-at", type=float, default=None,
                   help="start no session after this UNIX time: one deadline shared by several batch runs of one device call "
                        "(e.g. $(( $(date +%%s) + 540 )) taken once at the call's start)")
    p.add_argument("--reserve-s", type=float, default=45.0, help="time a session may need; none starts later than deadline - reserve")
    p.add_argument("--log-dir", default=None, help="one log file per session here (default: stderr only)")
    p.add_argument("--stop-on-error", action="store_true", help="stop at the first session that exits non-zero")
    p.add_argument("--pycache", default=os.environ.get("PYTHONPYCACHEPREFIX") or str(Path.home() / ".cache/decodegap/pycache"),
                   help="PYTHONPYCACHEPREFIX for the sessions: where an image with no writable __pycache__ keeps compiled "
                   "modules, so only the first session pays for compiling torch and transformers (default: %(default)s)")
    p.add_argument("--cpus", type=int, nargs="+", default=None,
                   help="pin every session to these CPUs (the host side of an eager step is one core's work; "
                   "benchmarks/host_cpu_survey.py finds the steadiest); each record keeps its affinity")
    p.add_argument("measure_args", nargs=argparse.REMAINDER, help="after '--': passed to every measurement")
    args = p.parse_args(argv)
    extra = [a for a in args.measure_args if a != "--"]
    if args.cpus and not set(args.cpus) <= os.sched_getaffinity(0):
        p.error(f"--cpus {args.cpus}: this process may run only on CPUs {sorted(os.sched_getaffinity(0))}")

    start = time.perf_counter()
    # Compiled modules go to the prefix, never beside the sources, so the reason people set
    # PYTHONDONTWRITEBYTECODE (clean trees, read-only images) does not apply; it is lifted for the
    # sessions, which would otherwise each recompile torch and transformers (about 3.5 s on the H200).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": args.pycache}
    pin = (lambda: os.sched_setaffinity(0, set(args.cpus))) if args.cpus else None
    cells = planned(args)
    from decodegap.core import manifest

    listed = set()  # a session a manifest lists is recorded, whether or not its file is on this machine
    for tree in [args.root, *args.listed_in]:
        listed |= set(manifest.read(tree))
    todo = [c for c in cells if not paths.session_path(root=args.root, **c).exists() and paths.session_path(**c).as_posix() not in listed]
    print(f"[batch] {len(cells)} sessions planned, {len(cells) - len(todo)} already recorded, {len(todo)} to measure", flush=True)
    failures = done = 0
    for i, cell in enumerate(todo, 1):
        elapsed = time.perf_counter() - start
        late = args.deadline_at is not None and time.time() > args.deadline_at - args.reserve_s
        if late or (args.deadline_s is not None and elapsed > args.deadline_s - args.reserve_s):
            print(f"[batch] deadline: {len(todo) - i + 1} sessions left for a later call", flush=True)
            break
        cmd = [sys.executable, "-m", "decodegap.measure", "--root", args.root]
        for key in ("gpu", "model", "ctx", "attn", "quant", "mode", "session"):
            cmd += [f"--{key}", str(cell[key])]
        cmd += extra
        label = f"{cell['model']} ctx{cell['ctx']} {cell['attn']} {cell['quant']} {cell['mode']} s{cell['session']:02d}"
        t = time.perf_counter()
        if args.log_dir:
            log = Path(args.log_dir) / (paths.session_path(**cell).relative_to(paths.RAW_ROOT).as_posix().replace("/", "__") + ".log")
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w") as f:
                rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=pin)
            tail = log.read_text().strip().splitlines()[-1:] or [""]
        else:
            rc, tail = subprocess.call(cmd, env=env, preexec_fn=pin), [""]
        done += 1
        print(f"[batch] {i}/{len(todo)} {label}: rc={rc} in {time.perf_counter() - t:.1f} s  {tail[0][:160]}", flush=True)
        if rc != 0:
            failures += 1
            if args.stop_on_error:
                break
    print(f"[batch] measured {done}, failed {failures}, {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
