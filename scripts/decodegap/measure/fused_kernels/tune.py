"""Choosing launch shapes on the GPU at hand, and the pieces benchmarks time kernels with.

`tune_launch_shapes(device, cards, budget_s)` sweeps a few candidate shapes per GEMV role and weight
format at the cards' shapes, and attention's shapes and levers at the cards' head layouts, each timed
the way the step runs it: launches captured in a CUDA graph and replayed, cycling over enough copies
of the weight (or of the layers' caches) that none is read from L2. It returns the fastest as a
JSON-able dict that `FusedModel(..., gemv_configs=...)` (launch.resolve) takes: the environment stage
calls it once per GPU type and records the result. On a CPU (Triton's interpreter) it runs the same
sweep on host time, which says nothing about a GPU: that is for tests.

`RoleBench` (one GEMV role of a card, in one format: inputs, launch, float32 reference, bytes read)
and `AttentionBench` (one head layout and context: caches per layer, launch, reference, KV bytes) are
what benchmarks/floor_limit.py times and checks too.
"""

from __future__ import annotations

import statistics
import time

import torch

from decodegap.measure.fused_kernels import split_attention as attn
from decodegap.measure.fused_kernels import gemv
from decodegap.measure.fused_kernels.common import pdl_available
from decodegap.measure.fused_kernels.fp8_pairs import x_halves
from decodegap.measure.fused_kernels.int4_pairs import x_pairs as x_pairs_of
from decodegap.measure.fused_kernels.launch import (
    FORMATS, ROLES, AttentionConfig, GemvConfig, gpu_key_of, launch_shapes_for, sm_count_of)
from decodegap.measure.fused_kernels.ops import dequantize

L2_FLUSH_BYTES = 512 * 2**20  # bytes of weight copies cycled per timing: several times the H200's 60 MB L2
GEMV_CANDIDATES = {  # (rows, block_k, warps[, x_tile, stages, load_ahead, loop_stages])
    "dense": [(2, 512, 4), (4, 512, 4), (8, 256, 4), (1, 1024, 4), (2, 1024, 4), (4, 1024, 8), (8, 512, 8),
              (2, 512, 4, True), (1, 1024, 4, True), (4, 512, 4, True)],
    "fp8": [(2, 1024, 4), (4, 1024, 4), (8, 512, 4), (2, 2048, 4), (4, 2048, 8), (8, 1024, 8), (2, 1024, 4, True),
            (4, 1024, 4, True)],
    "int4": [(4, 1024, 4), (8, 1024, 4), (8, 512, 4), (16, 512, 8), (4, 2048, 4), (8, 2048, 8), (4, 1024, 4, True),
             (4, 2048, 4, True), (8, 1024, 4, True)],
    # int4's qkv, gate_up and down reading f16 pairs (the lever x_pairs): the H200 table's shapes, and tiles
    # of 8-16 words a thread, where each thread's input pairs serve 2-4 rows (fused_kernels.ahead --loops:
    # 2.9-3.7 SASS instructions a weight against 3.9-4.1 at the table's 4 words a thread), and load_ahead
    "int4_pairs": [(2, 512, 4), (4, 512, 4), (8, 512, 4), (16, 512, 4), (32, 512, 4), (4, 1024, 4), (8, 1024, 8),
                   (16, 1024, 8), (32, 512, 8), (8, 512, 2), (4, 1024, 4, False, None, True), (8, 1024, 8, False, None, True)],
    # fp8 reading f16 halves (fp8_pairs: a float32 accumulator a word of four weights, so more rows and
    # columns a program fit the registers than in the float32 loop); x_tile: the halves loaded in the
    # words' tile shape (fewer shared-memory barriers on sm_90, fused_kernels.ahead), not yet timed on a GPU
    "fp8_pairs": [(2, 1024, 4), (4, 1024, 4), (8, 512, 4), (8, 1024, 4), (4, 2048, 4), (8, 1024, 8), (16, 512, 4),
                  (16, 1024, 8), (4, 1024, 4, False, None, True), (4, 2048, 4, True), (8, 512, 4, True), (8, 1024, 4, True),
                  (2, 2048, 4, True)],
}
# the loop over K pipelined (loop_stages: cp.async copies into shared memory, 1-3 steps ahead): every
# read's candidates gain smaller steps at 2-4 stages, where the in-flight bytes need no registers
# (fused_kernels.ahead: the pipelined loops take 0.3-1.5 more SASS instructions a weight, LDGSTS and
# LDS, and fp8's halves 27-30 fewer registers at 3 stages). On the H200 (floor_limit_loop_stages_h200.txt)
# they ran every int4 role 1.21-1.43x slower than its best plain shape (so the int4 reads no longer try
# them) and bf16's and fp8's 0.975-1.055x: the table has none; they stay candidates for other GPUs
_PIPELINED = {
    "dense": [(2, 512, 4), (1, 1024, 4), (4, 256, 4)],
    "fp8": [(4, 512, 4), (4, 1024, 4)],
    "fp8_pairs": [(4, 512, 4), (4, 1024, 4), (8, 512, 4), (2, 1024, 4)],
}
for _read, _shapes in _PIPELINED.items():
    GEMV_CANDIDATES[_read] = GEMV_CANDIDATES[_read] + [
        (*shape, False, None, False, loop_stages) for shape in _shapes for loop_stages in (2, 3, 4)]
