"""How close the fused step comes to the memory's limit, and where the rest of its time goes: one GPU,
one call (about 7-8 minutes on an H200 with the defaults).

    python benchmarks/floor_limit.py --deadline-s 500 --out DIR [--models qwen2.5-7b mistral-7b-v0.3 llama-3.1-8b]
        [--quant bf16 fp8 int4-triton int4-tinygemm] [--ctx 2048 16384] [--attn-ctx 2048 4096 8192 16384]
        [--parts checks steps ceiling persistent attention levers gemv stages layout prologue l2 tune refine] [--lever-models qwen2.5-7b] [--levers "norm sum" ...] [--levers-from DIR/floor_limit.json] [--tune-budget-s 90] [--tune-norm apart] [--tune-x-fp32] [--tune-x-pairs fp8] [--no-tune-attention] [--refine-budget-s 120] [--refine-min-gain 0.005] [--smoke]

Parts, in this order (what matters most first); each is wrapped so that a failure is a line and the
rest still runs, and items are skipped (and listed) once the deadline nears:

  checks     every kernel in bf16 against float32 on the device (relative L2, NaN-poisoned outputs):
             each GEMV role of the first card in each storage format (dense bf16, fp8, int4), the
             epilogues a packed path's own GEMV feeds (qkv_rope and gate_up from y, add_norm), and
             the attention with each lever at both head layouts
  steps      the whole fused step for each card x --quant x --ctx as one CUDA graph: device time over
             back-to-back replays, host time per step with the token read back, the bytes the step
             streams (the weights it reads as stored, scales included, without the input embedding
             table, plus the KV cache up to the position) and TB/s against the same-process copy
             bandwidth; then the step taken apart by capturing its GEMV launches alone and its
             attention launches alone (rest = step - GEMVs - attention: launches, gaps, the rest),
             and each role's GEMV launches alone (gemv_role_ms); and a check of one step's logits
             against the same step in plain PyTorch ops
  ceiling    what one launch per matrix can stream at all: the step's weight reads (each layer's qkv,
             o, gate_up and down in the format, then the output projection) done by a kernel that only
             reads (a streaming sum, no arithmetic worth the name), each launch the bytes the step's
             GEMV of that role reads, the best of a few launch shapes per role, as one CUDA graph of
             distinct buffers (no L2 reuse), launched plainly and, on Hopper, under PDL as the step's
             kernels are (waiting at the start; and with the first block loaded before that wait);
             beside it one launch reading all of those bytes, and each role's reads alone in the same
             number and order (role_chains: each role's GEMVs over its read, roles_over_read). Set
             against the step's own GEMV time (steps) and the issue's bandwidth targets, the fastest
             says whether a step built of one launch per matrix could reach them, whatever its GEMVs did
  persistent what one persistent launch streams against one launch a matrix (benchmarks/persistent_chain.py):
             the step's weight bytes in each format (as ceiling counts them, back to back in one
             buffer) read one launch a matrix, by SMs x k resident programs with a grid barrier after
             each matrix (two-level or one group; with each program's first chunk of the next matrix
             loaded before it waits) and without barriers, the best of a few shapes each, and a
             barrier's cost alone; then
             the bf16 GEMVs as a chain (each x the y before) persistent against one launch a matrix,
             checked against float32 torch on NaN-poisoned outputs. With the step's attention and rest
             from steps, the bound a persistent GEMV phase would give the step
  attention  decode attention per layer at each --attn-ctx for each head layout of the cards: ours
             with each lever and shape beside SDPA's flash, cuDNN and dispatcher kernels (us/layer)
  levers     the step with each lever on and off side by side (programmatic dependent launch, alone
             and with the first 2 or 8 programs a multiprocessor prefetching their first 1 or 4 loop
             steps of the weight, or of K and V, into L2 before PDL's wait; the attention's masked blocks, in-split combine and the default table's shape; the norm's
             statistic summed by the GEMV before, or x normalised by a launch of its own; the GEMVs'
             inputs that the step writes stored as float32, x_fp32, or for int4 as f16 pairs, x_pairs;
             each GEMV loop loading its next step's weights ahead in some roles, load_ahead; the
             attention prefetching o's weight into L2, l2_ahead); --levers also takes a change of
             its own as a JSON object (a role's shapes tried in the whole step), and --levers-from the
             changes a saved run's refine part chose
  gemv       each card's GEMV roles in each format, launched as the step launches them (the table's
             norm, x_fp32 and x_pairs), timed as graph-replayed launches cycling over
             enough weight copies to miss L2, with the bytes a launch reads per second; cuBLAS
             (F.linear) beside the bf16 ones
  stages     each GEMV role of the first card in each format at the table's shape with each software
             pipelining depth of STAGES (GemvConfig.stages: how many loop steps' weight loads Triton may
             keep in flight) beside Triton's default, timed as in gemv; then that card's step at the
             first --ctx with each role's fastest depth against the table's, side by side
  layout     whether the weights' layout in memory is what keeps a GEMV under a pure read: per dense
             role of the first card, a plain GEMV (y = W x, no prologue or epilogue) of R rows x 512
             columns a loop step with W row-major (a step reads R runs of 1 KB, K apart) against the
             same kernel with W stored tile by tile (a step reads one contiguous R x 512 tile, a
             program one contiguous run), at R = 2, 4, 8, beside the read-only kernel on the same
             bytes and the step's own kernel at the table's shape
  prologue   what the RMSNorm prologue costs the GEMVs after a norm (qkv, gate_up, lm_head) of each
             card in each format, at the table's shape: the kernel as the step runs it (every program
             sums x's squares, a pass over x from L2), with the sum given (the norm lever "sum": one
             load), and with x given normalised (no norm work at all: the least any way of
             normalising once leaves), beside the read-only kernel on the same bytes
  l2         whether a GEMV waits on memory or on its own instructions: each role of the first card
             whose weight fits the L2 (at most L2_FIT_BYTES as stored), in each format (int4 also as
             f16 pairs, int4_pairs, where the table reads them so), at the table's shape, timed reading one copy over and over (after the first launch, from L2) against
             cycling copies from HBM as the other parts do, beside the read-only kernel both ways. A
             kernel bound by memory runs faster from L2; one bound by its instructions does not
  tune       tune_launch_shapes (fused_kernels.tune) within --tune-budget-s, its choice printed as
             JSON (the form FusedModel(gemv_configs=...) takes) and, if time is left, each card's step
             in each of --quant's kernel paths with it, and with its GEMV shapes alone, against the table
             (--no-tune-attention: the GEMVs alone are tuned; int4 under x_pairs also as f16 pairs)
  refine     each card's GEMV shapes in each kernel format of --quant chosen in the whole step
             (fused_kernels.tune_step: each role climbs from the table's shape through its neighbours,
             rows and block_k halved or doubled, 4 or 8 warps, x as a tile or not, each timed as the
             captured step beside the current choice and taken past --refine-min-gain twice; down and
             o first), within --refine-budget-s a card and format; then the table's step and the
             refined one side by side at every --ctx, and the change printed as a JSON lever for
             --levers (or --levers-from this run's floor_limit.json) on another machine

A compact summary table ends the output; everything goes to DIR/floor_limit.json (and the tuned
shapes to DIR/tuned_launch_shapes.json). Nothing is downloaded: cards build with random weights
(decodegap.measure.cards). --smoke runs every part on the CPU under Triton's interpreter with two
tiny cards in float32 and host time (tests/test_floor_limit.py): it proves the script runs; its
numbers mean nothing.
"""

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

from decodegap.core.config import load_gpu, load_models

# the levers part's pdl_prefetch variants: (loop steps of W prefetched before PDL's wait, by how many programs a multiprocessor)
PDL_PREFETCH = ((1, 2), (1, 8), (4, 2), (4, 8))
L2_AHEAD_MIB = (0, 8, 16)  # MiB of gate_up's first rows the attention prefetches after o's weight (the lever l2_ahead_mib)
PARTS = ("checks", "steps", "ceiling", "persistent", "attention", "levers", "gemv", "stages", "layout", "prologue", "l2", "tune",
         "refine")  # the order they run in: what matters most first
STEP_SLOTS = 512  # cache positions past the context: warm-up, capture and every timed replay advance the position
L2_FIT_BYTES = 40 * 2**20  # the l2 part's largest weight: well inside the H200's 60 MB L2 (with x, scales and outputs)
# the lever load_ahead's variants, (read, roles): the roles whose loops ptxas keeps (does not unroll) on sm_90
# (fused_kernels.ahead --loops: "a loop"), each read's all together and int4 pairs' two apart
LOAD_AHEAD = (("dense", ("o", "gate_up", "down", "lm_head")), ("dense", ("down",)), ("fp8", ("qkv", "o", "gate_up", "down")),
              ("int4", ("o",)), ("int4_pairs", ("gate_up", "down")), ("int4_pairs", ("gate_up",)), ("int4_pairs", ("down",)))
STAGES = (1, 2, 3, 4, 6)  # the pipelining depths the stages part tries (3 is Triton's default on CUDA)
CHECK_TOL = {"bfloat16": 3e-2, "float32": 1e-4}  # relative L2 of a kernel against float32 (bf16: its roundings)
# the read-only kernel's launch shapes, (int32 words a block, blocks a program, warps): the ceiling takes the best per role
READ_SHAPES = ((2048, 1, 4), (4096, 1, 8), (4096, 4, 8), (4096, 16, 8), (8192, 8, 16))
# the issue's targets, streamed bytes per second of the whole step (weights as stored without the embedding table, plus KV)
TARGET_TBPS = {"dense": {2048: 3.9, 16384: 3.7}, "fp8": {2048: 3.5}, "int4": {2048: 2.9}}  # issue 28's, by the context it names
FORMAT_OF = {"bf16": "dense", "fp8": "fp8", "int4-triton": "int4"}  # the weight path whose own GEMVs read each storage format


def target_TBps(fmt: str, ctx: int) -> float:
    """The streamed-bytes target of a format at a context: the one named for the nearest context (in
    log2: 8192 takes 16384's), since issue 28 names bf16's at 2048 (3.9 TB/s) and 16384 (3.7) only."""
    named = TARGET_TBPS[fmt]
    return named[min(named, key=lambda c: (abs(math.log2(c) - math.log2(ctx)), c))]


class Run:
    """The run's clock, output and results."""

    def __init__(self, deadline_s: float, out: Path, t0: float):
        self.t0, self.deadline_s, self.out = t0, deadline_s, out  # t0: the process's start, before torch imports
        self.results: dict = {"skipped": [], "errors": []}

    def left_s(self) -> float:
        return self.deadline_s - (time.perf_counter() - self.t0)

    def say(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f} s] {msg}", flush=True)

    def enough(self, what: str, need_s: float) -> bool:
        """Whether `need_s` seconds are left before the deadline; else `what` is recorded as skipped."""
        if self.left_s() > need_s:
            return True
        self.results["skipped"].append(what)
        self.say(f"skipped (deadline): {what}")
        return False

    def part(self, name: str, fn, *args) -> None:
        """One part, its failure a line and a record."""
        self.say(f"== {name}")
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one part's failure must not lose the rest
            self.results["errors"].append({"part": name, "error": f"{type(exc).__name__}: {exc}"[:2000],
                                           "traceback": traceback.format_exc()[-4000:]})
            self.say(f"{name} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "floor_limit.json").write_text(json.dumps(self.results, indent=1, default=str))


def first_line(exc) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def measure_one(run, out: list, label: str, ident: dict, device, fn) -> None:
    """fn() measures one item (a GEMV role, say) and returns its row; a failure (a shape the compiler
    refuses, out of memory) is a line starting with `label` and a row of `ident` with the error, not
    the end of the part.
    Either way what fn held is freed before the next item."""
    import torch

    try:
        out.append(fn())
    except Exception as exc:  # noqa: BLE001 - one item's failure is a line
        run.say(f"{label}: {first_line(exc)}")
        out.append({**ident, "error": first_line(exc)})
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def device_ms(fn, n: int, device) -> float:
    """Milliseconds per call of `fn` over n back-to-back calls: CUDA events, or host time on a CPU."""
    import torch

    if device.type != "cuda":
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) * 1e3 / n
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def capture(fn, device, warmup: int = 1):
    """fn as one CUDA graph's replay (after warm-up calls), or fn itself where there are no graphs."""
    if device.type != "cuda":
        return fn
    from decodegap.measure.modes import capture_graph

    return capture_graph(fn, warmup).replay


# ----------------------------------------------------------------------------- parts


