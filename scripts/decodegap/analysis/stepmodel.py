"""A predictive model of one batch-1 decode step, from its parts, fitted on measured cells.

Observations (`collect`). One per (gpu, model, ctx, attn, quant, mode), the mode being the arm: an
A/B cell's arms and a single-mode cell of the same mode are candidates for one observation. Its
time is the arm's median ms/step in the first scope that has it, in this order:

    eager, static   host_nominal, completed   (op-by-op steps follow the host core's speed: the
                                               host_nominal scope keeps the steps at full speed)
    graphed         completed

and, among candidates of that scope, the one with the most sessions (then: with a profiler pass).
`scope` says which scope was used. Beside the time each observation carries:

    weight_bytes W, kv_bytes K, bytes = W + K     as measured (the floor's (W + K) / B_peak)
    weight_bytes_read                             W without the embedding table: a decode step
                                                  gathers one row of it, it does not stream it
    q_per_kv                                      query heads per KV head (model card; 1 without one)
    kernels_per_step                              from the cell's untimed profiler pass; where the
                                                  cell has none, the same model's count in the same
                                                  mode from another cell (it does not depend on
                                                  ctx): kernels_imputed is then True and
                                                  kernels_source names that cell
    launches_per_step                             host launches: = kernels_per_step op by op, 0 in
                                                  graphed mode (one graph launch, inside the fit's
                                                  device part)
    attention_calls_per_step                      attention ops per step (one per layer): the model
                                                  card's layers, else the profiler's count of
                                                  aten::scaled_dot_product_attention calls
    b_peak_Bps, t_floor_ms, gpu_busy_ms (profiler, diagnostic only)

The model (`fit`, `predict`). Per step, with the coefficients named as they are reported:

    t_device = weight_bytes_read / B_eff
             + kv_bytes * q_per_kv / B_attn
             + kernels_per_step * c_kernel_device
    t_host   = launches_per_step * c_launch_host                        (static and eager)
             + attention_calls_per_step * c_attn_host                   (eager only)

    graphed     t = t_device
    op by op    t = max(t_device, t_host)       form="overlap" (default): the host queues kernels
                                                ahead of the device, so the slower side sets the pace
                t = t_device + t_host           form="additive": the issue's first form, kept to
                                                show why it fails (it adds device time that a
                                                host-bound step hides)

    B_eff            bytes/s  effective bandwidth of the weight stream (GEMV kernels at batch 1)
    B_attn           bytes/s  effective bandwidth of the attention's KV reads, counting the KV once
                              per query head: the decode attention reads (or repeats) each KV head
                              for each of its q_per_kv query heads
    c_kernel_device  us       device time per kernel beyond its bytes: launch latency inside the
                              graph, tails, and the gaps between kernels
    c_launch_host    us       host CPU time per kernel launched op by op (Python, dispatcher,
                              launch): the static step's pace
    c_attn_host      us       extra host CPU time per attention call with the dynamic KV cache
                              (eager): the profiler puts 1.5-2 ms per call in
                              aten::_cudnn_attention_forward's own CPU time on the H200 host

`bytes="W+K"` replaces the two byte terms by the floor's bytes, (W + K) / B_eff (the issue's first
form). Coefficients are per GPU (and per host): `fit` refuses observations of several GPUs.

Fit. Non-negative least squares on relative error: each row, features and observed time alike, is
divided by the observed time, so a 8 ms and a 60 ms cell weigh alike. In the overlap form each
op-by-op row is first taken as host bound, then re-assigned to the larger of its predicted device
and host parts and refitted, until no row changes side. A coefficient whose column is zero in every
row of the fit (e.g. no eager row: c_attn_host) is not fitted: the result names it and why in
`unfit`; a prediction then leaves its term out (a count term) or uses the datasheet B_peak (a
bandwidth), so it stays finite, and names the terms it lacked (`partial`).

Held out (`loo`). Leave one group out (group="ctx": one context; group="model": one model card),
fit on the rest, predict the held-out rows: predicted, observed, relative error = predicted /
observed - 1; `summary` gives per mode (and "all") the median and max |relative error|.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from scipy.optimize import nnls

from decodegap.analysis.anatomy import ATTENTION_OPS
from decodegap.core.cells import PAPER_MODES as MODES  # the fit's terms are the transformers step's: compiled and fused run other kernels
from decodegap.core.cells import OP_BY_OP

SCOPE_ORDER = {"eager": ("host_nominal", "completed"), "static": ("host_nominal", "completed"),
               "graphed": ("completed",)}
KEY_FIELDS = ("gpu", "model", "ctx", "attn", "quant", "mode")

DEVICE_TERMS = ("B_eff", "B_attn", "c_kernel_device")
HOST_TERMS = ("c_launch_host", "c_attn_host")
TERMS = DEVICE_TERMS + HOST_TERMS
BANDWIDTHS = ("B_eff", "B_attn")
UNITS = {"B_eff": "bytes/s", "B_attn": "bytes/s", "c_kernel_device": "us", "c_launch_host": "us", "c_attn_host": "us"}
MEANING = {
    "B_eff": "effective bandwidth of the weight stream",
    "B_attn": "effective bandwidth of attention's KV reads (KV once per query head)",
    "c_kernel_device": "device time per kernel beyond its bytes",
    "c_launch_host": "host time per op-by-op kernel launch",
    "c_attn_host": "extra host time per attention call, dynamic cache (eager)",
}
WHO_FEEDS = {"B_eff": "graphed (or device-bound op-by-op)", "B_attn": "graphed (or device-bound op-by-op) with a KV cache",
             "c_kernel_device": "graphed (or device-bound op-by-op)", "c_launch_host": "static or eager",
             "c_attn_host": "eager"}


def key(obs: dict) -> tuple:
    return tuple(obs[f] for f in KEY_FIELDS)


# --- observations ------------------------------------------------------------------------------

def _card_numbers(card) -> dict | None:
    """layers and query heads per KV head from a model card (a ModelCard, or a mapping with an
    `architecture` mapping, or the architecture mapping itself)."""
    if card is None:
        return None
    arch = getattr(card, "architecture", None)
    if arch is None:
        arch = card.get("architecture", card) if isinstance(card, dict) else None
    if not arch:
        return None
    return {"layers": int(arch["num_hidden_layers"]),
            "q_per_kv": arch["num_attention_heads"] / arch["num_key_value_heads"]}


def _attention_calls(anatomy: dict | None) -> float | None:
    if not anatomy:
        return None
    hits = [o["calls_per_step"] for o in anatomy.get("host_ops") or [] if o["name"] in ATTENTION_OPS]
    return hits[0] if hits else None


def _candidates(stats_list: list[dict]):
    """Every (mode, scope) arm of every cell, with the cell's anatomy for that arm from any scope."""
    for s in stats_list:
        cell = s["cell"]
        scopes = {sc: ((s.get(sc) or {}).get("arms") or {}) for sc in ("host_nominal", "completed")}
        for arm in MODES:
            any_anatomy = next((a[arm]["anatomy"] for a in scopes.values() if a.get(arm) and a[arm].get("anatomy")), None)
            for scope, arms in scopes.items():
                a = arms.get(arm)
                if not a or a.get("median_ms") is None:
                    continue
                yield {"gpu": cell["gpu"], "model": cell["model"], "ctx": int(cell["ctx"]), "attn": cell["attn"],
                       "quant": cell["quant"], "mode": arm, "cell_mode": cell["mode"], "scope": scope,
                       "stats_file": s.get("_file"), "arm": a, "anatomy": a.get("anatomy") or any_anatomy}