# int4's pair reads summing 2 or 4 of a thread's words in f16 before float32 (f16_words; fused_kernels.ahead:
# Qwen-2.5-7B's gate_up 3.15 and 3.05 instructions a weight against 3.88, down 3.87 and 3.73 against 4.07)
GEMV_CANDIDATES["int4_pairs"] = GEMV_CANDIDATES["int4_pairs"] + [
    (*shape, False, None, ahead, None, words) for shape, ahead in (((2, 512, 4), False), ((4, 512, 4), False), ((8, 512, 4), False),
                                                                    ((8, 1024, 8), False), ((8, 1024, 8), True), ((4, 1024, 4), True))
    for words in (2, 4)]
# fp8's halves summing 2 or 4 of a thread's words in f16 before float32 (fused_kernels.ahead at the H200 table's
# (4, 2048, 4): Qwen-2.5-7B's qkv 4.29 and 3.80 instructions a weight against 4.90, gate_up 3.97 and 3.62
# against 4.58, down 3.42 and 3.20 against 3.84; 64-72 registers against 90 in qkv and gate_up)
GEMV_CANDIDATES["fp8_pairs"] = GEMV_CANDIDATES["fp8_pairs"] + [
    (*shape, False, None, False, None, words) for shape in ((4, 2048, 4), (4, 1024, 4), (8, 1024, 4), (8, 1024, 8), (8, 2048, 8))
    for words in (2, 4)]
# the H200 table's, then masked (pipelined) blocks at 4-8 programs a multiprocessor, shapes whose
# shared memory lets them all be resident at once (fused_kernels.ahead: 21-39 KB at 2 stages)
ATTENTION_CANDIDATES = [AttentionConfig(32, 2, 4, 2, True, "separate")] + [
    AttentionConfig(block_t, per_sm, warps, stages, False, combine)
    for block_t, per_sm, warps, stages in ((32, 4, 4, 2), (32, 8, 4, 2), (64, 4, 4, 2), (64, 4, 8, 2), (128, 4, 8, 2),
                                           (32, 4, 4, 3))
    for combine in ("separate", "in_split")] + [
    # the separate combine spread over 32 columns a program (the H200 table's since 2026-12-03)
    AttentionConfig(block_t, per_sm, warps, stages, False, "separate", 32)
    for block_t, per_sm, warps, stages in ((32, 4, 4, 3), (64, 8, 4, 3))]