def run_checks(run, cards, models, quants, device, dtype, check_ctx):
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import AttentionBench, RoleBench

    tol, out = CHECK_TOL[str(dtype).removeprefix("torch.")], run.results.setdefault("checks", {})
    card = cards[models[0]]
    table = fk.resolve(None, device)
    for fmt in formats_of(quants):
        for role in fk.ROLES:
            if role == "lm_head" and fmt != "dense" or not run.enough(f"check {fmt} {role}", 20):
                continue
            bench = RoleBench(role, fmt, card.architecture, device, dtype, copies=1, qkv_bias=card.model_type == "qwen2")
            out[f"{card.key}/{fmt}/{role}"] = err = bench.error(table.gemv_for(fmt, role))
            run.say(f"check {card.key} {fmt:5s} {role:8s} relative L2 {err:.1e}{'' if err < tol else '  FAILED'}")
    h, k = card.architecture["hidden_size"], card.architecture["intermediate_size"]
    g = torch.Generator(device="cpu").manual_seed(0)
    x, y, gw = (torch.randn(n, generator=g).to(device, dtype) for n in (h, h, h))
    xn = torch.full((h,), float("nan"), device=device, dtype=dtype)
    x0 = x.clone()
    fk.add_norm(x, y, gw, xn, eps=1e-5)
    tot = x0.float() + y.float()
    ref = gw.float() * (tot * torch.rsqrt(tot.pow(2).mean() + 1e-5))
    out["add_norm"] = err = float((xn.float() - ref).norm() / ref.norm())
    run.say(f"check add_norm relative L2 {err:.1e}{'' if err < tol else '  FAILED'}")
    yy = torch.randn(2 * k, generator=g).to(device, dtype)
    o = torch.full((k,), float("nan"), device=device, dtype=dtype)
    fk.gate_up(x, None, o, norm_weight=gw, eps=1e-5, shape=table.gemv_for("dense", "gate_up"), y=yy)
    ref = torch.nn.functional.silu(yy[:k].float()) * yy[k:].float()
    out["gate_up from y"] = err = float((o.float() - ref).norm() / ref.norm())
    run.say(f"check gate_up from y relative L2 {err:.1e}{'' if err < tol else '  FAILED'}")
    for heads, n_layers in layouts(cards, models).items():
        for name, cfg in attention_variants(table, device).items():
            if not run.enough(f"check attention {heads} {name}", 20):
                continue
            bench = AttentionBench(heads, check_ctx, 1, device, dtype)
            out[f"attention {layout_name(heads)} {name}"] = err = bench.error(bench.plan(cfg))
            run.say(f"check attention {layout_name(heads)} {name:24s} relative L2 {err:.1e}{'' if err < tol else '  FAILED'}")
    bad = {k: v for k, v in out.items() if not v < tol}
    run.results["checks_failed"] = bad
    if bad:
        run.say(f"CHECKS FAILED: {bad}")


def run_gemv(run, cards, models, quants, device, dtype):
    import torch.nn.functional as F

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import RoleBench, as_the_step_reads, graph_us

    out = run.results.setdefault("gemv", [])
    table = fk.resolve(None, device)

    def one(key, card, fmt, role):
        bench = RoleBench(role, fmt, card.architecture, device, dtype, qkv_bias=card.model_type == "qwen2")
        # as the step launches it: the table's norm, and its input as float32 or f16 pairs where the table says
        read, shape, given = as_the_step_reads(table, fmt, role, card.architecture["hidden_size"])
        err = bench.error(shape, norm=given["norm"], x_pairs=given.get("x_pairs", False))
        us = graph_us(lambda i: bench.launch(shape, i, **given), len(bench.ops), device)
        row = {"model": key, "format": fmt, "read": read, "input": given, "role": role, "n": bench.n, "k": bench.k,
               "shape": shape.as_dict(), "check": err, "us": us, "bytes": bench.bytes, "GBps": bench.bytes / us / 1e3}
        if fmt == "dense":
            x = bench.x.view(1, -1)
            row["cublas_us"] = graph_us(lambda i: F.linear(x, bench.ops[i].weight), len(bench.ops), device)
        cub = f"  cuBLAS {row['cublas_us']:8.2f} us ({us / row['cublas_us']:.2f}x)" if "cublas_us" in row else ""
        run.say(f"gemv {key:16s} {read:10s} {role:8s} {bench.n:>6d} x {bench.k:<6d} check {err:.1e}  {us:8.2f} us "
                f"{row['GBps']:6.0f} GB/s{cub}")
        return row

    for key in models:
        for fmt in formats_of(quants):
            for role in fk.ROLES:
                if role == "lm_head" and fmt != "dense" or not run.enough(f"gemv {key} {fmt} {role}", 25):
                    continue
                measure_one(run, out, f"gemv {key} {fmt} {role}", {"model": key, "format": fmt, "role": role}, device,
                            lambda: one(key, cards[key], fmt, role))


def run_stages(run, cards, models, quants, ctxs, device, dtype, copy_Bps, n_dev, n_host):
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import RoleBench, graph_us

    out = run.results.setdefault("stages", [])
    table = fk.resolve(None, device)
    key, tol = models[0], CHECK_TOL[str(dtype).removeprefix("torch.")]
    card = cards[key]
    depths = STAGES if device.type == "cuda" else STAGES[:2]  # the interpreter ignores the depth: the mechanics, twice
    best = {}

    def one(fmt, role):
        bench = RoleBench(role, fmt, card.architecture, device, dtype, qkv_bias=card.model_type == "qwen2")
        base = table.gemv_for(fmt, role, card.architecture["hidden_size"])
        row = {"model": key, "format": fmt, "role": role, "shape": base.as_dict(), "bytes": bench.bytes, "us": {}, "check": {}}
        for depth in (None, *depths):
            shape = dataclasses.replace(base, stages=depth)
            name = "default" if depth is None else str(depth)
            row["check"][name] = err = bench.error(shape)
            if err < tol:  # a depth that computes wrongly is a line, never a candidate
                row["us"][name] = graph_us(lambda i: bench.launch(shape, i), len(bench.ops), device)
        faster = {n: us for n, us in row["us"].items() if n != "default" and us < row["us"].get("default", float("inf"))}
        if faster:
            best.setdefault(fmt, {})[role] = dataclasses.replace(base, stages=int(min(faster, key=faster.get))).as_dict()
        run.say(f"stages {key} {fmt:5s} {role:8s} " + "  ".join(
            f"{n} {us:7.2f} us {bench.bytes / us / 1e3:5.0f} GB/s" for n, us in row["us"].items())
            + "".join(f"  {n}: check {e:.1e}, dropped" for n, e in row["check"].items() if not e < tol))
        return row

    for fmt in formats_of(quants):
        for role in fk.ROLES:
            if role == "lm_head" and fmt != "dense" or not run.enough(f"stages {key} {fmt} {role}", 20):
                continue
            measure_one(run, out, f"stages {key} {fmt} {role}", {"model": key, "format": fmt, "role": role}, device,
                        lambda: one(fmt, role))
    run.results["stages_best"] = best
    run.say(f"stages: each role's fastest depth where it beats the default: {json.dumps(best)}")
    if best:
        quants = [q for q in quants if FORMAT_OF.get(q) in best]
        run_levers(run, cards, models[:1], quants, ctxs[:1], device, dtype, copy_Bps, n_dev, n_host,
                   variants={"table": {}, "best stages": {"gemv": best}})


_PLAIN_GEMV = None
LAYOUT_ROWS = (2, 4, 8)  # rows per program the layout part tries