def collect(stats_list: list[dict], cards: dict | None = None) -> list[dict]:
    """One observation per (gpu, model, ctx, attn, quant, mode); see the module docstring.

    stats_list: stats.json contents (with "_file" where known). cards: {model: model card}
    (decodegap.core.config.load_models(), or mappings with the architecture keys) for layers and
    query heads per KV head; without a card, q_per_kv is 1 (q_per_kv_assumed) and layers come
    from the profiler's attention calls."""
    cards = cards or {}
    best: dict[tuple, dict] = {}
    for c in _candidates(stats_list):
        order = SCOPE_ORDER[c["mode"]]
        if c["scope"] not in order:
            continue
        rank = (-order.index(c["scope"]), c["arm"].get("n_sessions") or 0, c["anatomy"] is not None)
        k = key(c)
        if k not in best or rank > best[k][0]:
            best[k] = (rank, c)

    # kernel counts and attention calls per (gpu, model, attn, quant, mode), from any cell's profiler pass
    counts: dict[tuple, list] = {}
    attn_calls: dict[tuple, list] = {}
    for c in _candidates(stats_list):
        an = c["anatomy"]
        if an and an.get("kernels_per_step") is not None:
            counts.setdefault(key(c)[:2] + key(c)[3:], []).append((an["kernels_per_step"], _where(c)))
        n = _attention_calls(an)
        if n is not None:
            attn_calls.setdefault((c["gpu"], c["model"]), []).append(n)

    out = []
    for k, (_, c) in sorted(best.items()):
        a, an = c["arm"], c["anatomy"]
        numbers = _card_numbers(cards.get(c["model"]))
        kernels, source, imputed = None, None, False
        if an and an.get("kernels_per_step") is not None:
            kernels, source = float(an["kernels_per_step"]), _where(c)
        elif counts.get(k[:2] + k[3:]):
            found = counts[k[:2] + k[3:]]
            value = Counter(v for v, _ in found).most_common(1)[0][0]
            kernels, source, imputed = float(value), next(w for v, w in found if v == value), True
        if numbers:
            layers = numbers["layers"]
        elif attn_calls.get((c["gpu"], c["model"])):
            layers = Counter(attn_calls[(c["gpu"], c["model"])]).most_common(1)[0][0]
        else:
            layers = None
        w, kv = a["weight_bytes"], a["kv_bytes"]
        w_read = a.get("weight_bytes_no_embedding", w)
        out.append({
            **{f: c[f] for f in KEY_FIELDS}, "cell_mode": c["cell_mode"], "scope": c["scope"],
            "n_sessions": a.get("n_sessions"), "stats_file": c["stats_file"], "median_ms": float(a["median_ms"]),
            "weight_bytes": w, "weight_bytes_read": w_read, "kv_bytes": kv, "bytes": w + kv,
            "q_per_kv": numbers["q_per_kv"] if numbers else 1.0, "q_per_kv_assumed": numbers is None,
            "kernels_per_step": kernels, "kernels_imputed": imputed, "kernels_source": source,
            "launches_per_step": (kernels if c["mode"] in OP_BY_OP else 0.0) if kernels is not None else None,
            "attention_calls_per_step": None if layers is None else float(layers),
            "b_peak_Bps": a["b_peak_Bps"], "t_floor_ms": a.get("t_floor_ms"),
            "gpu_busy_ms": (an or {}).get("gpu_busy_ms_per_step"),
        })
    return out


