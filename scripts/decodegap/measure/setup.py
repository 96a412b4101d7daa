"""The environment stage: once per GPU type, before its sessions, on that GPU type.

    python -m decodegap.measure.setup --gpu h200 --attn sdpa sdpa-flash --quant bf16 \
        --out-dir results/environment

It writes a new record, results/environment/<gpu>@<UTC time>.json, beside the GPU type's earlier
ones (never replacing one: sessions name theirs by path and sha256), and lists it in the manifest.

It records what the measurement jobs of that GPU type will run under, and decides which of the
configured paths can run there at all:

- versions: driver, CUDA, torch, transformers, and each path's package;
- for every configured attention path, a tiny functional check of its kernel at decode shape (one
  query token against a GQA KV of CHECK_KV_TOKENS tokens), in the two forms a decode step calls it:
  `dynamic` (the dynamic cache: no mask, GQA in the kernel, what eager steps call) and `static` (the
  static cache: a boolean mask over the preallocated cache, KV heads repeated, what static and
  graphed steps call). Each form must run and match a float32 reference, and then run two decode
  steps of a tiny GQA card through the sessions' own decoders (check_decode), or it gets the reason;
- for every configured weight path, a batch-1 GEMV through its kernel against the same reference;
- JIT kernels: the compile caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, TORCH_EXTENSIONS_DIR)
  point into --cache-dir before torch loads, a path with a `build` step compiles there, and every
  measurement job of the GPU type is given the same caches (environment_variables()), so a kernel
  is compiled once per GPU type, not once per session.

A measurement job reads the record (`python -m decodegap.measure --environment ...`): a cell whose
path the record rules out becomes an invalid session with the record's reason, without touching
the GPU (and the workflow gives its job no GPU: workflow/rules/measure.smk).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

from decodegap.core.config import REPO_ROOT
from decodegap.core.errors import DecodegapError, SessionExists
from decodegap.core.paths import ENVIRONMENT_STAMPED, RECEIPT_SCHEMA
from decodegap.measure.failures import EXIT_BAD_INPUT, EXIT_EXISTS, EXIT_RECORDED, EXIT_UNEXPECTED, unsupported

SCHEMA = "decodegap.environment/1"
REQUIREMENTS = REPO_ROOT / "envs" / "measure-requirements.txt"
# Decode shape of the kernel checks: 1 query token, this many KV tokens; odd on purpose, as a real
# cache's length mostly is (ctx + steps so far): a kernel that needs aligned lengths fails here too.
CHECK_KV_TOKENS = 515
CHECK_LAYOUT = "28/4/128"  # query heads/KV heads/head dim: Qwen-2.5-7B's, when no card's layout is given
CACHE_VARIABLES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "TORCH_EXTENSIONS_DIR": "torch_extensions",
                   "FLASHINFER_WORKSPACE_BASE": "flashinfer"}  # FlashInfer JIT-builds its kernels under <base>/.cache/flashinfer
# The attention call each arm makes: the layer microbenchmark calls the dynamic-cache form.
FORMS_OF_MODE = {"eager": ("dynamic",), "static": ("static",), "graphed": ("static",), "compiled": ("static",), "fused": ("static",), "generate": ("static",), "llamacpp": (), "layer-op": ("dynamic",), "layer-graphed": ("dynamic",)}


_T0 = time.monotonic()


def log(msg: str) -> None:
    # seconds since the stage began: which path's check or build takes the device time
    print(f"[environment +{time.monotonic() - _T0:.0f} s] {msg}", file=sys.stderr, flush=True)


def environment_variables(cache_dir: str | Path) -> dict[str, str]:
    """The compile caches of one GPU type: set before torch loads, in the stage and in every session."""
    return {var: str(Path(cache_dir) / sub) for var, sub in CACHE_VARIABLES.items()}


def definition_sha256(attn: list[str], quant: list[str], layouts=(CHECK_LAYOUT,)) -> str:
    """What the environment is defined by: the pinned measure packages, the configured paths and
    the head layouts they are checked at."""
    h = hashlib.sha256(REQUIREMENTS.read_bytes())
    h.update(json.dumps({"attn": sorted(attn), "quant": sorted(quant), "layouts": sorted(layouts)}).encode())
    return h.hexdigest()


def forms_needed(mode: str) -> tuple[str, ...]:
    from decodegap.core.cells import arms_of

    return tuple(dict.fromkeys(f for arm in arms_of(mode) for f in FORMS_OF_MODE[arm]))


def ruled_out(record: dict, attn: str, quant: str, mode: str, layout: str | None = None) -> str | None:
    """Why a cell cannot run under this environment record, or None. A kernel may take one head
    layout and not another (FlashInfer's decode has no kernel for 7 query heads per KV head): with
    `layout` (ModelCard.attention_layout), the verdict is that layout's. A path or layout the record never checked
    is not ruled out here: the session finds out for itself."""
    a = (record.get("attention") or {}).get(attn)
    if a:
        for form in forms_needed(mode):
            check = a["checks"].get(form)
            if not check:
                continue
            by_layout = check.get("layouts") or {}
            if layout is not None and layout in by_layout:
                reason = by_layout[layout]
            elif by_layout and not all(by_layout.values()):
                reason = None  # a layout never checked, and the path runs at some: the session finds out
            else:
                reason = None if check["runs"] else check["reason"]  # fails at every layout checked
            if reason:
                return f"attention path {attn} cannot run its {form}-cache decode call on {record['gpu']}: {reason}"
    w = (record.get("weights") or {}).get(quant)
    if w and not w["runs"]:
        return f"weight path {quant} cannot run on {record['gpu']}: {w['reason']}"
    return None


def read_record(path: str | Path) -> dict:
    """An environment record (or the stage's receipt naming one), checked enough to be trusted: its
    schema tag and its fields."""
    from decodegap.core.errors import ConfigError
    from decodegap.core.paths import record_of

    try:
        path = record_of(path)
        with open(path) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable environment record: {exc}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise ConfigError(f"{path}: not a decodegap environment record (schema {SCHEMA})")
    missing = [k for k in ("gpu", "attention", "weights", "libraries", "definition_sha256") if k not in record]
    if missing:
        raise ConfigError(f"{path}: environment record lacks {', '.join(missing)}")
    return record


class StageError(RuntimeError):
    """The stage could not decide: nothing is recorded."""


def _verdict(exc: BaseException, what: str, package: str = "torch") -> str:
    """The reason a path cannot run, or StageError when the failure says nothing about the path.
    A path from its own package (FlashInfer, flash-attn) whose kernel fails to build or run for
    this torch and CUDA cannot run here: that is the finding, unless the device itself failed (out
    of memory, a CUDA error), which says nothing about the path."""
    if unsupported(exc):
        return _error_text(exc)
    device_failure = type(exc).__name__ in ("OutOfMemoryError", "AcceleratorError") or "CUDA error" in str(exc)
    our_call = isinstance(exc, (TypeError, AttributeError, NameError))  # how we call it, not what it can do
    if package != "torch" and not device_failure and not our_call:
        return f"{package}'s kernel fails here: {_error_text(exc)}"
    raise StageError(f"{what}: {_error_text(exc)} (not a missing kernel: fix the environment and run the stage again)") from exc


def why_no_kernel(caught) -> str | None:
    """The reason PyTorch gives, as a warning, for a pinned SDPA backend it cannot use: the warning
    that names the constraint ("... require query, key and value to have the same num_heads"), not
    the generic "... kernel not used because:" lines around it."""
    for w in caught:
        text = str(w.message).split(" (Triggered internally")[0].strip()
        if text and "not used because" not in text and "has been runtime disabled" not in text:
            return text
    return None


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def check_attention(path, device: str, dtype, layouts=(CHECK_LAYOUT,)) -> dict[str, dict]:
    """Both decode-shaped calls of one attention path, for each head layout ("28/4/128": query
    heads/KV heads/head dim): runs (and its error against float32), or why not. A form runs when
    it runs for every layout; `layouts` keeps each layout's reason (None: runs)."""
    why = path.unavailable(device)
    if why:
        return {form: {"runs": False, "reason": why, "max_abs_err": None, "layouts": {lay: why for lay in layouts}}
                for form in ("dynamic", "static")}
    per_layout = {lay: _check_layout(path, device, dtype, *map(int, lay.split("/"))) for lay in layouts}
    out = {}
    for form in ("dynamic", "static"):
        results = {lay: r[form] for lay, r in per_layout.items()}
        errs = [r["max_abs_err"] for r in results.values() if r.get("max_abs_err") is not None]
        by_layout = {lay: r["reason"] for lay, r in results.items()}
        out[form] = {**form_verdict(by_layout), "max_abs_err": max(errs) if errs else None, "layouts": by_layout}
        if any(r.get("checked") for r in results.values()):
            out[form]["checked"] = next(r["checked"] for r in results.values() if r.get("checked"))
    return out


def form_verdict(by_layout: dict[str, str | None]) -> dict:
    """A call's verdict from its layouts' reasons (None: runs there): it runs when it runs at every
    layout; one reason when all failed alike, else each failing layout's."""
    failing = {lay: r for lay, r in by_layout.items() if r}
    if not failing:
        return {"runs": True, "reason": None}
    reasons = set(failing.values())
    if len(failing) == len(by_layout) and len(reasons) == 1:
        return {"runs": False, "reason": next(iter(reasons))}
    return {"runs": False, "reason": "; ".join(f"layout {lay}: {r}" for lay, r in failing.items())}


def _check_layout(path, device: str, dtype, hq: int, hkv: int, d: int) -> dict[str, dict]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(1, hq, 1, d, generator=g)
    k = torch.randn(1, hkv, CHECK_KV_TOKENS, d, generator=g)
    v = torch.randn(1, hkv, CHECK_KV_TOKENS, d, generator=g)
    k_rep, v_rep = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
    reference = torch.softmax(q @ k_rep.transpose(-1, -2) / d ** 0.5, dim=-1) @ v_rep
    padded = 62  # the static cache's unfilled tail, masked out (577 keys in all: odd, as a real cache's)
    mask = torch.zeros(1, 1, 1, CHECK_KV_TOKENS + padded, dtype=torch.bool)
    mask[..., :CHECK_KV_TOKENS] = True
    pad = torch.zeros(1, hq, padded, d)

    def dynamic():  # the path's own decode call (the layer microbenchmark's), in its layout
        bshd = path.layout == "bshd"
        qq, kk, vv = (x.transpose(1, 2).contiguous() if bshd else x for x in (q, k, v))
        got = path.layer_call()(qq.to(device, dtype), kk.to(device, dtype), vv.to(device, dtype))
        return got.reshape(1, 1, hq, d).transpose(1, 2) if (bshd or got.dim() == 2) else got

    def static():
        kk, vv = (torch.cat([x, pad], dim=2).to(device, dtype) for x in (k_rep, v_rep))
        return F.scaled_dot_product_attention(q.to(device, dtype), kk, vv, attn_mask=mask.to(device))

    tol = 2e-2 if dtype != torch.float32 else 1e-4
    out = {}
    for form, call in (("dynamic", dynamic), ("static", static)):
        if form == "static" and path.sdpa_backend is None and path.name != "sdpa":  # not an SDPA call: only the model shows it
            out[form] = ({"runs": False, "reason": path.static_cache, "max_abs_err": None} if path.static_cache
                         else {"runs": True, "reason": None, "max_abs_err": None, "checked": "in the model only"})
            continue
        try:
            with path.context(), warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                try:
                    got = call().float().cpu()
                except Exception as exc:  # PyTorch's "No available kernel" says why only in a warning
                    why = why_no_kernel(said)
                    raise type(exc)(f"{str(exc).strip()} ({why})" if why else str(exc)) from exc
            if device == "cuda":
                torch.cuda.synchronize()
            err = float((got - reference).abs().max())
            if not torch.isfinite(got).all() or err > tol:
                out[form] = {"runs": False, "reason": f"wrong result: max abs error {err:.3g} against float32 (tolerance {tol})", "max_abs_err": err}
            else:
                out[form] = {"runs": True, "reason": None, "max_abs_err": err}
        except Exception as exc:  # noqa: BLE001 - a missing kernel is the finding; anything else stops the stage
            out[form] = {"runs": False, "reason": _verdict(exc, f"attention {path.name} ({form})", path.package), "max_abs_err": None}
    return out


DECODE_CHECK_CARD = "tiny-llama"  # a GQA card small enough to build in a second on any device
DECODE_CHECK_CTX = 37  # odd, as a real cache's length mostly is


def check_card(layout: str):
    """A two-layer card with a layout's attention (query heads/KV heads/head dim), small elsewhere,
    built from DECODE_CHECK_CARD: what check_decode steps, so a kernel that takes only some head
    dims or group sizes is judged at the layout the sessions use."""
    import dataclasses

    from decodegap.core.config import load_models

    base = load_models()[DECODE_CHECK_CARD]
    hq, hkv, d = map(int, layout.split("/"))
    arch = {**base.architecture, "num_attention_heads": hq, "num_key_value_heads": hkv, "head_dim": d, "hidden_size": hq * d,
            "num_hidden_layers": 2, "intermediate_size": 256}
    return dataclasses.replace(base, key=f"{DECODE_CHECK_CARD}@{layout}", architecture=arch)


def check_decode(path, device: str, layout: str = CHECK_LAYOUT) -> dict[str, dict]:
    """The same two calls through the model the sessions run: a two-layer card with the layout's
    heads (check_card) and this path's attn_implementation, prefilled and stepped by the sessions'
    own decoders (eager: the dynamic cache; static: the static cache), so transformers builds the
    mask and the KV layout exactly as in a session. Catches what the bare kernel call cannot (a
    mask's strides, say)."""
    import torch

    from decodegap.measure.cards import build_model
    from decodegap.measure.modes import make_decoder

    out = {}
    why = path.unavailable(device)
    if why:
        return {form: {"runs": False, "reason": why} for form in ("dynamic", "static")}
    try:
        path.register()
        model = build_model(check_card(layout), device, path.attn_implementation)
    except Exception as exc:  # noqa: BLE001 - a path whose model cannot even be built
        reason = "model build: " + _verdict(exc, f"attention {path.name}: building the check card", path.package)
        return {form: {"runs": False, "reason": reason} for form in ("dynamic", "static")}
    prompt = torch.randint(0, model.config.vocab_size, (1, DECODE_CHECK_CTX), device=device, generator=None)
    for form, mode in (("dynamic", "eager"), ("static", "static")):
        if form == "static" and path.static_cache:
            out[form] = {"runs": False, "reason": path.static_cache}
            continue
        try:
            with torch.inference_mode(), path.context(), warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                try:
                    dec = make_decoder(mode, model, DECODE_CHECK_CTX + 8)
                    dec.prefill(prompt)
                    dec.prepare()
                    for _ in range(2):
                        dec.launch()
                        dec.read_token()
                except RuntimeError as exc:
                    why = why_no_kernel(said)
                    raise RuntimeError(f"{str(exc).strip()} ({why})" if why else str(exc)) from exc
            out[form] = {"runs": True, "reason": None}
        except Exception as exc:  # noqa: BLE001 - a missing kernel is the finding; anything else stops the stage
            out[form] = {"runs": False, "reason": "decode step through the model: " + _verdict(exc, f"attention {path.name} ({form}) in the model", path.package)}
    return out


def package_version(name: str | None) -> str | None:
    from importlib import metadata

    if not name:
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def build_record(gpu_key: str, attn: list[str], quant: list[str], cache_dir: str | Path, gpus_yaml=None,
                 gpu_spec_json: str | None = None, layouts=(CHECK_LAYOUT,)) -> dict:
    import torch

    from decodegap.core.config import load_gpu
    from decodegap.measure.attention import get_attention_path
    from decodegap.measure.environment import boot_id, device_problem, static_environment
    from decodegap.measure.weights import get_weight_path

    gpu = load_gpu(gpu_key, gpus_yaml, gpu_spec_json)  # the user's merged table, as sessions get it
    problem = device_problem(gpu)  # a stage on the wrong machine would record that machine's verdicts
    if problem:
        raise StageError(problem)
    device = "cuda" if gpu.device == "cuda" else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    env = static_environment(device)
    record = {
        "schema": SCHEMA,
        "gpu": gpu_key,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definition_sha256": definition_sha256(attn, quant, layouts),
        "device": device,
        "gpu_device": env["gpu"],
        "driver": (env["gpu"] or {}).get("driver"),
        "cuda": torch.version.cuda,
        "libraries": env["libraries"],
        "python": env["python"],
        "hostname": env["hostname"],
        "boot_id": boot_id(),
        "cache_dir": str(cache_dir),
        "cache_variables": environment_variables(cache_dir),
        "layouts": list(layouts),
        "attention": {},
        "weights": {},
    }
    for name in attn:
        path = get_attention_path(name)
        log(f"attention {name}: checking both decode calls on {device}")
        built = path.build(device) if hasattr(path, "build") else None
        checks = check_attention(path, device, dtype, layouts)
        for lay in layouts:  # both must pass, layout by layout: the kernel alone, and inside the model
            if all(checks[form]["layouts"][lay] for form in checks):
                continue  # the kernel already failed at this layout in both calls
            for form, c in check_decode(path, device, lay).items():
                if checks[form]["layouts"][lay] is None and not c["runs"]:
                    checks[form]["layouts"][lay] = c["reason"]
        for c in checks.values():  # each form again from its layouts
            c.update(form_verdict(c["layouts"]))
        record["attention"][name] = {"package": path.package, "version": package_version(path.package), "built": built,
                                     "checks": checks}
        for form, c in record["attention"][name]["checks"].items():
            log(f"  {form}: " + ("runs" if c["runs"] else f"cannot run: {c['reason']}"))
    for name in quant:
        path = get_weight_path(name)
        log(f"weights {name}: checking a batch-1 GEMV on {device}")
        try:
            built = path.build(device) if hasattr(path, "build") else None
            reason = path.check(device)
        except Exception as exc:  # noqa: BLE001 - a missing kernel is the finding; anything else stops the stage
            built, reason = None, _verdict(exc, f"weights {name}", path.package)
        record["weights"][name] = {"package": path.package, "version": package_version(path.package), "built": built,
                                   "runs": reason is None, "reason": reason}
        log(f"  {'runs' if reason is None else 'cannot run: ' + reason}")
    return record


def tune_fused(record: dict, layouts, budget_s: float) -> dict | None:
    """The fused kernels' launch shapes for this GPU type, which its sessions build their fused step
    with: chosen on this machine for the cards whose head layouts the stage checks
    (decodegap.measure.fused_kernels.tune_launch_shapes), or, with no budget, the kernels' table
    entry for this GPU type (its attention split from this device's multiprocessors). None on a CPU."""
    if record["device"] != "cuda":
        return None
    from decodegap.core.config import load_models
    from decodegap.measure.fused_kernels import resolve
    from decodegap.measure.fused_kernels.tune import tune_launch_shapes

    if budget_s <= 0:
        return resolve(None, "cuda").as_dict()

    cards = [c.architecture for c in load_models().values() if c.attention_layout in layouts]
    # one card per head layout and width: attention is chosen per layout, the GEMVs per width
    cards = sorted({(c["num_attention_heads"], c["hidden_size"]): c for c in cards}.values(), key=lambda a: a["hidden_size"])
    if not cards:
        return None
    log(f"fused kernels: choosing launch shapes for {len(cards)} card(s) in about {budget_s:.0f} s")
    return tune_launch_shapes("cuda", cards, budget_s, log=log)


def shapes_from(record: dict, path: str | Path) -> tuple[dict, dict]:
    """The launch shapes an earlier environment record of this GPU type chose (another machine's stage:
    tuned and refined there), for this machine's sessions, so that a cell's sessions on several machines
    run one set of shapes, as a cluster's GPU type does from its one record: an interval over machines
    then measures the machines, not the stages' choices. Returns (shapes, where they came from: the
    record's path and sha256). Refused, naming the file: a record that is missing or not JSON, of another
    GPU type, without launch shapes (a CPU's), whose shapes do not parse, or whose multiprocessor count
    is not this device's (attention's split is made for it)."""
    from decodegap.core.sources import sha256_file
    from decodegap.measure.fused_kernels import resolve

    path = Path(path)
    theirs = read_record(path)  # a ConfigError naming the file where it is not an environment record
    if theirs["gpu"] != record["gpu"]:
        raise DecodegapError(f"--shapes-from {path}: a record of GPU type {theirs['gpu']!r}, not {record['gpu']!r}: "
                             "launch shapes are chosen per GPU type")
    shapes = theirs.get("launch_shapes")
    if not isinstance(shapes, dict):
        raise DecodegapError(f"--shapes-from {path}: the record has no launch shapes (its stage ran on a CPU)")
    try:
        resolve(shapes, record["device"])
    except ValueError as exc:
        raise DecodegapError(f"--shapes-from {path}: its launch shapes do not parse: {exc}") from None
    mine = (record.get("gpu_device") or {}).get("multiprocessors")
    if record["device"] == "cuda" and shapes.get("sm_count") not in (None, mine):
        raise DecodegapError(f"--shapes-from {path}: its shapes were chosen for {shapes['sm_count']} multiprocessors, "
                             f"this device has {mine}")
    sha = sha256_file(path)
    where = {"record": path.as_posix(), "sha256": sha}
    return dict(shapes, source=f"{shapes.get('source') or 'given'}; taken from {path.name} (sha256 {sha[:12]}) by the stage"), where


LEVER_TRIAL_KEYS = ("lever", "x_current", "again", "taken", "retry", "not_tried", "error")  # a trial's verdict, not its change
REFINE_CTX = 2048  # the context the stage refines at: the matrix's smallest, where the GEMVs are most of the step
REFINE_READS = {"bf16": "dense", "fp8": "fp8", "int4-triton": "int4"}  # the weight paths whose step the fused kernels run


def refine_fused(record: dict, layouts, budget_s: float, shapes: dict | None, device: str = "cuda", ctx: int = REFINE_CTX,
                 cards=None, time_ms_for=None) -> tuple[dict | None, list]:
    """`shapes` (the launch shapes chosen so far: the table's or the tuner's dict) with each card width's
    GEMV shapes chosen again in the whole captured step (fused_kernels.refine_in_step): the tuner times
    each role alone, and timed alone a role's fastest shape is not its fastest in the step (on the
    H200 the tuner's choice ran the bf16 steps 0.940-0.978x the table's), after the levers the measured
    table (fk.LEVERS_FROM, the H200's) has and these shapes lack, each tried in the step. One card a width, with the
    random weights every session builds (a GEMV's speed does not depend on its values), for every
    fused weight path the record says runs, at position `ctx`; the budget is shared out as it goes.

    Returns (shapes, report): the dict the record keeps (its source naming the refinement), and a row a
    card and path: what was chosen, the change, the start's and the end's step side by side, the
    trials. A failure of one card or path is its row's error; the others still run. `cards` (model
    cards, default: the configured ones whose head layout the stage checks) and `time_ms_for` (net ->
    step timer) are for tests; on a CPU the kernels run under Triton's interpreter."""
    import torch

    from decodegap.core.config import load_models
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.cards import build_model
    from decodegap.measure.fused import FusedModel
    from decodegap.measure.weights import get_weight_path

    if budget_s <= 0 or shapes is None:
        return shapes, []
    if cards is None:
        cards = [c for c in load_models().values() if c.attention_layout in layouts]
    by_width = {}
    for card in cards:  # the GEMV shapes are kept per card width: one card a width
        by_width.setdefault(card.architecture["hidden_size"], card)
    quants = [q for q in REFINE_READS if record.get("weights", {}).get(q, {}).get("runs")]
    items = [(w, q) for w in sorted(by_width) for q in quants]
    if not items:
        return shapes, []
    log(f"fused kernels: refining the GEMV shapes in the whole step for {len(by_width)} card width(s) x "
        f"{len(quants)} weight path(s) in about {budget_s:.0f} s")
    t0, spec, report, built = time.monotonic(), shapes, [], None  # built: (width, model), one card's model for its paths
    levers_from = fk.launch_shapes_for(fk.LEVERS_FROM)  # its levers, each tried in the step where the start lacks it
    # The norm and PDL's prefetch are one setting for every card width of a format: one card's step
    # taking one would switch it on in the steps of the cards before, which tried it and did not take it
    # (on the H100 2026-12-05 the 4096-wide bf16 step took PDL, then one setting, which Qwen-2.5-7B's
    # steps had not: they ran with it). So a change an earlier card's step did not take is not tried again
    # where it would reach that step (tune_step.reaches_other_widths). PDL, the pair reads and x_fp32 are
    # set for the step's own format and card width (tune_step.lever_changes with hidden): a change of
    # those alone, or with a norm or prefetch that no other step of the format runs, reaches no other
    # step, and refine_in_step tries it whatever another step declined; the row's not_tried names only
    # the levers it left out.
    declined = {}  # (lever, format) -> why
    for i, (width, quant) in enumerate(items):
        card = by_width[width]
        row = {"model": card.key, "hidden": width, "quant": quant, "read": REFINE_READS[quant], "ctx": ctx}
        share = (budget_s - (time.monotonic() - t0)) / (len(items) - i)  # what is left, shared by what is left
        if share < 5:
            row["skipped"] = "budget"
            log(f"  {card.key} {quant}: skipped (the refine budget is spent)")
            report.append(row)
            continue
        started = time.monotonic()
        net = None
        try:
            if built is None or built[0] != width:  # the width's first path builds its card, once
                built = None
                model = build_model(card, device, "sdpa", 0)
                built = (width, model.float() if device == "cpu" else model)  # float32 on the interpreter, as tune_step's tests
            net = FusedModel(built[1], get_weight_path(quant), ctx + 64, backend="triton", gemv_configs=spec, gpu=record["gpu"])
            fmt = REFINE_READS[quant]
            not_tried = {lever: why for (lever, of), why in declined.items() if of == fmt}
            refined, got = fk.refine_in_step(net, ctx, budget_s=max(share - (time.monotonic() - started), 1.0),  # the build counts
                                             time_ms=time_ms_for(net) if time_ms_for else None, levers_from=levers_from,
                                             not_tried=not_tried, log=lambda m: log(f"  {m}"))
            for lever, ratio in fk.declined_levers(got).items():
                # a format's own (lever_changes sets pdl_prefetch_per_sm, every step's, only where it reaches none)
                declined.setdefault((lever, fmt), f"{card.key} {quant}'s step: {ratio:.3f}x, not taken")
            spec = {**spec, **refined.as_dict()}  # the tuner's timings kept beside the shapes
            row.update({k: got[k] for k in ("chosen", "change", "levers", "x_start", "spent_s", "skipped")},
                       not_tried=sorted(t["lever"] for t in got["trials"] if "not_tried" in t),
                       trials=len(got["trials"]), errors=sum("error" in t for t in got["trials"]),
                       # each lever's verdict in the step, in order, a retry marked: the record, not only the
                       # stage's log, shows why a lever is on or off for this step
                       lever_trials=[{k: t[k] for k in LEVER_TRIAL_KEYS if k in t} for t in got["trials"] if "lever" in t])
            log(f"  {card.key} {quant}: the chosen shapes ran the step {got['x_start'] or float('nan'):.3f}x the start's speed"
                + (f"; changed {json.dumps(got['change'])}" if got["change"] else "; the start's shapes kept"))
        except Exception as exc:  # noqa: BLE001 - one card's or path's failure is its row; the others still run
            row["error"] = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            log(f"  {card.key} {quant}: refine failed: {row['error']}")
        finally:
            model = net = None
            if i + 1 == len(items) or items[i + 1][0] != width:
                built = None  # this width's last path: its model freed
            if device == "cuda":
                torch.cuda.empty_cache()
        report.append(row)
    changed = [f"{r['model']} {r['quant']}" for r in report if r.get("change")]
    spec = dict(spec, source=f"{spec.get('source') or shapes.get('source') or 'given'}; refined in the whole step by the stage "
                             f"({', '.join(changed) or 'nothing changed'}; {time.monotonic() - t0:.0f} s)")
    return spec, report


def record_path(out_dir: str | Path, gpu: str, created_utc: str) -> Path:
    """A new record's file: {gpu}@<UTC time>.json beside the GPU type's earlier ones."""
    stamp = created_utc.replace("-", "").replace(":", "").replace("+0000", "Z").replace("+00:00", "Z")
    return Path(out_dir) / Path(ENVIRONMENT_STAMPED.format(gpu=gpu, stamp=stamp)).name


def write_record(record: dict, out: str | Path, receipt: str | Path | None = None) -> str:
    """Write a new record atomically and read-only, never replacing one (records are data: sessions
    name theirs by path and sha256), list it in its tree's manifest, and write the receipt naming it."""
    from decodegap.core import manifest
    from decodegap.core.record import write_exclusive
    from decodegap.core.sources import sha256_file

    out = Path(out)
    if out.exists():
        raise SessionExists(f"{out}: an environment record is already there; records are never replaced "
                            f"(a new stage writes a new file: --out-dir {out.parent})")
    write_exclusive((json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), out)
    root = manifest.root_of(out)
    if root is not None:
        manifest.add([out], root)
    if receipt:
        Path(receipt).parent.mkdir(parents=True, exist_ok=True)
        Path(receipt).write_text(json.dumps({"schema": RECEIPT_SCHEMA, "record": out.as_posix(), "sha256": sha256_file(out)}, indent=1) + "\n")
    return out.as_posix()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.measure.setup", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", required=True, help="the GPU type (a key of config/gpus.yaml) this machine is")
    p.add_argument("--attn", nargs="+", required=True, help="attention paths the config names")
    p.add_argument("--quant", nargs="+", required=True, help="weight paths the config names")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out-dir", help="write a new record <gpu>@<UTC time>.json here (results/environment): the newest is the one "
                                         "new sessions run under; earlier ones stay, as the sessions that ran under them name them")
    where.add_argument("--out", help="write the record to exactly this new file (refused if it exists)")
    p.add_argument("--receipt", default=None, help="after the record is written, a small JSON naming it here (the workflow's output)")
    p.add_argument("--gpus", default=None, help="GPU table (default: config/gpus.yaml)")
    p.add_argument("--gpu-spec", default=None, help="JSON object of the GPU type's fields, overriding its --gpus entry (the workflow "
                                                    "passes the user's merged table, as to every session)")
    p.add_argument("--layouts", nargs="+", default=[CHECK_LAYOUT],
                   help="head layouts the configured cards use, query heads/KV heads/head dim (default: %(default)s)")
    p.add_argument("--cache-dir", default=None, help="compile caches for the GPU type's jobs (default: ~/.cache/decodegap/<gpu>)")
    p.add_argument("--tune-s", type=float, default=120.0,
                   help="seconds for choosing the fused kernels' launch shapes on this GPU type at the cards' shapes, recorded for its "
                        "sessions (0: the kernels' own table; a CPU never tunes; default: %(default)s)")
    p.add_argument("--shapes-from", default=None, metavar="RECORD",
                   help="take the fused step's launch shapes from an earlier environment record of this GPU type (another machine's "
                        "stage) instead of choosing them here (--tune-s is then not used; --refine-s still refines from them): "
                        "a cell's sessions on several machines then run one set of shapes")
    p.add_argument("--refine-s", type=float, default=0.0,
                   help="seconds for choosing each card width's GEMV shapes again in the whole captured step, after --tune-s's "
                        "per-role choice or the table (fused_kernels.refine_in_step; every fused weight path that runs; "
                        "default: %(default)s, off)")
    args = p.parse_args(argv)
    if args.shapes_from and not Path(args.shapes_from).is_file():  # before any device time
        log(f"error: --shapes-from {args.shapes_from}: no such environment record")
        return EXIT_BAD_INPUT
    target = Path(args.out) if args.out else None
    if target is not None and target.exists():  # before any device time
        log(f"refused: {target}: an environment record is already there; records are never replaced (use --out-dir)")
        return EXIT_EXISTS
    cache_dir = Path(args.cache_dir or Path.home() / ".cache" / "decodegap" / args.gpu)
    os.environ.update(environment_variables(cache_dir))  # before torch loads: its compilers read them once
    try:
        record = build_record(args.gpu, args.attn, args.quant, cache_dir, args.gpus, args.gpu_spec, args.layouts)
        if args.shapes_from:
            record["launch_shapes"], record["launch_shapes_from"] = shapes_from(record, args.shapes_from)
        else:
            record["launch_shapes"] = tune_fused(record, args.layouts, args.tune_s)
        if args.refine_s > 0 and record["device"] == "cuda":  # a CPU never refines, as it never tunes
            record["launch_shapes"], record["launch_shapes_refine"] = refine_fused(record, args.layouts, args.refine_s,
                                                                                   record["launch_shapes"])
    except DecodegapError as exc:
        log(f"error: {exc}")
        return EXIT_BAD_INPUT
    except StageError as exc:
        log(f"error: {exc}; no record written")
        return EXIT_UNEXPECTED
    out = args.out or record_path(args.out_dir, args.gpu, record["created_utc"])
    try:
        out = write_record(record, out, args.receipt)
    except SessionExists as exc:
        log(f"refused: {exc}")
        return EXIT_EXISTS
    ruled = [f"{a} ({f})" for a, v in record["attention"].items() for f, c in v["checks"].items() if not c["runs"]]
    ruled += [w for w, v in record["weights"].items() if not v["runs"]]
    log(f"wrote {out}: {len(record['attention'])} attention and {len(record['weights'])} weight paths; "
        + (f"ruled out: {', '.join(ruled)}" if ruled else "all run"))
    return EXIT_RECORDED


if __name__ == "__main__":
    sys.exit(main())