def graph_us(launch, n_copies: int, device, reps: int = 3) -> float:
    """Median microseconds per launch of `launch(i)` over copies i = 0..n_copies-1: on CUDA captured
    as one graph (several rounds over the copies) and replayed `reps` times, as the step replays its
    kernels; elsewhere host time per call (the interpreter: a smoke test, no GPU figure)."""
    if torch.device(device).type != "cuda":
        t = time.perf_counter()
        for i in range(n_copies):
            launch(i)
        return (time.perf_counter() - t) * 1e6 / n_copies
    rounds = max(1, 64 // n_copies)
    for i in range(n_copies):  # compiles and warms outside the capture
        launch(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for i in range(n_copies):
                launch(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (rounds * n_copies))
    return statistics.median(times)


def role_shapes(arch: dict) -> dict:
    """Role -> (rows of the joined weight, K): the fused step's GEMVs at a card's architecture."""
    h, i, hq, hkv = arch["hidden_size"], arch["intermediate_size"], arch["num_attention_heads"], arch["num_key_value_heads"]
    d = arch.get("head_dim") or h // hq
    return {"qkv": ((hq + 2 * hkv) * d, h), "o": (h, hq * d), "gate_up": (2 * i, h), "down": (h, i), "lm_head": (arch["vocab_size"], h)}


def random_operand(fmt: str, n: int, k: int, device, dtype=torch.bfloat16) -> gemv.WeightOperand:
    """A weight of n x k in `fmt` with random stored values (timing does not depend on them), scaled so
    outputs stay near 1."""
    if fmt == "dense":
        return gemv.WeightOperand("dense", (torch.randn(n, k, device=device) / k**0.5).to(dtype))
    if fmt == "fp8":
        return gemv.WeightOperand("fp8", torch.randn(n, k, device=device).to(torch.float8_e4m3fn),
                                  torch.full((n,), k**-0.5, device=device))
    words = torch.randint(-2**31, 2**31 - 1, (n, k // 8), device=device, dtype=torch.int32)
    groups = k // 128
    return gemv.WeightOperand("int4", words, torch.full((n, groups), 0.25 * k**-0.5, device=device, dtype=torch.bfloat16),
                              torch.full((n, groups), 8.0, device=device, dtype=torch.bfloat16))


def _rms(x, g, eps):
    """transformers' RMSNorm in the activations' dtype, as float32."""
    xf = x.float()
    return (g.float() * (xf * torch.rsqrt(xf.pow(2).mean() + eps)).to(x.dtype).float()).to(x.dtype).float()


def _rotate(v, c, s):
    half = v.shape[-1] // 2
    return v * c + torch.cat((-v[..., half:], v[..., :half]), -1) * s


NORM_INPUTS = ("program", "sum", "none")  # how RoleBench feeds a normed role (qkv, gate_up, lm_head) its norm
NORM_INPUT_OF = {"program": "program", "sum": "sum", "apart": "none"}  # the step's norm lever -> what its GEMV kernels get


def step_writes_input(role: str, norm_input: str) -> bool:
    """Whether the step writes this GEMV role's input itself, so that the lever x_fp32 stores it as
    float32: x normalised apart (qkv, gate_up, lm_head given "none") and the MLP's activations (down);
    not the residual stream nor attention's output (o)."""
    return (norm_input == "none" and role != "o") or role == "down"


def as_the_step_reads(table, fmt: str, role: str, hidden: int) -> tuple:
    """How the fused step with launch shapes `table` launches `role`'s GEMV for weights stored as `fmt`
    in a card of width `hidden`: the read (READS: "int4_pairs" or "fp8_pairs" where the table has the
    lever x_pairs), its shape, and RoleBench.launch's input keywords (norm, x_fp32, x_pairs)."""
    norm = NORM_INPUT_OF[table.norm_for(fmt)]
    if table.reads_pairs(fmt, role, hidden):
        return f"{fmt}_pairs", table.gemv_for(f"{fmt}_pairs", role, hidden), {"norm": "none", "x_pairs": True}
    x32 = step_writes_input(role, norm) and table.x_fp32_for(fmt, hidden)
    return fmt, table.gemv_for(fmt, role, hidden), {"norm": norm, "x_fp32": bool(x32)}


class RoleBench:
    """One GEMV role of a card, weights stored as `fmt`: inputs, `copies` weights (enough to cycle
    past L2 on a GPU), `launch(shape, i, norm=...)`, `error(shape, norm=...)` (relative L2 against
    float32 on the same inputs and dequantized weights, NaN-poisoned outputs) and the bytes a launch
    must read. `norm`, for the roles after a norm: "program" (each program sums x's squares: the
    table's step), "sum" (x's sum of squares given, the norm lever "sum"), "none" (x given
    normalised: what any way of normalising once would leave the GEMV)."""

    def __init__(self, role: str, fmt: str, arch: dict, device, dtype=torch.bfloat16, copies: int | None = None,
                 qkv_bias: bool = True):
        self.role, self.fmt, self.device = role, fmt, torch.device(device)
        hq, hkv = arch["num_attention_heads"], arch["num_key_value_heads"]
        self.heads = gemv.HeadLayout(hq, hkv, arch.get("head_dim") or arch["hidden_size"] // hq)
        n, k = self.n, self.k = role_shapes(arch)[role]
        op0 = random_operand(fmt, n, k, device, dtype)
        stored = sum(t.numel() * t.element_size() for t in (op0.weight, op0.scale, op0.zero) if t is not None)
        if copies is None:
            copies = max(1, -(-L2_FLUSH_BYTES // stored)) if self.device.type == "cuda" else 1
        self.ops = [op0] + [random_operand(fmt, n, k, device, dtype) for _ in range(copies - 1)]
        r = lambda *s: torch.randn(*s, device=device).to(dtype)  # noqa: E731
        self.eps, self.x, self.g = 1e-5, r(k), (1 + torch.randn(k, device=device) / 8).to(dtype)
        self.x_sum = self.x.float().pow(2).sum().view(1)  # the norm's statistic, as the GEMV before would add it up
        self.xn = _rms(self.x, self.g, self.eps).to(dtype)  # x normalised, as add_norm writes it
        self.bias = r(n) if role == "qkv" and qkv_bias else None  # Qwen2's q/k/v carry biases
        d = self.heads.head_dim
        self.cos, self.sin = r(64, d // 2), r(64, d // 2)
        self.pos = torch.tensor([5], device=device)
        self.q = torch.empty(hq * d, device=device, dtype=dtype)
        self.kc, self.vc = (torch.empty(hkv, 64, d, device=device, dtype=dtype) for _ in range(2))
        self.out = torch.empty(n // 2 if role == "gate_up" else n, device=device, dtype=dtype)
        self.res = r(n)
        self._pairs = None  # the input as f16 pairs, made on the first launch that asks (x_pairs)
        normed = role in ("qkv", "gate_up", "lm_head")
        self.bytes = stored + k * 2 + (n * 2 if self.bias is not None else 0) + (k * 2 if normed else 0) + \
            (n * 2 if role in ("o", "down") else 0)

    def _normed_input(self, norm: str):
        if norm not in NORM_INPUTS:
            raise ValueError(f"RoleBench: norm {norm!r}: one of {', '.join(NORM_INPUTS)}")
        if norm == "none":
            return self.xn, {"norm_weight": None}
        return self.x, {"norm_weight": self.g, "norm_sum": self.x_sum if norm == "sum" else None}

    def launch(self, shape: GemvConfig, i: int = 0, pdl: bool = False, norm: str = "program", prefetch: int = 0,
               prefetching: int | None = None, x_fp32: bool = False, x_pairs: bool = False) -> None:
        """One launch on weight copy i; x_fp32: the input as float32 holding its values (the lever x_fp32);
        x_pairs: as the f16 pairs the format's weights read (the lever x_pairs: int4_pairs' order, fp8_pairs'
        halves of x / 16; x given normalised)."""
        op = self.ops[i]
        pdl = {"pdl": pdl, "prefetch_steps": prefetch, "prefetching": prefetching}
        x = self.x.float() if x_fp32 else self.x
        if self.role in ("qkv", "gate_up", "lm_head"):
            x, kw = self._normed_input(norm)
            x = x.float() if x_fp32 and norm == "none" else x  # a norm prologue takes x as stored
        if x_pairs:
            if self._pairs is None:
                self._pairs = (x_halves(x) if self.fmt == "fp8" else x_pairs_of(x)).view(-1)
            x = self._pairs
        if self.role == "qkv":
            gemv.qkv_rope(x, op, heads=self.heads, position=self.pos, cos=self.cos, sin=self.sin, q_out=self.q,
                          k_cache=self.kc, v_cache=self.vc, eps=self.eps, shape=shape, bias=self.bias, **pdl, **kw)
        elif self.role == "gate_up":
            gemv.gate_up(x, op, self.out, eps=self.eps, shape=shape, **pdl, **kw)
        elif self.role == "lm_head":
            gemv.linear(x, op, self.out, shape=shape, eps=self.eps, **pdl, **kw)
        else:
            gemv.linear(x, op, self.out, shape=shape, residual=self.res, **pdl)

    def error(self, shape: GemvConfig, norm: str = "program", x_pairs: bool = False) -> float:
        """Relative L2 distance of the kernel's outputs from float32 torch (worst output for qkv); x_pairs:
        the input as f16 pairs (launch's)."""
        for t in (self.q, self.kc, self.vc, self.out):
            t.fill_(float("nan"))
        self.launch(shape, 0, norm=norm, x_pairs=x_pairs)
        w = dequantize(self.ops[0])
        dt = self.x.dtype
        if self.role == "qkv":
            hq, hkv, d = self.heads.n_heads, self.heads.n_kv, self.heads.head_dim
            y = (w @ _rms(self.x, self.g, self.eps) + (self.bias.float() if self.bias is not None else 0)).to(dt).float()
            c, s = self.cos[5].float().repeat(2), self.sin[5].float().repeat(2)
            return max(_rel(self.q, _rotate(y[: hq * d].view(hq, d), c, s).reshape(-1)),
                       _rel(self.kc[:, 5], _rotate(y[hq * d:(hq + hkv) * d].view(hkv, d), c, s)),
                       _rel(self.vc[:, 5], y[(hq + hkv) * d:].view(hkv, d)))
        if self.role == "gate_up":
            y = w @ _rms(self.x, self.g, self.eps)
            return _rel(self.out, torch.nn.functional.silu(y[: self.n // 2]) * y[self.n // 2:])
        if self.role == "lm_head":
            return _rel(self.out, w @ _rms(self.x, self.g, self.eps))
        return _rel(self.out, self.res.float() + w @ self.x.float())


def _rel(got, ref) -> float:
    if torch.isnan(got).any():
        return float("nan")
    return float((got.float() - ref).norm() / ref.norm())


class AttentionBench:
    """Decode attention at one head layout and context: a cache per layer (cycled, as a step reads
    one layer after another), `launch(plan, i)`, `error(plan)` against float32 and the K/V bytes a
    call reads; a plan per config from `plan(config)`."""

    def __init__(self, heads: gemv.HeadLayout, ctx: int, layers: int, device, dtype=torch.bfloat16, cache_len: int | None = None):
        self.heads, self.ctx, self.device = heads, ctx, torch.device(device)
        self.cache_len = cache_len or ctx + 256  # as a session sizes it: the context and the steps after it
        shape = (heads.n_kv, self.cache_len, heads.head_dim)
        self.caches = [(torch.randn(shape, device=device).to(dtype), torch.randn(shape, device=device).to(dtype)) for _ in range(layers)]
        self.q = torch.randn(heads.n_heads * heads.head_dim, device=device).to(dtype)
        self.pos = torch.tensor([ctx], device=device)
        self.out = torch.empty_like(self.q)
        self.scale = heads.head_dim**-0.5
        self.bytes = 2 * heads.n_kv * (ctx + 1) * heads.head_dim * self.q.element_size()
        self._scratch = {}

    def plan(self, config: AttentionConfig) -> attn.AttentionPlan:
        return attn.AttentionPlan.for_cache(self.cache_len, self.heads.n_kv, config, sm_count_of(self.device))

    def launch(self, plan: attn.AttentionPlan, i: int = 0, pdl: bool = False, prefetch: int = 0, only: str | None = None,
               out: torch.Tensor | None = None, l2_ahead=None, l2_priority: str = "evict_last", l2_at: str = "start") -> None:
        """One attention call on layer i's cache; only="split" or "combine": that launch alone (attn.attention);
        out: where it writes (default the query's dtype; int32: fp8's halves for o, the lever o_pairs);
        l2_ahead: tensors its split programs prefetch into L2 under pdl (the lever l2_ahead)."""
        key = (plan.split, plan.n_splits)
        if key not in self._scratch:
            self._scratch[key] = attn.attention_scratch(plan, self.heads, self.device)
        attn.attention(self.q, *self.caches[i], self.pos, self.out if out is None else out, plan=plan, scratch=self._scratch[key], heads=self.heads,
                       scale=self.scale, pdl=pdl, prefetch_steps=prefetch, only=only, l2_ahead=l2_ahead, l2_priority=l2_priority,
                       l2_at=l2_at)

    def error(self, plan: attn.AttentionPlan) -> float:
        self.out.fill_(float("nan"))
        self.launch(plan, 0)
        h = self.heads
        k, v = (t[:, : self.ctx + 1].float() for t in self.caches[0])
        scores = self.q.float().view(h.n_kv, h.group, h.head_dim) @ k.transpose(1, 2) * self.scale
        return _rel(self.out, (scores.softmax(-1) @ v).reshape(-1))

    def sdpa(self, i: int) -> torch.Tensor:
        """SDPA's decode call on the same cache (whichever backend the caller's context allows)."""
        h, (k, v) = self.heads, self.caches[i]
        return torch.nn.functional.scaled_dot_product_attention(
            self.q.view(1, h.n_heads, 1, h.head_dim), k[None, :, : self.ctx + 1], v[None, :, : self.ctx + 1], enable_gqa=True)


def _key(config) -> str:
    """A launch shape as a short JSON key: rows x block_k / warps, or attention's fields."""
    if isinstance(config, GemvConfig):
        return (f"{config.rows}x{config.block_k}/{config.warps}w" + (" x-tile" if config.x_tile else "")
                + (f" st{config.stages}" if config.stages else "") + (" ahead" if config.load_ahead else "")
                + (f" ls{config.loop_stages}" if config.loop_stages else "") + (f" f16x{config.f16_words}" if config.f16_words > 1 else ""))
    c = config
    return (f"bt{c.block_t} sm{c.programs_per_sm} w{c.warps} st{c.stages} {'skip' if c.skip_empty else 'mask'} {c.combine}"
            + (f" cols{c.combine_cols}" if c.combine_cols else ""))


def _pick(times: dict):
    """The candidate with the least summed time over the cases every candidate of the best has."""
    full = max(len(t) for t in times.values())
    return min((c for c, t in times.items() if len(t) == full), key=lambda c: sum(times[c].values()))


def tune_launch_shapes(device, cards: list, budget_s: float = 60.0, *, formats=FORMATS, ctxs=(2048, 16384),
                       layers: int | None = None, top: int = 2, gemv_candidates: dict | None = None,
                       attention_candidates: list | None = None, norm: dict | None = None, x_fp32: dict | None = None,
                       x_pairs: dict | None = None, o_pairs: dict | None = None, log=None) -> dict:
    """The fastest launch shapes at the `cards`' shapes (architecture dicts, as config/models.yaml's
    `architecture`), in about `budget_s` seconds: every GEMV candidate (GEMV_CANDIDATES, or
    `gemv_candidates` {format: [(rows, block_k, warps), ...]}) per format and role on the first card of
    each width (hidden size), the `top` best of that card per role on the other cards of its width;
    each width gets its own choice (the first card's width under "gemv", the others under
    "gemv_by_hidden": the H200 reads 3584- and 4096-wide roles best with different shapes); every attention candidate (ATTENTION_CANDIDATES, or
    `attention_candidates`) per head layout at each of `ctxs`, in the cards' layer counts (or
    `layers`). The GEMVs after a norm run as the step will run them: with the norm lever of `norm`
    ({format: "program" | "sum" | "apart"}; None: the device's table entry's), which the result
    keeps, and their inputs as the lever `x_fp32` has them ({format: true | [card widths]}; None: the
    table entry's), which the result keeps too. Where the lever x_pairs is on for int4 or fp8 at a card's
    width (`x_pairs` {format: true | [card widths]}; None: the table entry's; it needs the format's norm
    apart), that width's qkv, gate_up and down are tuned as the read "<format>_pairs"
    (GEMV_CANDIDATES["int4_pairs"] / ["fp8_pairs"], the input as f16 pairs), the only way the step
    launches them, and the format's own read keeps its other roles; o too where the lever o_pairs is on
    (`o_pairs` {"fp8": true | [card widths]}; None: the table entry's), which the result keeps as well.
    Each candidate is checked once against float32 (a wrong one is dropped). What the budget
    left out is listed under "skipped". Returns launch.resolve's dict form with the timings (us)."""
    t0 = time.perf_counter()
    device = torch.device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # the interpreter's bf16 arithmetic is wrong
    say = log or (lambda msg: None)
    over = lambda share: time.perf_counter() - t0 > budget_s * share  # noqa: E731
    timings, skipped = {"gemv": {}, "attention": {}}, []
    table = launch_shapes_for(gpu_key_of(device))
    norm = dict(table.norm if norm is None else norm)
    # what the GEMVs are tuned under: the norm, and the inputs the step writes (x_fp32, x_pairs, o_pairs)
    under = table.replace(norm=norm, x_fp32=dict(table.x_fp32 if x_fp32 is None else x_fp32),
                          x_pairs=dict(table.x_pairs if x_pairs is None else x_pairs),
                          o_pairs=dict(table.o_pairs if o_pairs is None else o_pairs))
    candidates = {**GEMV_CANDIDATES, **(gemv_candidates or {})}
    chosen, by_hidden = {}, {}
    width = [arch["hidden_size"] for arch in cards]
    lead = {w: width.index(w) for w in width}  # each width's first card: every candidate runs on it
    for fi, fmt in enumerate(formats):  # each format its share of the GEMVs' 70 % of the budget
        for read in (fmt, f"{fmt}_pairs") if fmt in ("int4", "fp8") else (fmt,):
            per_role = timings["gemv"].setdefault(read, {})
            for ci, arch in enumerate(cards):
                for role in ROLES:
                    if role == "lm_head" and fmt != "dense":
                        continue  # the output projection stays bf16 in every path
                    if read.endswith("_pairs") != under.reads_pairs(fmt, role, arch["hidden_size"]):
                        continue  # a read the step does not launch for this role at this width
                    if over(0.7 * (fi + 1) / len(formats)):
                        skipped.append(f"gemv {read} {role} card {ci}")
                        continue
                    cands = [GemvConfig(*c) for c in candidates[read]]
                    if ci != lead[width[ci]]:
                        first = {c: t[lead[width[ci]]] for c, t in per_role.get(role, {}).items() if lead[width[ci]] in t}
                        cands = sorted(first, key=first.get)[:top]
                    bench = RoleBench(role, fmt, arch, device, dtype)
                    given = NORM_INPUT_OF[norm.get("dense" if role == "lm_head" else fmt, "program")]  # o, down: unused
                    # an input the step writes (x normalised apart, the MLP's activations): f16 pairs under
                    # x_pairs (normalised apart), else float32 under x_fp32
                    x32 = step_writes_input(role, given) and under.x_fp32_for(fmt, arch["hidden_size"])
                    kw = {"norm": "none", "x_pairs": True} if read.endswith("_pairs") else {"norm": given}
                    for shape in cands:
                        try:
                            if not bench.error(shape, **kw) < 5e-2:
                                say(f"tune: {read} {role} {shape}: wrong result, dropped")
                                continue
                            us = graph_us(lambda i: bench.launch(shape, i, x_fp32=x32 and not read.endswith("_pairs"), **kw),
                                          len(bench.ops), device)
                        except Exception as exc:  # noqa: BLE001 - a shape the compiler refuses is dropped, not the end
                            say(f"tune: {read} {role} {shape}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
                            continue
                        per_role.setdefault(role, {}).setdefault(shape, {})[ci] = us
                    del bench
            if not per_role:
                del timings["gemv"][read]
            for w in lead:  # each width's choice from its own cards' times
                own = {role: {c: {ci: us for ci, us in t.items() if width[ci] == w} for c, t in times.items()}
                       for role, times in per_role.items()}
                pick = {role: _pick({c: t for c, t in times.items() if t}).as_dict() for role, times in own.items()
                        if any(times.values())}
                if w == width[0] and (pick or read == fmt):
                    chosen[read] = pick
                    say(f"tune: {read} GEMVs {pick}" + (f" (width {w})" if len(lead) > 1 else ""))
                elif pick:
                    by_hidden.setdefault(str(w), {})[read] = pick
                    say(f"tune: {read} GEMVs {pick} (width {w})")
    layouts = {}
    for arch in cards:
        hq, hkv = arch["num_attention_heads"], arch["num_key_value_heads"]
        layouts.setdefault((hq, hkv, arch.get("head_dim") or arch["hidden_size"] // hq), layers or arch["num_hidden_layers"])
    benches = {f"{hq}/{hkv}/{d} ctx {ctx}": AttentionBench(gemv.HeadLayout(hq, hkv, d), ctx, n_layers, device, dtype)
               for (hq, hkv, d), n_layers in layouts.items() for ctx in ctxs}
    att_times: dict = {}
    for cfg in attention_candidates or ATTENTION_CANDIDATES:  # each candidate on every case, until the budget ends
        if over(0.95):
            skipped.append(f"attention {_key(cfg)}")
            continue
        for case, bench in benches.items():
            plan = bench.plan(cfg)
            try:
                if not bench.error(plan) < 5e-2:
                    say(f"tune: attention {_key(cfg)} {case}: wrong result, dropped")
                    break
                att_times.setdefault(cfg, {})[case] = graph_us(lambda i: bench.launch(plan, i), len(bench.caches), device)
            except Exception as exc:  # noqa: BLE001
                say(f"tune: attention {_key(cfg)} {case}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
                break
        if len(att_times.get(cfg, ())) < len(benches):
            att_times.pop(cfg, None)  # a candidate is judged on every case or not at all
    del benches
    timings["attention"] = {_key(c): t for c, t in att_times.items()}
    # PDL is a property of the whole step (floor_limit.py's levers measure it), not of a kernel timed
    # alone: the choice keeps the table's, where the device can launch so
    can_pdl = pdl_available(device) is None
    pdl = table.as_dict()["pdl"] if can_pdl else False
    out = {"gpu": gpu_key_of(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "sm_count": sm_count_of(device), "gemv": chosen, "pdl": pdl, "norm": norm, "x_fp32": under.x_fp32,
           "source": f"tune_launch_shapes on {device.type} {time.strftime('%Y-%m-%d')}",
           "timings_us": {"gemv": {fmt: {role: {_key(c): t for c, t in per.items()} for role, per in roles.items()}
                                   for fmt, roles in timings["gemv"].items()}, "attention": timings["attention"]},
           "budget_s": budget_s, "skipped": skipped}
    if any(under.x_pairs.values()):  # absent when off, as LaunchShapes.as_dict leaves it
        out["x_pairs"] = dict(under.x_pairs)
    if any(under.o_pairs.values()):
        out["o_pairs"] = dict(under.o_pairs)
    if by_hidden:
        out["gemv_by_hidden"] = by_hidden
    if can_pdl and table.pdl_anywhere() and any(table.pdl_prefetch.values()):
        out.update(pdl_prefetch=dict(table.pdl_prefetch), pdl_prefetch_per_sm=table.pdl_prefetch_per_sm)
    if att_times:
        out["attention"] = _pick(att_times).as_dict()
        say(f"tune: attention {out['attention']}")
    out["spent_s"] = round(time.perf_counter() - t0, 2)
    return out