def _where(c: dict) -> str:
    return f"{c['model']}/ctx{c['ctx']}/{c['attn']}_{c['quant']}_{c['cell_mode']}:{c['mode']}"


# --- features ------------------------------------------------------------------------------------

def _features(obs: dict, bytes_: str) -> dict[str, float] | None:
    """Per-term features in base units (bytes, counts); None where the observation lacks one."""
    if obs.get("kernels_per_step") is None:
        return None
    eager = obs["mode"] == "eager"
    if eager and obs.get("attention_calls_per_step") is None:
        return None
    if bytes_ == "W+K":
        b_eff, b_attn = float(obs["weight_bytes"] + obs["kv_bytes"]), 0.0
    else:
        b_eff, b_attn = float(obs["weight_bytes_read"]), float(obs["kv_bytes"] * obs["q_per_kv"])
    return {"B_eff": b_eff, "B_attn": b_attn, "c_kernel_device": float(obs["kernels_per_step"]),
            "c_launch_host": float(obs["launches_per_step"]),
            "c_attn_host": float(obs["attention_calls_per_step"]) if eager else 0.0}


def _why_missing(obs: dict) -> str:
    if obs.get("kernels_per_step") is None:
        return "no kernel count (no profiler pass for this model and mode)"
    return "no attention call count (no model card and no profiler pass)"


def _split(feat: dict, raw: dict, fallback_inv_bw: float) -> tuple[float, float, list]:
    """(t_device_s, t_host_s, terms lacking a fit) from features and raw per-unit coefficients."""
    lacking, dev, host = [], 0.0, 0.0
    for t in TERMS:
        if feat[t] == 0.0:
            continue
        c = raw.get(t)
        if c is None:
            lacking.append(t)
            c = fallback_inv_bw if t in BANDWIDTHS else 0.0
        if t in DEVICE_TERMS:
            dev += c * feat[t]
        else:
            host += c * feat[t]
    return dev, host, lacking