def plain_gemv_kernel():
    """y = W x in float32 sums, R rows a program, BK columns a loop step; W row-major (n, k) or, with
    TILED, stored as (n / R, k / BK, R, BK): each loop step's R x BK tile contiguous, and a program's
    tiles one after another."""
    global _PLAIN_GEMV
    if _PLAIN_GEMV is None:
        import triton
        import triton.language as tl

        @triton.jit
        def plain_gemv(w_ptr, x_ptr, y_ptr, K: tl.constexpr, R: tl.constexpr, BK: tl.constexpr, TILED: tl.constexpr):
            pid = tl.program_id(0)
            r = tl.arange(0, R)
            c = tl.arange(0, BK)
            acc = tl.zeros((R, BK), tl.float32)
            for k0 in range(0, K, BK):
                x = tl.load(x_ptr + k0 + c).to(tl.float32)
                if TILED:
                    offs = (pid.to(tl.int64) * (K // BK) + k0 // BK) * (R * BK) + r[:, None] * BK + c[None, :]
                else:
                    offs = (pid.to(tl.int64) * R + r[:, None]) * K + k0 + c[None, :]
                w = tl.load(w_ptr + offs, eviction_policy="evict_first")
                acc += w.to(tl.float32) * x[None, :]
            tl.store(y_ptr + pid * R + r, tl.sum(acc, axis=1))

        _PLAIN_GEMV = plain_gemv
    return _PLAIN_GEMV


def layout_block_k(k: int) -> int:
    """The largest power of 2 up to 512 that divides k (the plain kernel has no masks)."""
    return min(512, k & -k)


def tile_weight(w, rows: int, block_k: int):
    """W (n, k) stored as (n / rows, k / block_k, rows, block_k): plain_gemv's TILED layout."""
    n, k = w.shape
    if n % rows or k % block_k:
        raise ValueError(f"tile_weight: a {n} x {k} weight is not whole tiles of {rows} x {block_k}")
    return w.view(n // rows, rows, k // block_k, block_k).permute(0, 2, 1, 3).contiguous()


def plain_gemv(w, x, y, rows: int, tiled: bool, warps: int = 4) -> None:
    """y = W x with plain_gemv_kernel; w as tile_weight stored it when `tiled`, else (n, k)."""
    n, k = y.numel(), x.numel()
    if w.numel() != n * k or n % rows:
        raise ValueError(f"plain_gemv: {w.numel()} weights for {n} x {k}, or {n} rows not whole programs of {rows}")
    plain_gemv_kernel()[(n // rows,)](w, x, y, K=k, R=rows, BK=layout_block_k(k), TILED=tiled, num_warps=warps)


def run_layout(run, cards, models, device, dtype):
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import L2_FLUSH_BYTES, RoleBench, graph_us, role_shapes

    out = run.results.setdefault("layout", [])
    key = models[0]
    card = cards[key]
    table = fk.resolve(None, device)

    def one(role, n, k):
        nbytes = n * k * torch.tensor([], dtype=dtype).element_size()
        copies = max(1, -(-L2_FLUSH_BYTES // nbytes)) if device.type == "cuda" else 1
        x = torch.randn(k, device=device, dtype=dtype)
        y = torch.empty(n, device=device, dtype=torch.float32)
        w = [(torch.randn(n, k, device=device) / k**0.5).to(dtype) for _ in range(copies)]
        ref = w[0].float() @ x.float()
        row = {"model": key, "role": role, "n": n, "k": k, "bytes": nbytes, "block_k": layout_block_k(k), "us": {}, "check": {}}
        row["us"]["read-only"] = read_only_us(nbytes, copies, device)
        for rows in LAYOUT_ROWS if device.type == "cuda" else LAYOUT_ROWS[:2]:
            for tiled in (False, True) if n % rows == 0 else ():
                ws = [tile_weight(t, rows, layout_block_k(k)) for t in w] if tiled else w
                name = f"R{rows} {'tiled' if tiled else 'row-major'}"
                plain_gemv(ws[0], x, y, rows, tiled)
                row["check"][name] = float((y - ref).norm() / ref.norm())
                row["us"][name] = graph_us(lambda i: plain_gemv(ws[i], x, y, rows, tiled), copies, device)
        w = ws = None  # the copies go before the step kernel's own
        bench = RoleBench(role, "dense", card.architecture, device, dtype, qkv_bias=card.model_type == "qwen2")
        shape = table.gemv_for("dense", role, card.architecture["hidden_size"])
        row["us"]["step kernel"] = graph_us(lambda i: bench.launch(shape, i), len(bench.ops), device)
        run.say(f"layout {key} {role:8s} {n:>6d} x {k:<6d} " + "  ".join(
            f"{name} {us:7.2f} us {nbytes / us / 1e3:5.0f} GB/s" for name, us in row["us"].items())
            + f"  (check {max(row['check'].values()):.1e})")
        return row

    for role, (n, k) in role_shapes(card.architecture).items():
        if run.enough(f"layout {key} {role}", 25):
            measure_one(run, out, f"layout {key} {role}", {"model": key, "role": role}, device, lambda: one(role, n, k))


def run_prologue(run, cards, models, quants, device, dtype):
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import NORM_INPUTS, RoleBench, graph_us

    out = run.results.setdefault("prologue", [])
    table = fk.resolve(None, device)
    tol = CHECK_TOL[str(dtype).removeprefix("torch.")]

    def one(key, card, fmt, role):
        bench = RoleBench(role, fmt, card.architecture, device, dtype, qkv_bias=card.model_type == "qwen2")
        shape = table.gemv_for(fmt, role, card.architecture["hidden_size"])
        row = {"model": key, "format": fmt, "role": role, "shape": shape.as_dict(), "bytes": bench.bytes, "us": {}, "check": {}}
        for norm in NORM_INPUTS:
            row["check"][norm] = err = bench.error(shape, norm=norm)
            if err < tol:  # a wrong variant is a line, never a figure
                row["us"][norm] = graph_us(lambda i: bench.launch(shape, i, norm=norm), len(bench.ops), device)
        stored = sum(t.numel() * t.element_size() for t in (bench.ops[0].weight, bench.ops[0].scale, bench.ops[0].zero)
                     if t is not None)
        row["us"]["read-only"] = read_only_us(stored, len(bench.ops), device)
        run.say(f"prologue {key} {fmt:5s} {role:8s} " + "  ".join(
            f"{n} {us:7.2f} us {bench.bytes / us / 1e3:5.0f} GB/s" for n, us in row["us"].items())
            + "".join(f"  {n}: check {e:.1e}, dropped" for n, e in row["check"].items() if not e < tol))
        return row

    for key in models:
        for fmt in formats_of(quants):
            for role in ("qkv", "gate_up", "lm_head"):
                if role == "lm_head" and fmt != "dense" or not run.enough(f"prologue {key} {fmt} {role}", 20):
                    continue
                measure_one(run, out, f"prologue {key} {fmt} {role}", {"model": key, "format": fmt, "role": role}, device,
                            lambda: one(key, cards[key], fmt, role))


def run_l2(run, cards, models, quants, device, dtype):
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import NORM_INPUT_OF, RoleBench, as_the_step_reads, graph_us, role_shapes

    out = run.results.setdefault("l2", [])
    table = fk.resolve(None, device)
    key = models[0]
    card = cards[key]
    hidden = card.architecture["hidden_size"]

    def one(fmt, role, read):
        bench = RoleBench(role, fmt, card.architecture, device, dtype, qkv_bias=card.model_type == "qwen2")
        if read == fmt:  # the format's own loop, its input as stored, normalised as the step does (RoleBench gives o and down no norm)
            shape, norm, pairs = table.gemv_for(fmt, role, hidden), NORM_INPUT_OF[table.norm_for(fmt)], False
        else:  # as the step reads it: int4's f16 pairs (the lever x_pairs), normalised by the launch before
            _, shape, given = as_the_step_reads(table, fmt, role, hidden)
            norm, pairs = given["norm"], given["x_pairs"]
        stored = sum(t.numel() * t.element_size() for t in (bench.ops[0].weight, bench.ops[0].scale, bench.ops[0].zero)
                     if t is not None)
        row = {"model": key, "format": read, "role": role, "shape": shape.as_dict(), "stored_bytes": stored, "copies": len(bench.ops),
               "check": bench.error(shape, norm=norm, x_pairs=pairs)}
        row["hbm_us"] = graph_us(lambda i: bench.launch(shape, i, norm=norm, x_pairs=pairs), len(bench.ops), device)
        row["l2_us"] = graph_us(lambda i: bench.launch(shape, 0, norm=norm, x_pairs=pairs), 1, device)
        row["read_hbm_us"] = read_only_us(stored, len(bench.ops), device)
        row["read_l2_us"] = read_only_us(stored, 1, device)
        row["l2_speedup"], row["read_l2_speedup"] = row["hbm_us"] / row["l2_us"], row["read_hbm_us"] / row["read_l2_us"]
        run.say(f"l2 {key} {read:10s} {role:8s} {stored / 2**20:6.1f} MiB  GEMV {row['hbm_us']:7.2f} us from HBM, {row['l2_us']:7.2f} "
                f"from L2 ({row['l2_speedup']:.2f}x)  read-only {row['read_hbm_us']:7.2f} / {row['read_l2_us']:7.2f} us "
                f"({row['read_l2_speedup']:.2f}x); check {row['check']:.1e}")
        return row

    for fmt in formats_of(quants):
        for role, (n, k) in role_shapes(card.architecture).items():
            stored = n * k * {"dense": 2, "fp8": 1, "int4": 0.5}[fmt]
            if role == "lm_head" and fmt != "dense" or stored > L2_FIT_BYTES:
                continue
            # int4 also as the step reads it with the lever x_pairs (qkv, gate_up, down: f16 pairs)
            step_read = as_the_step_reads(table, fmt, role, hidden)[0]
            for read in dict.fromkeys((fmt, step_read)):
                if run.enough(f"l2 {key} {read} {role}", 15):
                    measure_one(run, out, f"l2 {key} {read} {role}", {"model": key, "format": read, "role": role}, device,
                                lambda: one(fmt, role, read))


_STREAM_READ = None


def stream_read_kernel():
    """A Triton kernel that reads int32 words and keeps one sum a program (so the loads stay): the
    least work a launch can do with a matrix's bytes. PDL (programmatic dependent launch, launched
    with launch_pdl): 1 waits for the kernel before at its start and lets the next one launch, as the
    step's kernels do; 2 also loads its first block before that wait, as a GEMV may (its weight does
    not depend on the kernel before)."""
    global _STREAM_READ
    if _STREAM_READ is None:
        import triton
        import triton.language as tl
        import triton.language.extra.cuda  # noqa: F401 - tl.extra.cuda's griddepcontrol, under PDL only

        @triton.jit
        def stream_read(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr, PDL: tl.constexpr):
            pid = tl.program_id(0)
            acc = tl.zeros([BLOCK], dtype=tl.int32)
            if PDL == 2:
                offs = pid.to(tl.int64) * ITERS * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + offs, mask=offs < n_words, other=0)
            if PDL > 0:  # as the step's kernels start (fused_kernels.common.pdl_start)
                tl.extra.cuda.gdc_wait()
                tl.extra.cuda.gdc_launch_dependents()
            for i in range(PDL // 2, ITERS):  # PDL 2 read block 0 already; 64-bit offsets: one launch of a whole step's bytes passes 2**31 words
                offs = (pid.to(tl.int64) * ITERS + i) * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + offs, mask=offs < n_words, other=0)
            tl.store(out_ptr + pid, tl.sum(acc, axis=0))

        _STREAM_READ = stream_read
    return _STREAM_READ


def read_launch(buf, out, shape, pdl: int = 0):
    """One launch reading every word of `buf` (int32) with launch shape (BLOCK, ITERS, warps); `pdl`
    as stream_read_kernel's PDL (a CUDA GPU of compute capability 9.0 or newer)."""
    from decodegap.measure.fused_kernels.common import launch_options

    block, iters, warps = shape
    n = buf.numel()
    programs = -(-n // (block * iters))
    if programs > out.numel():
        raise ValueError(f"read_launch: {programs} programs, a sum each, and room for {out.numel()}")
    stream_read_kernel()[(programs,)](buf, out, n, BLOCK=block, ITERS=iters, PDL=pdl, **launch_options(warps, pdl > 0))


def read_only_us(nbytes: int, copies: int, device) -> float:
    """Microseconds per launch of the read-only kernel over `nbytes` (its best shape), cycling over
    `copies` buffers as the GEMV timings cycle over weight copies."""
    import torch

    from decodegap.measure.fused_kernels.tune import graph_us

    words = -(-nbytes // 4)
    sink = torch.empty(-(-words // min(b * i for b, i, _ in read_shapes(device))), dtype=torch.int32, device=device)
    bufs = [torch.ones(words, dtype=torch.int32, device=device) for _ in range(copies)]  # ones: sums that fit
    return min(graph_us(lambda i, shape=shape: read_launch(bufs[i], sink, shape), copies, device) for shape in read_shapes(device))


def read_shapes(device) -> tuple:
    return READ_SHAPES if device.type == "cuda" else ((4096, 4, 1),)  # the interpreter: one shape, few programs


def run_ceiling(run, cards, models, quants, device, dtype, copy_Bps):
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import L2_FLUSH_BYTES, graph_us

    out = run.results.setdefault("ceiling", [])
    n_dev = 20 if device.type == "cuda" else 1
    for key in models:
        a = cards[key].architecture
        layers = a["num_hidden_layers"]
        for fmt in formats_of(quants):
            if not run.enough(f"ceiling {key} {fmt}", 40):
                continue
            try:
                roles = [r for r in fk.ROLES if r != "lm_head"]
                words = {role: -(-b // 4) for role, b in step_launch_bytes(cards[key], fmt, device, dtype).items()}
                total_words = layers * sum(words[r] for r in roles) + words["lm_head"]
                sink = torch.empty(-(-total_words // min(b * i for b, i, _ in read_shapes(device))), dtype=torch.int32, device=device)
                best = {}
                for role, w in words.items():  # each role alone, cycling over copies past L2, each read shape
                    copies = max(1, -(-L2_FLUSH_BYTES // (4 * w))) if device.type == "cuda" else 1
                    bufs = [torch.ones(w, dtype=torch.int32, device=device) for _ in range(copies)]
                    times = {shape: graph_us(lambda i, shape=shape: read_launch(bufs[i], sink, shape), copies, device)
                             for shape in read_shapes(device)}
                    shape = min(times, key=times.get)
                    best[role] = {"shape": shape, "us": times[shape], "GBps": 4 * w / times[shape] / 1e3}
                    del bufs
                # the step's reads in the step's order, each from its own buffer, as one graph
                seq = [(role, torch.ones(words[role], dtype=torch.int32, device=device)) for _ in range(layers) for role in roles]
                seq.append(("lm_head", torch.ones(words["lm_head"], dtype=torch.int32, device=device)))

                def timed(launches) -> dict:
                    """`launches` ((role, buffer) in order) as one graph: ms plainly, and under PDL as the
                    step launches its kernels (pdl_ms; pdl_ahead_ms: the first block loaded before the
                    wait) where the GPU has it."""
                    def reads(pdl=0):
                        for role, buf in launches:
                            read_launch(buf, sink, best[role]["shape"], pdl=pdl)

                    out = {"ms": device_ms(capture(reads, device), n_dev, device)}
                    if fk.pdl_available(device) is None:
                        for pdl, name in ((1, "pdl_ms"), (2, "pdl_ahead_ms")):
                            out[name] = device_ms(capture(lambda pdl=pdl: reads(pdl), device), n_dev, device)
                    return out

                total = sum(4 * b.numel() for _, b in seq)
                twin = timed(seq)
                # each role's launches alone, back to back, as the step's per-role split times its GEMVs
                chains = {}
                for role in fk.ROLES:
                    alone = [(r, b) for r, b in seq if r == role]
                    chains[role] = {**timed(alone), "launches": len(alone)}
                del seq, alone  # the buffers: the one-launch read below needs their memory
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                whole = torch.ones(total // 4, dtype=torch.int32, device=device)
                one_ms = min(device_ms(capture(lambda s=s: read_launch(whole, sink, s), device), n_dev, device) for s in read_shapes(device))
                del whole
                row = {"model": key, "format": fmt, "bytes": total, "launches": layers * len(roles) + 1, "twin_ms": twin["ms"],
                       "twin_TBps": total / twin["ms"] / 1e9, **{f"twin_{k}": v for k, v in twin.items() if k != "ms"}, "one_launch_ms": one_ms, "one_launch_TBps": total / one_ms / 1e9,
                       "copy_TBps": copy_Bps / 1e12, "roles": {r: {**v, "shape": list(v["shape"])} for r, v in best.items()},
                       "role_chains": chains}
                step = step_of(run, key, fmt)  # the step's own GEMVs of this format, measured in this run
                if step:
                    row.update(read_only_bound(row, step))
                out.append(row)
                run.say(ceiling_line(row))
            except Exception as exc:  # noqa: BLE001
                out.append({"model": key, "format": fmt, "error": first_line(exc)})
                run.say(f"ceiling {key} {fmt}: {first_line(exc)}")
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()


def sibling(name: str):
    """Another benchmark of this folder as a module (benchmarks/ is no package, and tests load this
    file by its path)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def run_persistent(run, cards, models, quants, device, dtype, copy_Bps):
    """Part persistent (benchmarks/persistent_chain.py): the step's weight bytes in each format read by
    one launch a matrix, by one persistent launch with a grid barrier after each matrix (two-level or
    one group, and with each program's first chunk of the next matrix loaded before it waits) and
    without the barriers, and a barrier's cost alone; then the bf16 GEMVs themselves as a chain, persistent against one launch a matrix.
    Each variant is checked before it is timed (the read sums, the GEMV chain against float32)."""
    import torch

    from decodegap.measure import fused_kernels as fk

    pc = sibling("persistent_chain")
    gpu = device.type == "cuda"
    n_dev = 20 if gpu else 1
    chain = pc.Chain(device, fk.sm_count_of(device))
    out = run.results.setdefault("persistent", [])
    read_shapes = pc.READ_SHAPES if gpu else (pc.CPU_READ_SHAPE,)
    gemv_shapes = pc.GEMV_SHAPES if gpu else (pc.CPU_GEMV_SHAPE,)

    def timed_alone(fn):
        return device_ms(capture(fn, device), n_dev, device)

    def timed(fn, what):
        ms = timed_alone(fn)
        chain.check_flag(what)
        return ms

    for key in models:
        card, a = cards[key], cards[key].architecture
        for fmt in formats_of(quants):
            if not run.enough(f"persistent {key} {fmt}", 60):
                continue
            buf = None
            try:
                by_role = {role: -(-b // 4) for role, b in step_launch_bytes(card, fmt, device, dtype).items()}
                words = [by_role[role] for role, _, _ in pc.step_shapes(a)]
                starts = pc.word_starts(words, device)
                host = starts.tolist()
                buf = torch.ones(host[-1], dtype=torch.int32, device=device)  # ones: each program's sum counts its words
                row = {"model": key, "format": fmt, "bytes": 4 * host[-1], "matrices": len(words), "sm_count": chain.sm_count,
                       "copy_TBps": copy_Bps / 1e12, "shapes": {}}
                variants = {"launches": lambda sh: pc.read_chain_launches(chain, buf, starts, sh, host),
                            "no_barrier": lambda sh: pc.read_chain(chain, buf, starts, sh, barrier=False),
                            "barrier": lambda sh: pc.read_chain(chain, buf, starts, sh, barrier=True),
                            "barrier_1counter": lambda sh: pc.read_chain(chain, buf, starts, sh, barrier=True, counters=1),
                            "barrier_ahead": lambda sh: pc.read_chain(chain, buf, starts, sh, barrier=True, ahead=True)}
                if "barrier_us" not in run.results:  # what a barrier costs alone, with one counter and with several
                    run.results["barrier_us"] = {f"{c} counters {'/'.join(map(str, read_shapes[0]))}":
                                                 pc.barrier_us(chain, len(words), read_shapes[0], timed_alone, counters=c)
                                                 for c in (1, pc.COUNTERS)}
                    run.say("a grid barrier alone: " + "; ".join(f"{k} {v:.2f} us" for k, v in run.results["barrier_us"].items()))
                for shape in read_shapes:
                    for name, fn in variants.items():
                        label = f"{name} {'/'.join(map(str, shape))}"
                        try:
                            chain.sink.zero_()
                            fn(shape)
                            got = int(chain.sink.sum())
                            if got != host[-1]:
                                raise RuntimeError(f"read {got} words of {host[-1]}")
                            row["shapes"][label] = timed(lambda fn=fn, shape=shape: fn(shape), f"read chain {label}")
                        except Exception as exc:  # noqa: BLE001 - a shape that cannot stay resident is a line
                            row["shapes"][label] = first_line(exc)
                best_shapes(row, variants)
                step = step_of(run, key, fmt)
                if step and "barrier" in row:
                    row.update(persistent_bound(row, step))
                out.append(row)
                run.say(persistent_line(row))
            except Exception as exc:  # noqa: BLE001
                out.append({"model": key, "format": fmt, "error": first_line(exc)})
                run.say(f"persistent {key} {fmt}: {first_line(exc)}")
            finally:
                del buf
                if gpu:
                    torch.cuda.empty_cache()
        if "dense" in formats_of(quants) and run.enough(f"persistent {key} GEMV chain", 60):
            measure_one(run, out, f"persistent {key} GEMV chain", {"model": key, "format": "dense", "chain": "gemv"}, device,
                        lambda key=key, a=a: gemv_chain_row(run, pc, chain, key, a, device, gemv_shapes, timed))


def gemv_chain_row(run, pc, chain, key, arch, device, shapes, timed) -> dict:
    """The step's bf16 GEMVs as one chain: each shape persistent (barrier a matrix) and as one launch a
    matrix, each checked against float32 torch on NaN-poisoned outputs before it is timed."""
    import torch

    dims = pc.gemv_chain_shapes(arch)
    meta, n_w, n_act = pc.gemv_layout(dims, device)
    w = torch.empty(n_w, dtype=torch.bfloat16, device=device)
    for (w0, n, k, _, _) in meta.view(-1, 5).tolist():  # scaled so that x keeps its size down the chain
        w[w0:w0 + n * k].normal_(0, k ** -0.5)
    act = torch.zeros(n_act, dtype=torch.float32, device=device)
    act[:dims[0][1]] = torch.randn(dims[0][1], device=device)
    rows = [n for n, _ in dims]
    row = {"model": key, "format": "dense", "chain": "gemv", "matrices": len(dims), "bytes": 2 * sum(n * k for n, k in dims),
           "shapes": {}, "errors": {}}
    for shape in shapes:
        for name, fn in (("launches", lambda sh: pc.gemv_chain_launches(chain, w, meta, act, sh, rows)),
                         ("barrier", lambda sh: pc.gemv_chain(chain, w, meta, act, sh, barrier=True)),
                         ("barrier_ahead", lambda sh: pc.gemv_chain(chain, w, meta, act, sh, barrier=True, ahead=True))):
            label = f"{name} {'/'.join(map(str, shape))}"
            try:
                err = pc.gemv_chain_error(chain, w, meta, act, shape, barrier=True, launches=name == "launches",
                                          ahead=name == "barrier_ahead")
                row["errors"][label] = err
                if not err < 1e-3:
                    raise RuntimeError(f"relative L2 {err:.2e} against float32 torch (a barrier let x be read before it was written?)")
                row["shapes"][label] = timed(lambda fn=fn, shape=shape: fn(shape), f"GEMV chain {label}")
            except Exception as exc:  # noqa: BLE001
                row["shapes"][label] = first_line(exc)
    best_shapes(row, ("launches", "barrier", "barrier_ahead"))
    step = step_of(run, key, "dense")
    if step and "barrier" in row:
        row.update(persistent_bound(row, step))
    run.say(persistent_line(row))
    return row


def best_shapes(row, names) -> None:
    """row[name] for each variant name: its fastest shape of row["shapes"] ({"name shape": ms, or the
    line of a shape that failed}), its ms and TB/s of row["bytes"]; a variant no shape ran is left out."""
    for name in names:
        ok = {lab: ms for lab, ms in row["shapes"].items() if lab.split(" ")[0] == name and isinstance(ms, float)}
        if ok:
            best = min(ok, key=ok.get)
            row[name] = {"shape": best.split(" ")[1], "ms": ok[best], "TBps": row["bytes"] / ok[best] / 1e9}


def step_of(run, key: str, fmt: str) -> dict | None:
    """The step of this card and storage format measured in this run (part steps), split kernel by
    kernel: the first context's."""
    quant = next(q for q, f in FORMAT_OF.items() if f == fmt)
    return next((s for s in run.results.get("steps", []) if s.get("model") == key and s.get("quant") == quant
                 and "gemv_ms" in s), None)


def persistent_bound(row, step) -> dict:
    """A persistent row beside the step of its format from the same run: the fastest barrier chain in
    place of the step's GEMVs, with the step's own attention and rest (the launches those keep), and
    the step at the format's target."""
    streamed = step["weight_bytes"] + step["kv_bytes"]
    target = target_TBps(row["format"], step["ctx"])
    bound_ms = min(row[n]["ms"] for n in PERSISTENT_BARRIERS if n in row) + step["attention_ms"] + step["rest_ms"]
    return {"step_ctx": step["ctx"], "step_ms": step["device_ms"], "step_gemv_ms": step["gemv_ms"], "step_TBps": step["TBps"],
            "step_attention_ms": step["attention_ms"], "step_rest_ms": step["rest_ms"], "target_TBps": target,
            "target_step_ms": streamed / (target * 1e12) * 1e3, "bound_ms": bound_ms, "bound_TBps": streamed / bound_ms / 1e9}


PERSISTENT_BARRIERS = ("barrier", "barrier_1counter", "barrier_ahead", "barrier_prefetch")  # the persistent variants with barriers
PERSISTENT_VARIANTS = ("launches", "no_barrier") + PERSISTENT_BARRIERS  # barrier_prefetch: the first run's (L2 prefetch, since dropped)


def persistent_line(row) -> str:
    what = "bf16 GEMV chain" if row.get("chain") == "gemv" else f"{row['format']:5s} read chain"
    parts = [f"{name} {row[name]['ms']:.3f} ms {row[name]['TBps']:.2f} TB/s ({row[name]['shape']})"
             for name in PERSISTENT_VARIANTS if name in row]
    txt = f"persistent {row['model']:16s} {what}: {row['bytes'] / 1e9:.3f} GB in {row['matrices']} matrices: " + "; ".join(parts)
    barriers = [row[n]["ms"] for n in PERSISTENT_BARRIERS if n in row]
    if "launches" in row and barriers:
        txt += f"; the fastest persistent {row['launches']['ms'] / min(barriers):.2f}x as fast as a launch a matrix"
    if "bound_ms" in row:
        txt += (f" | with the step's attention and rest ({row['step_attention_ms']:.3f} + {row['step_rest_ms']:.3f} ms) a step "
                f"{row['bound_ms']:.3f} ms, {row['bound_TBps']:.2f} TB/s (target {row['target_TBps']}, {row['target_step_ms']:.3f} ms; "
                f"the step {row['step_ms']:.3f} ms, {row['step_TBps']:.2f} TB/s)")
    return txt


def step_launch_bytes(card, fmt: str, device, dtype) -> dict:
    """What the step's GEMV of each role reads in storage format `fmt` (the output projection dense), as
    tune.RoleBench counts it: the weight as stored, scales and biases, x, and the residual read."""
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import RoleBench

    out = {}
    for role in fk.ROLES:
        bench = RoleBench(role, fmt if role != "lm_head" else "dense", card.architecture, device, dtype, copies=1,
                          qkv_bias=card.model_type == "qwen2")
        out[role] = bench.bytes
        del bench
    return out


def read_only_bound(row, step) -> dict:
    """A ceiling row (`row`) beside the step of its format measured in the same run (`step`, split kernel
    by kernel): the step's GEMVs against the read-only launches, the time a step at the format's target
    takes, and the bound: a step whose GEMVs ran as fast as the read-only launches, with the step's own
    attention and rest (what one launch per matrix lets the step stream at most, as it is built)."""
    fmt = row["format"]
    twin_ms = min(row[k] for k in ("twin_ms", "twin_pdl_ms", "twin_pdl_ahead_ms") if k in row)  # the fastest way launched
    streamed = step["weight_bytes"] + step["kv_bytes"]
    target = target_TBps(fmt, step["ctx"])
    target_step_ms = streamed / (target * 1e12) * 1e3
    bound_ms = twin_ms + step["attention_ms"] + step["rest_ms"]
    return {"twin_best_ms": twin_ms, "step_gemv_ms": step["gemv_ms"], "step_ms": step["device_ms"], "step_ctx": step["ctx"],
            "gemv_over_twin": step["gemv_ms"] / twin_ms, "target_TBps": target, "target_step_ms": target_step_ms,
            "twin_alone_over_target": twin_ms / target_step_ms, "step_attention_ms": step["attention_ms"],
            "step_rest_ms": step["rest_ms"], "bound_ms": bound_ms, "bound_TBps": streamed / bound_ms / 1e9,
            "step_TBps": step["TBps"], **roles_over_read(row, step)}


def roles_over_read(row, step) -> dict:
    """Each role's GEMV launches in the step (alone, back to back) against the read-only launches of the
    same bytes in the same number and order, launched the fastest way: the time over the read, and what
    it costs a step. Empty where either side lacks the split (a run saved before it, a packed path)."""
    if "gemv_role_ms" not in step or "role_chains" not in row:
        return {}
    out = {}
    for role, gemv_ms in step["gemv_role_ms"].items():
        chain = row["role_chains"].get(role)
        if chain:
            read_ms = min(chain[k] for k in ("ms", "pdl_ms", "pdl_ahead_ms") if k in chain)
            out[role] = {"gemv_ms": gemv_ms, "read_ms": read_ms, "x_read": gemv_ms / read_ms, "excess_ms": gemv_ms - read_ms}
    return {"roles_over_read": out}


def ceiling_line(row) -> str:
    roles = " ".join(f"{r} {v['us']:.2f} us {v['GBps']:.0f} GB/s" for r, v in row["roles"].items())
    txt = (f"ceiling {row['model']:16s} {row['format']:5s}: {row['launches']} read-only launches of the step's "
           f"{row['bytes'] / 1e9:.3f} GB take {row['twin_ms']:.3f} ms ({row['twin_TBps']:.2f} TB/s); one launch "
           f"{row['one_launch_ms']:.3f} ms ({row['one_launch_TBps']:.2f} TB/s); copy {row['copy_TBps']:.2f} TB/s | {roles}")
    if "twin_pdl_ms" in row:
        txt += (f" | under PDL the launches take {row['twin_pdl_ms']:.3f} ms, with each program's first block loaded before "
                f"PDL's wait {row['twin_pdl_ahead_ms']:.3f} ms")
    if "step_gemv_ms" in row:
        txt += (f" | the step's GEMVs (ctx {row['step_ctx']}) {row['step_gemv_ms']:.3f} ms = {row['gemv_over_twin']:.2f}x the "
                f"fastest read-only launches; a step at the {row['target_TBps']} TB/s target takes {row['target_step_ms']:.3f} ms, the "
                f"read-only launches alone {row['twin_alone_over_target']:.2f}x that; with the step's attention and rest "
                f"({row['step_attention_ms']:.3f} + {row['step_rest_ms']:.3f} ms) a step of read-only launches takes "
                f"{row['bound_ms']:.3f} ms, {row['bound_TBps']:.2f} TB/s")
    if row.get("roles_over_read"):
        txt += " | each role's GEMVs over its read-only launches: " + "; ".join(
            f"{r} {v['x_read']:.2f}x ({1e3 * v['excess_ms']:+.0f} us a step)" for r, v in row["roles_over_read"].items())
    return txt


def run_attention(run, cards, models, ctxs, device, dtype):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import AttentionBench, graph_us

    out = run.results.setdefault("attention", [])
    table = fk.resolve(None, device)
    sdpa = {"sdpa flash": [SDPBackend.FLASH_ATTENTION], "sdpa cudnn": [SDPBackend.CUDNN_ATTENTION], "sdpa dispatcher": None}
    for heads, n_layers in layouts(cards, models).items():
        for ctx in ctxs:
            if not run.enough(f"attention {layout_name(heads)} ctx {ctx}", 25):
                continue
            bench = AttentionBench(heads, ctx, n_layers, device, dtype)
            row = {"layout": layout_name(heads), "ctx": ctx, "kv_bytes": bench.bytes, "ours": {}, "sdpa": {}}
            for name, cfg in attention_variants(table, device).items():
                try:
                    plan = bench.plan(cfg)
                    err = bench.error(plan)
                    us = graph_us(lambda i: bench.launch(plan, i), n_layers, device)
                    row["ours"][name] = {"us": us, "check": err, "plan": plan.as_dict()}
                except Exception as exc:  # noqa: BLE001
                    row["ours"][name] = {"error": first_line(exc)}
            # the table's two launches timed apart (the split programs, their combine): where its time goes
            if table.attention.combine == "separate":
                plan = bench.plan(table.attention)
                row["table_parts"] = {part: graph_us(lambda i, part=part: bench.launch(plan, i, only=part), n_layers, device)
                                      for part in ("split", "combine")}
            ref = bench.caches[0]
            for name, backends in sdpa.items():
                try:
                    def call(i):
                        if backends is None:
                            return bench.sdpa(i)
                        with sdpa_kernel(backends):
                            return bench.sdpa(i)
                    got = call(0)
                    h = heads
                    k, v = (t[:, : ctx + 1].float() for t in ref)
                    want = ((bench.q.float().view(h.n_kv, h.group, h.head_dim) @ k.transpose(1, 2) * bench.scale).softmax(-1) @ v)
                    err = float((got.float().reshape(-1) - want.reshape(-1)).norm() / want.norm())
                    row["sdpa"][name] = {"us": graph_us(call, n_layers, device), "check": err}
                except Exception as exc:  # noqa: BLE001 - a backend without a kernel here is a line
                    row["sdpa"][name] = {"error": first_line(exc)}
            out.append(row)
            ours = {n: r["us"] for n, r in row["ours"].items() if "us" in r}
            theirs = {n: r["us"] for n, r in row["sdpa"].items() if "us" in r}
            best = min(ours, key=ours.get) if ours else None
            run.say(f"attention {row['layout']} ctx {ctx:>5d}: " + "  ".join(f"{n} {u:.2f}" for n, u in ours.items())
                    + " | " + "  ".join(f"{n} {u:.2f}" for n, u in theirs.items()) + " us/layer"
                    + (f"; best ours {best} at {bench.bytes / ours[best] / 1e3:.0f} GB/s" if best else "")
                    + ("; the table's split alone {split:.2f}, its combine alone {combine:.2f} us".format(**row["table_parts"])
                       if "table_parts" in row else ""))
            del bench
            if device.type == "cuda":
                torch.cuda.empty_cache()


def stream_bytes(net) -> int:
    """Bytes of weights one fused step reads, as stored: each joined layer's tensors (a packed layer's
    buffers, scales included) and biases, the norms and the output projection; the input embedding
    table (one row a step) is left out unless the output projection is that table."""
    from decodegap.measure.weights import module_bytes

    def size(t):
        return t.numel() * t.element_size() if t is not None else 0

    total = size(net.final_norm) + size(net.lm_head)
    for layer in net.layers:
        total += size(layer.in_norm) + size(layer.post_norm)
        for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
            total += module_bytes(lin) if hasattr(lin, "weight_buffers") else size(lin.weight) + size(lin.bias)
    return total


def time_step(run, net, ctx: int, device, copy_Bps: float, n_dev: int, n_host: int, decompose: bool = True) -> dict:
    """One fused model's step at position ctx: a check against the plain-op step, device and host
    time, streamed bytes, and the GEMV / attention / rest decomposition."""
    import torch

    token = torch.zeros(1, dtype=torch.long, device=device)
    position = torch.full((1,), ctx, dtype=torch.long, device=device)
    got = net.decode(token, position)[0].float().clone()  # also the kernels' JIT
    want = net.forward(token, position)[0].float()
    check = float((got - want).norm() / want.norm())

    def step():
        logits = net.decode(token, position)
        token.copy_(logits.argmax(-1))
        position.add_(1)

    replay = capture(step, device, warmup=2)
    replay()
    sync(device)
    dev_ms = device_ms(replay, n_dev, device)
    host = []
    for _ in range(n_host):
        t = time.perf_counter()
        replay()
        int(token.item())
        host.append((time.perf_counter() - t) * 1e3)
    kinds = [k for k, _ in net.launches(token, position)]
    weights_b = stream_bytes(net)
    kv_b = 2 * len(net.layers) * net.n_kv * (ctx + 1) * net.head_dim * net.embed.element_size()
    row = {"check_vs_plain_ops": check, "device_ms": dev_ms, "host_ms": statistics.median(host), "weight_bytes": weights_b,
           "kv_bytes": kv_b, "TBps": (weights_b + kv_b) / dev_ms / 1e9, "copy_fraction": (weights_b + kv_b) / (dev_ms * 1e-3) / copy_Bps,
           "launch_calls": {k: kinds.count(k) for k in set(kinds)}, "step": net.describe()}
    if decompose:
        position.fill_(ctx)

        def only(calls):
            def launch():
                for c in calls:
                    c()
            return launch

        for kind in ("gemv", "attention"):
            calls = [c for k, c in net.launches(token, position) if k == kind]
            row[f"{kind}_ms"] = device_ms(capture(only(calls), device), n_dev, device)
        row["rest_ms"] = dev_ms - row["gemv_ms"] - row["attention_ms"]
        gemvs = [c for k, c in net.launches(token, position) if k == "gemv"]
        roles = step_gemv_roles(net, len(gemvs))
        if roles:  # each role's launches alone, back to back as the ceiling's role chains: which role holds the excess
            row["gemv_role_ms"] = {role: device_ms(capture(only([c for c, r in zip(gemvs, roles) if r == role]), device), n_dev, device)
                                   for role in dict.fromkeys(roles)}
    return row


def step_gemv_roles(net, n_gemvs: int) -> list | None:
    """The role of each of a step's GEMV launches in the step's order (a layer's qkv, o, gate_up and down,
    then lm_head), or None for a step whose GEMVs are not those launches (a packed path's own GEMV)."""
    from decodegap.measure import fused_kernels as fk

    layer_roles = [r for r in fk.ROLES if r != "lm_head"]
    if not net.kernel_format or n_gemvs != len(net.layers) * len(layer_roles) + 1:
        return None
    return layer_roles * len(net.layers) + ["lm_head"]


def step_line(row) -> str:
    parts = f"  GEMV {row['gemv_ms']:.3f} attention {row['attention_ms']:.3f} rest {row['rest_ms']:.3f} ms" if "gemv_ms" in row else ""
    return (f"{row['device_ms']:.3f} ms device, {row['host_ms']:.3f} ms host; {(row['weight_bytes'] + row['kv_bytes']) / 1e9:.3f} GB "
            f"at {row['TBps']:.2f} TB/s ({100 * row['copy_fraction']:.0f} % of copy){parts}; check {row['check_vs_plain_ops']:.1e}")


def card_model(card, device, dtype):
    from decodegap.measure.cards import build_model

    model = build_model(card, str(device), "sdpa", 0)
    return model.to(dtype) if dtype != model.dtype else model


def run_steps(run, cards, models, quants, ctxs, device, dtype, copy_Bps, n_dev, n_host):
    import torch

    from decodegap.measure.fused import FusedModel
    from decodegap.measure.weights import get_weight_path

    out = run.results.setdefault("steps", [])
    for key in models:
        if not run.enough(f"steps {key}", 40):
            continue
        model = card_model(cards[key], device, dtype)
        for quant in quants:
            path = get_weight_path(quant)
            why = path.unavailable(device.type) if quant != "bf16" else None
            for ctx in ctxs:
                if why:
                    out.append({"model": key, "quant": quant, "ctx": ctx, "error": why})
                    continue
                if not run.enough(f"step {key} {quant} ctx {ctx}", 30):
                    continue
                net = None
                try:
                    t = time.perf_counter()
                    net = FusedModel(model, path, ctx + STEP_SLOTS, backend="triton")
                    row = {"model": key, "quant": quant, "ctx": ctx, **time_step(run, net, ctx, device, copy_Bps, n_dev, n_host)}
                    out.append(row)
                    run.say(f"step {key:16s} {quant:14s} ctx {ctx:>5d}: {step_line(row)} ({time.perf_counter() - t:.0f} s)")
                except Exception as exc:  # noqa: BLE001
                    out.append({"model": key, "quant": quant, "ctx": ctx, "error": first_line(exc)})
                    run.say(f"step {key} {quant} ctx {ctx}: {first_line(exc)}")
                finally:
                    del net
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def lever_variants(table, device) -> dict:
    """The levers, each as the change to the GPU's table entry it makes (launch.resolve's dict form)."""
    from decodegap.measure import fused_kernels as fk

    out = {"table": {}}
    if fk.pdl_available(device) is None:
        on = table.pdl_anywhere()  # a table with PDL for some steps: "pdl off" turns it off for all
        out["pdl off" if on else "pdl on"] = {"pdl": not on}
        if on:
            out["pdl without prefetch"] = {"pdl_prefetch": 0}
        for steps, per_sm in PDL_PREFETCH:  # and the first programs' first loop steps prefetched into L2 before the wait
            out[f"pdl prefetch {steps}x{per_sm}/SM"] = {"pdl": True, "pdl_prefetch": steps, "pdl_prefetch_per_sm": per_sm}
        # the attention prefetching o's weight into L2 (the lever l2_ahead), and after it gate_up's first rows
        if table.l2_ahead:
            out["l2 ahead off"] = {"l2_ahead": {f: None for f in fk.FORMATS}}
        for priority in ("evict_last", "evict_normal"):
            for mib in L2_AHEAD_MIB:
                change = {"l2_ahead": {f: priority for f in fk.FORMATS}, "l2_ahead_mib": mib}
                for at in fk.L2_AHEAD_AT:
                    variant = {**change, "l2_ahead_at": at}
                    got = fk.resolve(variant, device)
                    if (got.l2_ahead, got.l2_ahead_mib, got.l2_ahead_at) != (table.l2_ahead, table.l2_ahead_mib, table.l2_ahead_at):
                        out[f"l2 ahead {priority}" + (f" + gate_up {mib} MiB" if mib else "") + f" at {at}"] = variant
    att = table.attention
    out["attention masked" if att.skip_empty else "attention skip-empty"] = {"attention": {"skip_empty": not att.skip_empty}}
    if att.combine == "separate":
        out["attention in-split combine"] = {"attention": {"combine": "in_split", "skip_empty": False}}
        # the separate combine as one program a query head, or spread over 32 columns of it
        out["attention combine by head" if att.combine_cols else "attention combine cols32"] = {
            "attention": {"combine_cols": 0 if att.combine_cols else 32}}
    default = fk.LAUNCH_SHAPES["default"].attention
    if default != att:
        out["attention default shape"] = {"attention": default.as_dict()}
    for norm in fk.NORMS:  # every format's norm per program, its statistic summed by the GEMV before, or x normalised apart
        out[f"norm {norm}"] = {"norm": norm}
    for fmt in ("dense", "fp8", "int4"):  # the GEMVs' inputs that the step writes as float32 (bf16 values)
        now = table.x_fp32.get(fmt, False)  # true, false, or the card widths it is on for
        for on in ([True, False] if isinstance(now, list) else [not now]):
            out[f"{fmt} x fp32 {'on' if on else 'off'}"] = {"x_fp32": {fmt: on}}
    for fmt in ("int4", "fp8"):  # the GEMV inputs written as f16 pairs (int4_pairs.py, fp8_pairs.py)
        now = table.x_pairs.get(fmt, False)
        for on in ([True, False] if isinstance(now, list) else [not now]):
            out[f"{fmt} x pairs {'on' if on else 'off'}"] = {"x_pairs": {fmt: on}}
    for read, roles in LOAD_AHEAD:  # each loop step's weights loaded one step ahead, in these roles (on where the table has it off)
        now = table.load_ahead.get(read, [])
        flipped = sorted(set(now) ^ set(roles), key=fk.ROLES.index)
        out[f"{read} load ahead {'+'.join(roles)} {'off' if set(roles) <= set(now) else 'on'}"] = {"load_ahead": {read: flipped}}
    for fmt, words in (("int4", 2), ("int4", 4), ("fp8", 2), ("fp8", 4)):
        # the pair reads summing 2 or 4 words' halves in f16 before float32 (f16_words), at the table's shapes
        read, pairs = f"{fmt}_pairs", ("qkv", "gate_up", "down")
        change = {"gemv": {read: {r: {**table.gemv_for(read, r).as_dict(), "f16_words": words} for r in pairs}}}
        widths = {w: {r: {**table.gemv_for(read, r, int(w)).as_dict(), "f16_words": words} for r in pairs}
                  for w, reads in table.gemv_by_hidden.items() if read in reads}
        if widths:
            change["gemv_by_hidden"] = {w: {read: shapes} for w, shapes in widths.items()}
        out[f"{fmt} pairs f16 words {words}"] = change
    # o reading the attention's output as fp8's halves (o_pairs), at fp8's o shapes or the pairs' qkv ones
    for words, read, role, tag in ((1, "fp8", "o", ""), (4, "fp8", "o", ""), (4, "fp8_pairs", "qkv", " qkv shape")):
        o_at = lambda shape, words=words: {**shape.as_dict(), "f16_words": words}  # noqa: E731
        change = {"o_pairs": {"fp8": True}, "gemv": {"fp8_pairs": {"o": o_at(table.gemv_for(read, role))}}}
        widths = {w: {"fp8_pairs": {"o": o_at(table.gemv_for(read, role, int(w)))}}
                  for w, reads in table.gemv_by_hidden.items() if role in reads.get(read, {})}
        if widths:
            change["gemv_by_hidden"] = widths
        out[f"fp8 o pairs f16 words {words}{tag}"] = change
    for fmt in ("dense", "fp8", "int4"):  # x as a tile in the roles without a norm prologue (o, down)
        flipped = {role: {**table.gemv_for(fmt, role).as_dict(), "x_tile": not table.gemv_for(fmt, role).x_tile} for role in ("o", "down")}
        out[f"{fmt} o/down x_tile {'off' if table.gemv_for(fmt, 'o').x_tile else 'on'}"] = {"gemv": {fmt: flipped}}
    return out


def chosen_levers(names, device) -> dict | None:
    """The levers part's variants named on the command line, with the table first (None: all); an
    unknown name is an error that lists the known ones. A name that is a JSON object is a change of its
    own (launch.resolve's dict form, checked by it: '{"down": {"rows": 4, "block_k": 256, "warps": 4}}'
    runs the bf16 down GEMV at that shape on every card width), for shapes the list does not name."""
    if not names:
        return None
    from decodegap.measure import fused_kernels as fk

    known = lever_variants(fk.resolve(None, device), device)
    given = {}
    for name in names:
        if name.lstrip().startswith("{"):
            try:
                given[name] = json.loads(name)
                fk.resolve(given[name], device)
            except (ValueError, TypeError) as exc:  # json's errors are ValueErrors
                raise SystemExit(f"floor_limit: lever {name!r} is no launch-shapes change: {exc}") from None
    unknown = [n for n in names if n not in known and n not in given]
    if unknown:
        raise SystemExit(f"floor_limit: unknown lever(s) {', '.join(map(repr, unknown))}; levers here: {', '.join(map(repr, known))}"
                         " (or a change as a JSON object)")
    return {"table": {}, **{n: given.get(n, known.get(n)) for n in names}}


def lever_applies(change: dict, fmt: str, hidden: int) -> bool:
    """Whether a change by card width (refine's form) touches a step of this format and width: its
    width, and a read of the format (dense only through lm_head, which every format reads dense)."""
    reads = change["gemv_by_hidden"].get(str(hidden), {})  # JSON's keys: the widths as strings
    return any(read in (fmt, f"{fmt}_pairs") or (read == "dense" and (fmt == "dense" or "lm_head" in roles))
               for read, roles in reads.items())


def refined_levers(paths, device) -> dict:
    """The refine part's changes in saved floor_limit.json files as levers, "refined <model> <quant>" each
    (a run on another machine confirms them: --parts levers --levers-from FILE). A file that cannot be
    read, is no floor_limit.json or holds no refine part is an error that names it."""
    from decodegap.measure import fused_kernels as fk

    out = {}
    for path in paths:
        try:
            results = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"floor_limit --levers-from: cannot read {path}: {exc}") from None
        rows = results.get("refine") if isinstance(results, dict) else None
        if not isinstance(rows, list) or not rows:
            raise SystemExit(f"floor_limit --levers-from: {path} holds no refine part (run it with --parts refine)")
        for row in rows:
            if row.get("change"):
                name = f"refined {row['model']} {row['quant']}"
                if name in out:  # the same card and format in another file: both run, told apart by the file
                    name = f"{name} ({Path(path).parent.name}/{Path(path).name})"
                try:
                    fk.resolve(row["change"], device)
                except (ValueError, TypeError) as exc:
                    raise SystemExit(f"floor_limit --levers-from: {path}: {name}'s change is no launch-shapes change: {exc}") from None
                out[name] = row["change"]
    if not out:
        print(f"floor_limit --levers-from: no refine row of {', '.join(map(str, paths))} changed a shape: the table's step alone",
              file=sys.stderr)
    return out


def run_levers(run, cards, models, quants, ctxs, device, dtype, copy_Bps, n_dev, n_host, variants=None):
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused import FusedModel
    from decodegap.measure.weights import get_weight_path

    out = run.results.setdefault("levers", [])
    table = fk.resolve(None, device)
    variants = variants or lever_variants(table, device)
    if device.type != "cuda":  # the interpreter (--smoke): the mechanics, once
        variants, quants = dict(list(variants.items())[:2]), quants[:1]
    for key in models:
        if not run.enough(f"levers {key}", 40):
            continue
        model = card_model(cards[key], device, dtype)
        for quant in [q for q in quants if q in ("bf16", "fp8", "int4-triton")]:
            for ctx in ctxs:
                if not run.enough(f"levers {key} {quant} ctx {ctx}", 30):
                    continue
                net = FusedModel(model, get_weight_path(quant), ctx + STEP_SLOTS, backend="triton")
                base = None
                fmt = formats_of([quant])[0]
                for name, change in variants.items():
                    if set(change or {}) in ({"gemv"}, {"x_fp32"}, {"x_pairs"}, {"load_ahead"}) and \
                            not {fmt, f"{fmt}_pairs"} & set(change[next(iter(change))]):
                        continue  # a lever of another storage format's GEMVs only
                    if set(change or {}) == {"gemv_by_hidden"} and not lever_applies(change, fmt, net.embed.shape[1]):
                        continue  # a change of another card width's or another format's GEMVs only: the table's step
                    if set(change or {}) == {"norm"} and fk.resolve(change, device).norm_for(fmt) == table.norm_for(fmt):
                        continue  # the table's own norm for this format: the table's step
                    if set(change or {}) == {"pdl_prefetch"} and not table.prefetch_for(fmt):
                        continue  # no prefetch in the table for this format: the table's step
                    if "o_pairs" in (change or {}) and fmt != "fp8":
                        continue  # a lever of fp8's o only
                    if not run.enough(f"lever {key} {quant} ctx {ctx} {name}", 15):
                        continue
                    try:
                        net.set_launch_shapes(change or None)
                        row = time_step(run, net, ctx, device, copy_Bps, n_dev, n_host, decompose=False)
                        base = base or row["device_ms"]
                        out.append({"model": key, "quant": quant, "ctx": ctx, "lever": name, "change": change, **row,
                                    "x_table": base / row["device_ms"]})
                        run.say(f"lever {key} {quant} ctx {ctx} {name:28s} {row['device_ms']:.3f} ms device "
                                f"({base / row['device_ms']:.3f}x the table's), {row['host_ms']:.3f} ms host; check {row['check_vs_plain_ops']:.1e}")
                    except Exception as exc:  # noqa: BLE001
                        out.append({"model": key, "quant": quant, "ctx": ctx, "lever": name, "error": first_line(exc)})
                        run.say(f"lever {key} {quant} ctx {ctx} {name}: {first_line(exc)}")
                del net
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        del model


def run_tune(run, cards, models, quants, ctxs, device, dtype, copy_Bps, n_dev, n_host, budget_s, smoke, norm=None,
             x_fp32=False, attention=True, x_pairs=()):
    from decodegap.measure import fused_kernels as fk

    budget = min(budget_s, run.left_s() - 30)
    if budget < 10:
        run.results["skipped"].append("tune")
        run.say("skipped (deadline): tune")
        return
    kw = {}
    if smoke:  # the interpreter: a few candidates, to run the mechanics
        kw = {"gemv_candidates": {f: [(64, 256, 4), (256, 2048, 4)] for f in fk.FORMATS}, "layers": 1,
              "attention_candidates": [fk.AttentionConfig(), fk.AttentionConfig(64, 4, 4, 2, False, "in_split")]}
    formats = sorted(formats_of(quants), key=lambda f: f == "dense")  # the guessed tables (fp8, int4) first: bf16's is measured
    if norm:  # the norm lever to tune under, for every format (its choice carries it: "tuned" runs with it)
        kw["norm"] = {fmt: norm for fmt in fk.FORMATS}
    if x_fp32:  # the GEMVs' written inputs as float32 in every format and width (the lever x_fp32; its choice carries it)
        kw["x_fp32"] = {fmt: True for fmt in fk.FORMATS}
    if x_pairs:  # these formats' GEMV inputs as f16 pairs (the lever x_pairs, over the table's; its choice carries it)
        kw["x_pairs"] = {**fk.resolve(None, device).x_pairs, **{fmt: True for fmt in x_pairs}}
    if not attention:  # the GEMVs alone: attention keeps the table's shape, its one candidate
        kw["attention_candidates"] = [fk.resolve(None, device).attention]
    tuned = fk.tune_launch_shapes(device, [cards[k].architecture for k in models], budget, formats=formats, ctxs=ctxs,
                                  log=run.say, **kw)
    run.results["tuned_launch_shapes"] = tuned
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "tuned_launch_shapes.json").write_text(json.dumps(tuned, indent=1))
    run.say("tuned launch shapes: " + json.dumps({k: tuned[k] for k in ("gemv", "gemv_by_hidden", "attention", "pdl", "x_pairs")
                                                  if k in tuned}))
    choice = {k: tuned[k] for k in ("gemv", "gemv_by_hidden", "attention", "pdl", "pdl_prefetch", "pdl_prefetch_per_sm",
                                    "norm", "x_fp32", "x_pairs", "source") if k in tuned}
    gemvs = {k: v for k, v in choice.items() if k != "attention"}  # the GEMV shapes alone, the table's attention
    variants = {"table": {}, "tuned": choice, "tuned GEMVs": gemvs} if attention else {"table": {}, "tuned GEMVs": gemvs}
    run_levers(run, cards, models, [q for q in quants if q in FORMAT_OF], ctxs, device, dtype, copy_Bps, n_dev, n_host,
               variants=variants)


def run_refine(run, cards, models, quants, ctxs, device, dtype, copy_Bps, n_dev, n_host, budget_s, min_gain, smoke):
    """Each card's GEMV shapes in each kernel format chosen in its whole step at the first context
    (fused_kernels.tune_step.refine_in_step, within budget_s a card and format), then the table's step
    and the refined one side by side at every context, and the change printed as a lever to confirm
    on another machine."""
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused import FusedModel
    from decodegap.measure.weights import get_weight_path

    out = run.results.setdefault("refine", [])
    kw = {}
    if smoke:  # the interpreter: one candidate for one role, to run the mechanics
        kw = {"candidates": {read: [fk.GemvConfig(64, 256, 4)] for read in ("dense", "fp8", "int4", "fp8_pairs", "int4_pairs")},
              "roles": ("down",), "repeats": 1}
        min_gain = -1.0  # any shape taken, so the change's path (the refined step, the lever) runs too
    for key in models:
        if not run.enough(f"refine {key}", 60):
            continue
        model = card_model(cards[key], device, dtype)
        for quant in [q for q in quants if q in FORMAT_OF]:
            budget = min(budget_s, run.left_s() - 20 - 5 * len(ctxs))
            if budget < 10:
                run.results["skipped"].append(f"refine {key} {quant}")
                run.say(f"skipped (deadline): refine {key} {quant}")
                continue
            net = FusedModel(model, get_weight_path(quant), max(ctxs) + STEP_SLOTS, backend="triton")
            try:
                spec, report = fk.refine_in_step(net, ctxs[0], budget_s=budget, min_gain=min_gain, n_replays=n_dev, log=run.say, **kw)
                row = {"model": key, "quant": quant, "ctx": ctxs[0], **report, "steps": {}}
                for i, ctx in enumerate(ctxs):  # the table's step and the refined one, side by side (the order alternating by context)
                    times = {}
                    for name, change in (("table", None), ("refined", spec))[::1 if i % 2 == 0 else -1]:
                        net.set_launch_shapes(change)
                        times[name] = time_step(run, net, ctx, device, copy_Bps, n_dev, n_host, decompose=False)
                    table, mine = times["table"], times["refined"]
                    # the refined kernels must compute what the table's do: their error against plain ops no worse
                    ok = mine["check_vs_plain_ops"] <= 1.5 * table["check_vs_plain_ops"] + 1e-4
                    row["steps"][str(ctx)] = {"table_ms": table["device_ms"], "refined_ms": mine["device_ms"],
                                              "x_table": table["device_ms"] / mine["device_ms"], "refined_TBps": mine["TBps"],
                                              "check_vs_plain_ops": mine["check_vs_plain_ops"],
                                              "table_check_vs_plain_ops": table["check_vs_plain_ops"], "check_ok": ok}
                    if not ok:
                        run.results.setdefault("checks_failed", []).append(f"refine {key} {quant} ctx {ctx}")
                    run.say(f"refine {key} {quant} ctx {ctx}: table {table['device_ms']:.3f} ms, refined {mine['device_ms']:.3f} ms "
                            f"({table['device_ms'] / mine['device_ms']:.3f}x the table's); check {mine['check_vs_plain_ops']:.1e} "
                            f"(table {table['check_vs_plain_ops']:.1e}){'' if ok else ' FAILED'}")
                run.say(f"refine {key} {quant}: as a lever: " + (f"'{json.dumps(report['change'])}'" if report["change"] else "none (the table's shapes)"))
            except Exception as exc:  # noqa: BLE001 - one card and format's failure is a row; the others still run
                row = {"model": key, "quant": quant, "ctx": ctxs[0], "error": first_line(exc)}
                run.say(f"refine {key} {quant}: {first_line(exc)}")
            out.append(row)
            del net
            if device.type == "cuda":
                torch.cuda.empty_cache()
        del model


# ----------------------------------------------------------------------------- helpers and main


def formats_of(quants) -> list:
    return [FORMAT_OF[q] for q in quants if q in FORMAT_OF] or ["dense"]


def layouts(cards, models) -> dict:
    """HeadLayout -> layers, for the cards' distinct head layouts (28/4/128 Qwen, 32/8/128 Llama and Mistral)."""
    from decodegap.measure import fused_kernels as fk

    out = {}
    for key in models:
        a = cards[key].architecture
        hq = a["num_attention_heads"]
        out.setdefault(fk.HeadLayout(hq, a["num_key_value_heads"], a.get("head_dim") or a["hidden_size"] // hq), a["num_hidden_layers"])
    return out


def layout_name(h) -> str:
    return f"{h.n_heads}/{h.n_kv}/{h.head_dim}"


def attention_variants(table, device) -> dict:
    """Ours at the GPU's table entry, each attention lever, and a few shapes."""
    from decodegap.measure import fused_kernels as fk

    att = table.attention
    if device.type != "cuda":  # the interpreter (--smoke): each lever once
        return {"table": att, "masked in-split": dataclasses.replace(att, skip_empty=False, combine="in_split")}
    out = {"table": att, "masked": dataclasses.replace(att, skip_empty=False),
           "masked in-split": dataclasses.replace(att, skip_empty=False, combine="in_split"),
           "bt32 x4/SM masked": fk.AttentionConfig(32, 4, 4, 2, False, "separate"),
           "bt32 x8/SM masked": fk.AttentionConfig(32, 8, 4, 2, False, "separate"),
           "bt64 x4/SM masked": fk.AttentionConfig(64, 4, 4, 2, False, "separate"),
           "bt128 x4/SM w8 masked": fk.AttentionConfig(128, 4, 8, 2, False, "separate"),
           # longer splits (fewer programs, longer loops), deeper pipelines, and the combine inside the splits
           "bt64 x2/SM w8 masked": fk.AttentionConfig(64, 2, 8, 2, False, "separate"),
           "bt128 x2/SM w8 masked": fk.AttentionConfig(128, 2, 8, 2, False, "separate"),
           "bt64 x4/SM st3 masked": fk.AttentionConfig(64, 4, 4, 3, False, "separate"),
           "bt64 x8/SM masked": fk.AttentionConfig(64, 8, 4, 2, False, "separate"),
           "bt64 x4/SM masked in-split": fk.AttentionConfig(64, 4, 4, 2, False, "in_split"),
           "bt128 x4/SM w8 masked in-split": fk.AttentionConfig(128, 4, 8, 2, False, "in_split"),
           # the combine spread over a head's columns (more programs, each a quarter or an eighth of the
           # splits' weighted V), and more split programs with deeper pipelines (the long contexts)
           "table cols32": dataclasses.replace(att, combine_cols=32),
           "table cols16": dataclasses.replace(att, combine_cols=16),
           "bt32 x8/SM st3 cols32": fk.AttentionConfig(32, 8, 4, 3, False, "separate", 32),
           "bt64 x8/SM st3 cols32": fk.AttentionConfig(64, 8, 4, 3, False, "separate", 32),
           "bt32 x16/SM st3 cols32": fk.AttentionConfig(32, 16, 4, 3, False, "separate", 32),
           "bt64 x4/SM st4 cols32": fk.AttentionConfig(64, 4, 4, 4, False, "separate", 32),
           "bt128 x8/SM w8 st3 cols32": fk.AttentionConfig(128, 8, 8, 3, False, "separate", 32)}
    return {n: c for i, (n, c) in enumerate(out.items()) if c not in list(out.values())[:i]}


def smoke_cards(cards) -> dict:
    """The tiny cards widened to whole int4 groups (128 columns), as the tests widen them."""
    wide = {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64}
    return {k: dataclasses.replace(cards[k], architecture={**cards[k].architecture, **wide}) for k in ("tiny-llama", "tiny-qwen")}


def us_by_role_table(rows, width: int, prefix: str, note: str) -> None:
    """A summary table of per-role rows ({model, format, role, us: {variant: us}}): a column per
    variant any row has, headed `prefix` + its name, `--` where a row lacks it."""
    rows = [g for g in rows if g.get("us")]
    if not rows:
        return
    names = list(dict.fromkeys(n for g in rows for n in g["us"]))
    print(f"\n{'model':16s} {'format':6s} {'role':8s} " + " ".join(f"{prefix + n:>{width}s}" for n in names) + note)
    for g in rows:
        print(f"{g['model']:16s} {g['format']:6s} {g['role']:8s} " + " ".join(
            f"{g['us'][n]:{width}.2f}" if n in g["us"] else f"{'--':>{width}s}" for n in names))


def summary(run) -> None:
    r = run.results
    print("\n== summary", flush=True)
    steps = [s for s in r.get("steps", []) if "device_ms" in s]
    if steps:
        print(f"{'model':16s} {'quant':14s} {'ctx':>6s} {'dev ms':>8s} {'host ms':>8s} {'GB':>7s} {'TB/s':>6s} {'%copy':>6s} "
              f"{'GEMV ms':>8s} {'attn ms':>8s} {'rest ms':>8s}")
        for s in steps:
            print(f"{s['model']:16s} {s['quant']:14s} {s['ctx']:>6d} {s['device_ms']:8.3f} {s['host_ms']:8.3f} "
                  f"{(s['weight_bytes'] + s['kv_bytes']) / 1e9:7.3f} {s['TBps']:6.2f} {100 * s['copy_fraction']:6.1f} "
                  f"{s.get('gemv_ms', float('nan')):8.3f} {s.get('attention_ms', float('nan')):8.3f} {s.get('rest_ms', float('nan')):8.3f}")
    for s in r.get("steps", []):
        if "error" in s:
            print(f"{s['model']:16s} {s['quant']:14s} {s['ctx']:>6d} cannot run: {s['error'][:120]}")
    ceil = [c for c in r.get("ceiling", []) if "twin_ms" in c]
    if ceil:
        print(f"\n{'model':16s} {'format':6s} {'GB':>7s} {'launches':>8s} {'read ms':>8s} {'TB/s':>6s} {'PDL ms':>7s} {'one ms':>8s} {'TB/s':>6s} "
              f"{'GEMV ms':>8s} {'x read':>7s} {'target ms':>9s} {'bound ms':>8s} {'TB/s':>6s} {'target':>6s} {'step':>6s}")
        steps_by = {(s["model"], FORMAT_OF.get(s["quant"])): s for s in reversed(steps) if "gemv_ms" in s}
        ceil_rows = []
        for c in ceil:
            if (c["model"], c["format"]) in steps_by:  # computed here, so a file saved before the bound (or a target) changed shows it
                c = {**c, **read_only_bound(c, steps_by[(c["model"], c["format"])])}
            gm = (f"{c['step_gemv_ms']:8.3f} {c['gemv_over_twin']:7.2f} {c['target_step_ms']:9.3f} {c['bound_ms']:8.3f} "
                  f"{c['bound_TBps']:6.2f} {c['target_TBps']:6.2f} {c['step_TBps']:6.2f}") if "bound_ms" in c else \
                f"{'--':>8s} {'--':>7s} {'--':>9s} {'--':>8s} {'--':>6s} {'--':>6s} {'--':>6s}"
            pdl = min((c[k] for k in ("twin_pdl_ms", "twin_pdl_ahead_ms") if k in c), default=None)
            print(f"{c['model']:16s} {c['format']:6s} {c['bytes'] / 1e9:7.3f} {c['launches']:>8d} {c['twin_ms']:8.3f} {c['twin_TBps']:6.2f} "
                  + (f"{pdl:7.3f} " if pdl else f"{'--':>7s} ") +
                  f"{c['one_launch_ms']:8.3f} {c['one_launch_TBps']:6.2f} {gm}")
            ceil_rows.append(c)
        by_role = [c for c in ceil_rows if c.get("roles_over_read")]
        if by_role:
            print(f"\n{'model':16s} {'format':6s} {'role':8s} {'GEMV ms':>8s} {'read ms':>8s} {'x read':>7s} {'excess ms':>9s}"
                  "  (a role's launches of a step alone; read: the same bytes read only, the fastest way launched)")
            for c in by_role:
                for role, v in c["roles_over_read"].items():
                    print(f"{c['model']:16s} {c['format']:6s} {role:8s} {v['gemv_ms']:8.3f} {v['read_ms']:8.3f} {v['x_read']:7.2f} "
                          f"{v['excess_ms']:9.3f}")
    pers = [p for p in r.get("persistent", []) if "launches" in p or "barrier" in p]
    if pers:
        names = [n for n in PERSISTENT_VARIANTS if any(n in p for p in pers)]
        if r.get("barrier_us"):
            print("\na grid barrier alone: " + "; ".join(f"{k} {v:.2f} us" for k, v in r["barrier_us"].items()))
        print(f"\n{'model':16s} {'chain':10s} {'GB':>7s} " + " ".join(f"{n:>16s}" for n in names)
              + f" {'bound ms':>8s} {'TB/s':>6s} {'target':>6s}  (ms and TB/s of the weights; bound: fastest with barriers + the step's attention and rest)")
        for p in pers:
            cells = [f"{p[n]['ms']:7.3f} {p[n]['TBps']:5.2f}" if n in p else "--" for n in names]
            bound = f"{p['bound_ms']:8.3f} {p['bound_TBps']:6.2f} {p['target_TBps']:6.2f}" if "bound_ms" in p else f"{'--':>8s} {'--':>6s} {'--':>6s}"
            what = "bf16 GEMV" if p.get("chain") == "gemv" else f"{p['format']} read"
            print(f"{p['model']:16s} {what:10s} {p['bytes'] / 1e9:7.3f} " + " ".join(f"{c:>16s}" for c in cells) + f" {bound}")
    att = r.get("attention", [])
    if att:
        print(f"\n{'layout':10s} {'ctx':>6s} {'ours best (variant)':>34s} {'flash':>8s} {'cudnn':>8s} {'dispatch':>8s}  us/layer")
        for a in att:
            ours = {n: v["us"] for n, v in a["ours"].items() if "us" in v}
            best = min(ours, key=ours.get) if ours else None
            sd = [a["sdpa"].get(n, {}).get("us") for n in ("sdpa flash", "sdpa cudnn", "sdpa dispatcher")]
            txt = f"{ours[best]:.2f} ({best})" if best else "--"
            print(f"{a['layout']:10s} {a['ctx']:>6d} {txt:>34s} " + " ".join(f"{v:8.2f}" if v else f"{'--':>8s}" for v in sd))
    gemv = [g for g in r.get("gemv", []) if "us" in g]
    if gemv:
        print(f"\n{'model':16s} {'format':6s} " + " ".join(f"{role:>17s}" for role in ("qkv", "o", "gate_up", "down", "lm_head"))
              + "  (GB/s, x cuBLAS time)")
        for key in dict.fromkeys(g["model"] for g in gemv):
            for fmt in dict.fromkeys(g["format"] for g in gemv):
                by_role = {g["role"]: g for g in gemv if g["model"] == key and g["format"] == fmt}
                if by_role:
                    cells = [f"{by_role[role]['GBps']:6.0f}" + (f" {by_role[role]['us'] / by_role[role]['cublas_us']:5.2f}x"
                             if "cublas_us" in by_role[role] else "") if role in by_role else "--"
                             for role in ("qkv", "o", "gate_up", "down", "lm_head")]
                    print(f"{key:16s} {fmt:6s} " + " ".join(f"{c:>17s}" for c in cells))
    layout = [g for g in r.get("layout", []) if g.get("us")]
    if layout:
        names = list(dict.fromkeys(n for g in layout for n in g["us"]))
        print(f"\n{'model':16s} {'role':8s} " + " ".join(f"{n:>14s}" for n in names) + "  (GB/s of the weight's bytes)")
        for g in layout:
            print(f"{g['model']:16s} {g['role']:8s} " + " ".join(
                f"{g['bytes'] / g['us'][n] / 1e3:14.0f}" if n in g["us"] else f"{'--':>14s}" for n in names))
    us_by_role_table(r.get("prologue", []), 10, "", "  (us; norm statistic per program, given as a sum, x given normalised)")
    l2 = [g for g in r.get("l2", []) if "l2_us" in g]
    if l2:
        print(f"\n{'model':16s} {'format':6s} {'role':8s} {'MiB':>6s} {'HBM us':>8s} {'L2 us':>8s} {'x':>5s} {'read HBM':>9s} {'read L2':>8s} {'x':>5s}")
        for g in l2:
            print(f"{g['model']:16s} {g['format']:6s} {g['role']:8s} {g['stored_bytes'] / 2**20:6.1f} {g['hbm_us']:8.2f} {g['l2_us']:8.2f} "
                  f"{g['l2_speedup']:5.2f} {g['read_hbm_us']:9.2f} {g['read_l2_us']:8.2f} {g['read_l2_speedup']:5.2f}")
    us_by_role_table(r.get("stages", []), 9, "st ", "  (us, pipelining depth)")
    levers = [lv for lv in r.get("levers", []) if "device_ms" in lv]
    if levers:
        print(f"\n{'model':16s} {'quant':12s} {'ctx':>6s} {'lever':30s} {'dev ms':>8s} {'x table':>8s}")
        for lv in levers:
            print(f"{lv['model']:16s} {lv['quant']:12s} {lv['ctx']:>6d} {lv['lever']:30s} {lv['device_ms']:8.3f} {lv['x_table']:8.3f}")
    refined = [f for f in r.get("refine", []) if f.get("steps")]
    if refined:
        print(f"\n{'model':16s} {'quant':12s} {'ctx':>6s} {'table ms':>9s} {'refined':>9s} {'x table':>8s}  change (shapes chosen in the step)")
        for f in refined:
            for ctx, v in f["steps"].items():
                print(f"{f['model']:16s} {f['quant']:12s} {ctx:>6s} {v['table_ms']:9.3f} {v['refined_ms']:9.3f} {v['x_table']:8.3f}  "
                      + (json.dumps(f["change"]) if f["change"] else "none"))
    if r.get("tuned_launch_shapes"):
        t = r["tuned_launch_shapes"]
        print("\ntuned launch shapes:", json.dumps({k: t[k] for k in ("gemv", "attention", "pdl") if k in t}))
    if r.get("checks_failed"):
        print(f"\nCHECKS FAILED: {r['checks_failed']}")
    print(f"skipped: {r['skipped'] or 'nothing'}; errors: {[e['part'] for e in r['errors']] or 'none'}; "
          f"{time.perf_counter() - run.t0:.0f} s", flush=True)


def main(argv=None) -> int:
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for floor_limit.json and tuned_launch_shapes.json (required to measure)")
    ap.add_argument("--summary", type=Path, metavar="JSON",
                    help="print the summary of a saved floor_limit.json (no GPU; the read-only bound computed where it lacks it) and stop")
    ap.add_argument("--deadline-s", type=float, default=500, help="seconds from the start after which no new part or item starts")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b"])
    ap.add_argument("--quant", nargs="+", default=["bf16", "fp8", "int4-triton", "int4-tinygemm"])
    ap.add_argument("--ctx", nargs="+", type=int, default=[2048, 16384], help="contexts of the whole step and the levers")
    ap.add_argument("--attn-ctx", nargs="+", type=int, default=[2048, 4096, 8192, 16384])
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--lever-models", nargs="+", default=None, help="cards the levers run on (default: the first of --models)")
    ap.add_argument("--levers", nargs="+", default=None,
                    help="the levers part's variants to run beside the table (names as it prints them, e.g. 'norm sum', or a launch-shapes change as a JSON object; default: all)")
    ap.add_argument("--levers-from", nargs="+", type=Path, default=[], metavar="JSON",
                    help="also run, as levers, the shape changes the refine part saved in these floor_limit.json files")
    ap.add_argument("--tune-budget-s", type=float, default=90, help="tune_launch_shapes' budget (each candidate compiles: 1-2 s)")
    ap.add_argument("--tune-norm", choices=("program", "sum", "apart"), default=None,
                    help="the norm lever to tune every format under (default: the GPU's table entry's, per format)")
    ap.add_argument("--tune-x-fp32", action="store_true",
                    help="tune every format with the GEMVs' written inputs in float32 (the lever x_fp32; default: the table's)")
    ap.add_argument("--tune-x-pairs", nargs="+", default=[], choices=("int4", "fp8"),
                    help="tune these formats with their GEMV inputs as f16 pairs (the lever x_pairs; default: the table's)")
    ap.add_argument("--no-tune-attention", dest="tune_attention", action="store_false",
                    help="tune the GEMVs alone (attention keeps the table's shape) and time the steps with the tuned GEMVs against the table")
    ap.add_argument("--refine-budget-s", type=float, default=120,
                    help="the refine part's budget a card and format (a candidate in the whole step: about 0.5 s on the H200)")
    ap.add_argument("--refine-min-gain", type=float, default=0.005,
                    help="the refine part takes a shape when the step runs at least 1 + this times as fast with it, twice")
    ap.add_argument("--gpu", default="h200", help="key of config/gpus.yaml: its datasheet bandwidth beside the copy bandwidth")
    ap.add_argument("--smoke", action="store_true", help="the CPU under Triton's interpreter, tiny cards, float32: a test of the script")
    a = ap.parse_args(argv)
    if a.summary:
        try:
            results = json.loads(a.summary.read_text())
        except (OSError, ValueError) as exc:
            print(f"floor_limit --summary: cannot read {a.summary}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(results, dict) or "skipped" not in results:
            print(f"floor_limit --summary: {a.summary} is not a floor_limit.json (no 'skipped' key)", file=sys.stderr)
            return 2
        run = Run(0, a.summary.parent, t0)
        run.results = results
        summary(run)
        return 0
    if a.out is None:
        ap.error("--out is required to measure (or --summary JSON to print a saved run)")

    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.bandwidth import copy_bandwidth_Bps

    cards = load_models()
    if a.smoke:
        why = fk.usable_here("cpu")
        if why:
            print(f"floor_limit --smoke: {why}", file=sys.stderr)
            return 2
        cards = smoke_cards(cards)  # one card for the model parts, both cards' head layouts for attention
        a.models, a.ctx, a.attn_ctx = ["tiny-qwen", "tiny-llama"], [40], [40]
        a.lever_models = a.lever_models or a.models[:1]
        device, dtype, n_dev, n_host = torch.device("cpu"), torch.float32, 1, 1
    else:
        if not torch.cuda.is_available():
            print("floor_limit: needs a CUDA GPU (it times on the device); --smoke runs it on the CPU", file=sys.stderr)
            return 2
        device, dtype, n_dev, n_host = torch.device("cuda"), torch.bfloat16, 50, 30
    if a.levers_from and "levers" not in a.parts:
        ap.error("--levers-from runs its changes in the levers part: add levers to --parts")
    # the levers (named, JSON, or a saved run's refine changes) checked before any GPU time: a bad one stops here
    variants = chosen_levers(a.levers, device) if "levers" in a.parts else None
    if a.levers_from:  # the refine part's changes from earlier runs, beside the table (and --levers)
        variants = {**(variants or {"table": {}}), **refined_levers(a.levers_from, device)}
    run = Run(a.deadline_s, a.out, t0)
    gpu = load_gpu(a.gpu) if not a.smoke else None
    copy_Bps = copy_bandwidth_Bps(device.type)
    import triton

    from decodegap.measure.environment import gpu_uuid

    env = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (Triton interpreter)",
           "torch": torch.__version__, "triton": triton.__version__, "sm_count": fk.sm_count_of(device),
           "gpu_key": fk.gpu_key_of(device), "copy_Bps": copy_Bps, "datasheet_Bps": gpu.b_peak_Bps if gpu else None,
           "launch_shapes": fk.resolve(None, device).as_dict(), "argv": sys.argv if argv is None else argv,
           "gpu_uuid": gpu_uuid(0) if device.type == "cuda" else None}  # the machine: calls on a lent GPU land on different ones
    run.results["environment"] = env
    run.say(f"on {env['device']} {env['gpu_uuid'] or ''} (torch {env['torch']}, Triton {env['triton']}, {env['sm_count']} SMs, table "
            f"'{env['gpu_key']}'); device copy {copy_Bps / 1e9:.0f} GB/s" + (f", datasheet {gpu.b_peak_Bps / 1e12:.1f} TB/s" if gpu else ""))
    lever_models = a.lever_models or a.models[:1]
    model_parts = a.models[:1] if a.smoke else a.models  # the interpreter costs a tenth of a second a launch: one card
    with torch.inference_mode():
        for name in a.parts:
            if not run.enough(f"part {name}", 20):
                continue
            if name == "checks":
                run.part(name, run_checks, run, cards, a.models, a.quant, device, dtype, 39 if a.smoke else 2047)
            elif name == "gemv":
                run.part(name, run_gemv, run, cards, model_parts, a.quant, device, dtype)
            elif name == "attention":
                run.part(name, run_attention, run, cards, a.models, a.attn_ctx, device, dtype)
            elif name == "ceiling":
                run.part(name, run_ceiling, run, cards, model_parts, a.quant, device, dtype, copy_Bps)
            elif name == "persistent":
                run.part(name, run_persistent, run, cards, model_parts, a.quant, device, dtype, copy_Bps)
            elif name == "steps":
                run.part(name, run_steps, run, cards, model_parts, a.quant, a.ctx, device, dtype, copy_Bps, n_dev, n_host)
            elif name == "layout":
                run.part(name, run_layout, run, cards, model_parts, device, dtype)
            elif name == "l2":
                run.part(name, run_l2, run, cards, model_parts, a.quant, device, dtype)
            elif name == "prologue":
                run.part(name, run_prologue, run, cards, model_parts, a.quant, device, dtype)
            elif name == "stages":
                run.part(name, run_stages, run, cards, model_parts, a.quant, a.ctx, device, dtype, copy_Bps, n_dev, n_host)
            elif name == "levers":
                run.part(name, run_levers, run, cards, lever_models, a.quant, a.ctx, device, dtype, copy_Bps, n_dev, n_host,
                         variants)
            elif name == "refine":
                run.part(name, run_refine, run, cards, model_parts, a.quant, a.ctx, device, dtype, copy_Bps, n_dev, n_host,
                         a.refine_budget_s, a.refine_min_gain, a.smoke)
            else:
                run.part(name, run_tune, run, cards, model_parts, a.quant, a.ctx, device, dtype, copy_Bps, n_dev, n_host,
                         a.tune_budget_s, a.smoke, a.tune_norm, a.tune_x_fp32, a.tune_attention, a.tune_x_pairs)
            run.save()
    summary(run)
    run.save()
    return 1 if run.results.get("checks_failed") else 0


if __name__ == "__main__":
    sys.exit(main())
