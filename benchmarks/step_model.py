"""Benchmark the step model (decodegap.analysis.stepmodel) on the measured H200 cells: fit it on
every cell, then hold out one context at a time and one model card at a time, refit on the rest
and predict the held-out cells. Target: the median |relative error| of the held-out predictions
stays under 10 % in every mode (eager, static, graphed), under both ways of holding out. Prints
the observations used (scope, sessions, imputed kernel counts), the fitted coefficients with
their units, the in-sample error, the table of held-out errors per mode, the held-out cells over
10 %, the simpler forms the model replaced (the issue's additive (W + K) / B_eff form first) and
PASS/FAIL. Needs results/stats/ built (`snakemake -q --cores 2 report/paper_tables.tex`).

    python benchmarks/step_model.py [--stats results/stats/h200] [--limit 0.10]
"""

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import numpy as np

from decodegap.analysis import stepmodel
from decodegap.analysis.tables import load_stats
from decodegap.core.config import load_models

SCHEMES = (("ctx", "leave one context out"), ("model", "leave one card out"))
VARIANTS = (  # (label, fit keywords), one change at a time from the first form to the model
    ("issue's form: additive, (W+K)/B_eff + kernels*c_dev + launches*c_launch",
     dict(form="additive", bytes="W+K", terms=("B_eff", "c_kernel_device", "c_launch_host"))),
    ("+ c_attn_host (eager)", dict(form="additive", bytes="W+K", terms=("B_eff", "c_kernel_device", "c_launch_host", "c_attn_host"))),
    ("+ op by op = max(device, host)", dict(form="overlap", bytes="W+K")),
    ("+ weights read / B_eff, KV per query head / B_attn  [the model]", dict(form="overlap")),
    ("the model without c_attn_host", dict(form="overlap", terms=("B_eff", "B_attn", "c_kernel_device", "c_launch_host"))),
    ("the model, additive instead of max", dict(form="additive")),
)


def fmt_value(name: str, c: dict, b_peak: float) -> str:
    v = c["value"]
    if v is None:
        return "not fitted"
    if c["unit"] == "bytes/s":
        return "inf (cost 0)" if v == float("inf") else f"{v:.3e} bytes/s = {v / 1e12:.2f} TB/s ({v / b_peak:.0%} of B_peak)"
    return f"{v:.2f} us"