# --- fit -----------------------------------------------------------------------------------------

def fit(observations: list[dict], form: str = "overlap", bytes: str = "split", terms: tuple = TERMS,
        max_iter: int = 50) -> dict:
    """Fit the model's coefficients on observations of one GPU (see the module docstring).

    Returns {"coefficients": {term: {"value", "unit", "meaning", "fitted"}}, "raw": {term: s per
    unit or None}, "unfit": {term: why}, "bound": {key: "device"|"host"} (op-by-op rows),
    "skipped": [(key, why)], "n_rows", "form", "bytes", "terms", "iterations", "converged"}.
    value is in bytes/s for a bandwidth (inf where its fitted cost is 0), us for a c_* term; None
    where unfit."""
    if form not in ("overlap", "additive"):
        raise ValueError(f"form must be 'overlap' or 'additive', got {form!r}")
    if bytes not in ("split", "W+K"):
        raise ValueError(f"bytes must be 'split' or 'W+K', got {bytes!r}")
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown terms {sorted(unknown)} (known: {TERMS})")
    gpus = sorted({o["gpu"] for o in observations})
    if len(gpus) > 1:
        raise ValueError(f"observations of several GPUs {gpus}: fit each GPU on its own (its B_eff and costs are its own)")
    terms = tuple(t for t in TERMS if t in terms and not (bytes == "W+K" and t == "B_attn"))

    rows, skipped = [], []
    for o in observations:
        f = _features(o, bytes)
        if f is None:
            skipped.append((key(o), _why_missing(o)))
        elif not (o["median_ms"] > 0 and math.isfinite(o["median_ms"])):
            skipped.append((key(o), f"observed time {o['median_ms']!r} is not a positive number"))
        else:
            rows.append((o, {t: (f[t] if t in terms else 0.0) for t in TERMS}))

    obs_s = np.array([o["median_ms"] * 1e-3 for o, _ in rows])
    feats = np.array([[f[t] for t in TERMS] for _, f in rows]).reshape(len(rows), len(TERMS))
    dev_cols = np.array([t in DEVICE_TERMS for t in TERMS])
    opbyop = np.array([o["mode"] in OP_BY_OP for o, _ in rows], dtype=bool)
    host_bound = opbyop.copy()  # start: every op-by-op row host bound

    def solve(host_bound):
        mask = np.ones_like(feats)
        if form == "overlap":  # a host-bound row informs only host terms; a device-bound one only device terms
            mask[host_bound] = ~dev_cols
            mask[opbyop & ~host_bound] = dev_cols
        else:
            mask[~opbyop] = dev_cols
        X = feats * mask
        A = X / obs_s[:, None] if len(rows) else X
        active = [j for j in range(len(TERMS)) if len(rows) and np.any(A[:, j] != 0)]
        coef = np.full(len(TERMS), np.nan)
        if active:
            scale = np.abs(A[:, active]).max(axis=0)
            sol, _ = nnls(A[:, active] / scale, np.ones(len(rows)), maxiter=50 * len(active))
            coef[active] = sol / scale
        return coef

    def parts(coef):
        c = np.nan_to_num(coef)
        return feats[:, dev_cols] @ c[dev_cols], feats[:, ~dev_cols] @ c[~dev_cols]

    def loss(coef):
        dev, host = parts(coef)
        pred = np.where(opbyop, np.maximum(dev, host) if form == "overlap" else dev + host, dev)
        return float(np.sum((pred / obs_s - 1) ** 2)) if len(rows) else 0.0

    coef = solve(host_bound)
    iterations, converged = 1, form == "additive"
    best = (loss(coef), coef, host_bound)
    if form == "overlap":
        for iterations in range(2, max_iter + 1):
            dev, host = parts(coef)
            new = opbyop & (host >= dev)
            if np.array_equal(new, host_bound):
                converged = True
                break
            host_bound = new
            coef = solve(host_bound)
            if loss(coef) < best[0]:
                best = (loss(coef), coef, host_bound)
        if not converged:
            _, coef, host_bound = best

    raw, unfit, out = {}, {}, {}
    for j, t in enumerate(TERMS):
        if t not in terms:
            continue
        if np.isnan(coef[j]):
            raw[t] = None
            unfit[t] = f"no {WHO_FEEDS[t]} rows in the fit" + ("; predictions use the datasheet B_peak" if t in BANDWIDTHS else "; predictions leave the term out")
            value = None
        else:
            raw[t] = float(coef[j])
            value = (math.inf if coef[j] == 0 else 1.0 / coef[j]) if t in BANDWIDTHS else coef[j] * 1e6
        out[t] = {"value": value, "unit": UNITS[t], "meaning": MEANING[t], "fitted": t not in unfit}
    bound = {key(o): ("host" if hb else "device") for (o, _), hb, ob in zip(rows, host_bound, opbyop) if ob}
    return {"coefficients": out, "raw": raw, "unfit": unfit, "bound": bound, "skipped": skipped,
            "n_rows": len(rows), "form": form, "bytes": bytes, "terms": terms,
            "iterations": iterations, "converged": converged, "rel_sse": best[0] if form == "overlap" else loss(coef)}


def predict(model: dict, obs: dict) -> dict:
    """{"predicted_ms", "device_ms", "host_ms", "bound", "partial": [terms without a fit]}; predicted_ms
    is None (with "why") where the observation lacks a feature."""
    f = _features(obs, model["bytes"])
    if f is None:
        return {"predicted_ms": None, "device_ms": None, "host_ms": None, "bound": None, "partial": [], "why": _why_missing(obs)}
    f = {t: (v if t in model["terms"] else 0.0) for t, v in f.items()}
    dev, host, lacking = _split(f, model["raw"], 1.0 / obs["b_peak_Bps"])
    if obs["mode"] not in OP_BY_OP:
        t, bound = dev, "device"
    elif model["form"] == "overlap":
        t, bound = max(dev, host), ("host" if host >= dev else "device")
    else:
        t, bound = dev + host, "sum"
    return {"predicted_ms": t * 1e3, "device_ms": dev * 1e3, "host_ms": host * 1e3, "bound": bound, "partial": lacking}


# --- held out ------------------------------------------------------------------------------------

def loo(observations: list[dict], group: str = "ctx", **fit_kwargs) -> dict:
    """Leave one `group` value out at a time ("ctx" or "model", or any observation field), fit on
    the rest, predict the held-out rows. Returns {"group", "rows": [per held-out observation: its
    key fields, held_out, predicted_ms, observed_ms, rel_err, bound, partial, unfit], "summary":
    summary(rows), "skipped": [(key, why)], "fits": {held-out value: fit(rest)}}."""
    rows, skipped, fits = [], [], {}
    for g in sorted({o[group] for o in observations}, key=str):
        train = [o for o in observations if o[group] != g]
        model = fits[g] = fit(train, **fit_kwargs)
        for o in observations:
            if o[group] != g:
                continue
            p = predict(model, o)
            if p["predicted_ms"] is None:
                skipped.append((key(o), p["why"]))
                continue
            rows.append({**{f: o[f] for f in KEY_FIELDS}, "held_out": g, "scope": o["scope"], "n_sessions": o["n_sessions"],
                         "kernels_imputed": o["kernels_imputed"], "predicted_ms": p["predicted_ms"],
                         "observed_ms": o["median_ms"], "rel_err": p["predicted_ms"] / o["median_ms"] - 1.0,
                         "bound": p["bound"], "partial": p["partial"], "unfit": dict(model["unfit"])})
    return {"group": group, "rows": rows, "summary": summary(rows), "skipped": skipped, "fits": fits}


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per mode present (and "all"): n, median and max |relative error|, the worst row's key."""
    out = {}
    for mode in [m for m in MODES if any(r["mode"] == m for r in rows)] + ["all"]:
        sel = [r for r in rows if mode == "all" or r["mode"] == mode]
        if not sel:
            continue
        errs = np.abs([r["rel_err"] for r in sel])
        worst = sel[int(np.argmax(errs))]
        out[mode] = {"n": len(sel), "median_abs": float(np.median(errs)), "max_abs": float(errs.max()),
                     "worst": key(worst)}
    return out


def in_sample(model: dict, observations: list[dict]) -> list[dict]:
    """Each observation with the fitted model's prediction and relative error (no holding out)."""
    out = []
    for o in observations:
        p = predict(model, o)
        if p["predicted_ms"] is not None:
            out.append({**{f: o[f] for f in KEY_FIELDS}, "observed_ms": o["median_ms"], **p,
                        "rel_err": p["predicted_ms"] / o["median_ms"] - 1.0})
    return out