def pct(x: float) -> str:
    return f"{100 * x:5.1f} %"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stats", default=str(REPO / "results" / "stats" / "h200"), help="folder searched for stats.json")
    ap.add_argument("--limit", type=float, default=0.10, help="pass when every mode's median |relative error| is under this")
    args = ap.parse_args()
    files = sorted(Path(args.stats).rglob("stats.json"))
    if not files:
        sys.exit(f"no stats.json under {args.stats}: run `snakemake -q --cores 2 report/paper_tables.tex` first")
    obs = stepmodel.collect(load_stats(files), load_models())
    b_peak = obs[0]["b_peak_Bps"]

    print(f"{len(files)} stats files under {Path(args.stats).resolve().relative_to(REPO) if Path(args.stats).resolve().is_relative_to(REPO) else args.stats}"
          f" -> {len(obs)} observations (one per model, ctx, mode)")
    for mode in stepmodel.MODES:
        sel = [o for o in obs if o["mode"] == mode]
        scopes = {s: sum(o["scope"] == s for o in sel) for s in ("host_nominal", "valid", "all")}
        print(f"  {mode:8s} {len(sel):2d}: scope {', '.join(f'{k} {v}' for k, v in scopes.items() if v)};"
              f" kernels imputed from another cell: {sum(o['kernels_imputed'] for o in sel)}")

    model = stepmodel.fit(obs)
    print(f"\nfitted on all {model['n_rows']} observations (non-negative least squares on relative error;"
          f" {model['iterations']} passes to settle which op-by-op rows are host bound):")
    folds = {g: stepmodel.loo(obs, g) for g, _ in SCHEMES}
    for name, c in model["coefficients"].items():
        spread = []
        for g, _ in SCHEMES:
            vals = [f["coefficients"][name]["value"] for f in folds[g]["fits"].values() if f["coefficients"][name]["value"] is not None]
            scale = 1e12 if c["unit"] == "bytes/s" else 1.0
            spread.append(f"{min(vals) / scale:.2f}-{max(vals) / scale:.2f}")
        unit = "TB/s" if c["unit"] == "bytes/s" else "us"
        print(f"  {name:16s} = {fmt_value(name, c, b_peak):52s} {c['meaning']}; held-out fits {unit}: ctx {spread[0]}, card {spread[1]}")
    if model["unfit"]:
        print("  not fitted: " + "; ".join(f"{k}: {v}" for k, v in model["unfit"].items()))
    if model["skipped"]:
        print("  skipped: " + "; ".join(f"{'/'.join(map(str, k))}: {why}" for k, why in model["skipped"]))
    host = [k for k, b in model["bound"].items() if b == "host"]
    print(f"  op-by-op rows host bound: {len(host)} of {len(model['bound'])}")

    ins = stepmodel.summary(stepmodel.in_sample(model, obs))
    print("\n|relative error| = |predicted / observed - 1|, median and max over the cells of each mode")
    header = f"  {'mode':8s} {'n':>3s}  {'in sample':>17s}"
    for _, label in SCHEMES:
        header += f"  {label:>23s}"
    print(header)
    print(f"  {'':8s} {'':3s}  {'median':>8s} {'max':>8s}" + f"  {'median':>11s} {'max':>11s}" * len(SCHEMES))
    ok = True
    for mode in [*stepmodel.MODES, "all"]:
        line = f"  {mode:8s} {ins[mode]['n']:3d}  {pct(ins[mode]['median_abs']):>8s} {pct(ins[mode]['max_abs']):>8s}"
        for g, _ in SCHEMES:
            s = folds[g]["summary"][mode]
            line += f"  {pct(s['median_abs']):>11s} {pct(s['max_abs']):>11s}"
            ok &= s["median_abs"] < args.limit
        print(line)

    print(f"\nheld-out cells over {args.limit:.0%} (where the model fails):")
    worst = sorted(((g, r) for g, _ in SCHEMES for r in folds[g]["rows"] if abs(r["rel_err"]) > args.limit),
                   key=lambda gr: -abs(gr[1]["rel_err"]))
    for g, r in worst:
        print(f"  {r['model']:16s} ctx {r['ctx']:5d} {r['mode']:8s} held out by {'ctx' if g == 'ctx' else 'card'}:"
              f" predicted {r['predicted_ms']:6.2f} ms, observed {r['observed_ms']:6.2f} ms ({r['rel_err']:+.1%});"
              f" scope {r['scope']}, {r['n_sessions']} session(s)")
    if not worst:
        print("  none")
    eager = [o for o in obs if o["mode"] == "eager"]
    for m in sorted({o["model"] for o in eager}):
        t = [o["median_ms"] for o in eager if o["model"] == m]
        print(f"  eager {m}: observed {min(t):.1f}-{max(t):.1f} ms over ctx (spread {max(t) / min(t) - 1:.0%}); the model's eager time does not depend on ctx")

    print("\nsimpler forms (median |relative error| per mode, eager / static / graphed):")
    for label, kw in VARIANTS:
        parts = []
        for g, name in SCHEMES:
            s = stepmodel.loo(obs, g, **kw)["summary"]
            parts.append(f"{name.split()[-2]} " + " / ".join(pct(s[m]["median_abs"]).strip() for m in stepmodel.MODES))
        print(f"  {label:72s} {'; '.join(parts)}")

    worst_mode = max(((g, m) for g, _ in SCHEMES for m in stepmodel.MODES), key=lambda gm: folds[gm[0]]["summary"][gm[1]]["median_abs"])
    w = folds[worst_mode[0]]["summary"][worst_mode[1]]["median_abs"]
    print(f"\n{'PASS' if ok else 'FAIL'}: the largest held-out median |relative error| is {w:.1%} ({worst_mode[1]},"
          f" {dict(SCHEMES)[worst_mode[0]]}), {'under' if ok else 'not under'} {args.limit:.0%}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
