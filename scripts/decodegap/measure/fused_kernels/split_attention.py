"""Decode attention split over the cache's positions (flash decoding), and the splits' combine.

One query per head attends over a cache of up to L positions. A single program per head would read
its whole K and V alone, so the cache is cut into NS splits of SPLIT positions: program (KV head h,
split s) takes the G query heads that share h against its split's positions and writes a partial
softmax (running max m, sum l, and the softmax-weighted V, unnormalised); the combine joins the
partials of every split per query head. The plan (how many splits) is fixed per cache length, so a
captured graph replays it at any position: splits past the step's position contribute nothing.

How many split programs: `programs_per_sm` per multiprocessor of the device (all KV heads
together), from its SM count (launch.sm_count_of), so a long cache is read by enough programs to
keep the memory busy and a short one is not cut into slivers.

Levers (launch.AttentionConfig): `skip_empty` branches past a loop step whose block lies wholly past
the step's position (no load, no math) instead of masking it; a branch around the loads keeps
Triton from pipelining them across loop steps, a masked block costs its math but no memory traffic.
`combine_cols` spreads the separate combine over a query head's columns, more programs each reading
less of the splits' weighted V. `combine="in_split"` drops the combine's launch: each split program that held a valid position
counts itself done on an atomic counter per KV head, and the last one combines that head's group
(reading every split's partials through L2) and resets the counter for the next step.

With PDL the split programs may also prefetch the weights read after the attention into L2 (the lever
l2_ahead, launch.py): the o projection's, and gate_up's first rows, each program a share of their
lines, before its wait or after its partials are stored. Attention waits on latencies (the query, the
combine, the handovers) while the memory idles; the weights stream in that time instead.

The output is the query's dtype, or (`out` int32) fp8_pairs' f16 halves of out / 16: the input the
o projection's fp8 halves loop reads (the lever o_pairs, launch.py), written by the combine itself so
no launch converts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.common import (
    l2_ahead, l2_ahead_args, launch_options, p2, pdl_start, prefetch_elements, prefetch_l2, prefetch_programs, require)
from decodegap.measure.fused_kernels.fp8_pairs import X_SCALE
from decodegap.measure.fused_kernels.gemv import HeadLayout
from decodegap.measure.fused_kernels.launch import DEFAULT_SM_COUNT, L2_AHEAD_AT, AttentionConfig

COMBINE_SPLITS_PER_STEP = 16  # CS: splits the in-split combine reads per loop step (a CS x head_dim tile)
# CS of the separate combine: up to 128 splits in one tile (the H200 table's 24-65 splits: one step,
# the tile its sessions ran), more in steps of 128 (a tile of every split took 255 registers at 260)
SEPARATE_COMBINE_SPLITS_PER_STEP = 128


@dataclass(frozen=True)
class AttentionPlan:
    """How a cache of `max_len` positions is split among programs, and how they run: `split`
    positions per split program, `n_splits` of them, and the AttentionConfig they launch with."""

    split: int
    n_splits: int
    config: AttentionConfig

    @property
    def block_t(self) -> int:
        return self.config.block_t

    @classmethod
    def for_cache(cls, max_len: int, n_kv: int, config: AttentionConfig = AttentionConfig(),
                  sm_count: int = DEFAULT_SM_COUNT) -> "AttentionPlan":
        """Splits of whole loop steps, as many as make config.programs_per_sm programs per multiprocessor
        over all `n_kv` heads (at least one split)."""
        want = max(1, config.programs_per_sm * sm_count // n_kv)
        block_t = config.block_t
        split = triton.cdiv(triton.cdiv(max_len, want), block_t) * block_t
        return cls(split, triton.cdiv(max_len, split), config)

    def as_dict(self) -> dict:
        return {"split_positions": self.split, "splits": self.n_splits, "block_positions": self.block_t,
                **{k: v for k, v in self.config.as_dict().items() if k != "block_t"}}


def attention_scratch(plan: AttentionPlan, heads: HeadLayout, device):
    """The splits' partial results (float32): running max and sum (kv heads x splits x padded group),
    weighted V (and a padded head dim), and one int32 counter per KV head for the in-split combine
    (zero between steps)."""
    gp = max(16, p2(heads.group))  # tl.dot wants 16 rows at least
    shape = (heads.n_kv, plan.n_splits, gp)
    return (torch.empty(shape, dtype=torch.float32, device=device), torch.empty(shape, dtype=torch.float32, device=device),
            torch.empty((*shape, max(16, p2(heads.head_dim))), dtype=torch.float32, device=device),
            torch.zeros(heads.n_kv, dtype=torch.int32, device=device))


@triton.jit
def _attend_block(q, kbase, vbase, t0, end, d, dmask, m, l, acc, scale, D: tl.constexpr, BT: tl.constexpr):
    """One loop step: positions t0 .. t0 + BT - 1 (those before `end`) folded into the running
    softmax (m, l) and weighted V (acc) of the group's queries q. A block without a valid position
    leaves them as they are (its scores are -inf; the max it subtracts stays finite)."""
    t = t0 + tl.arange(0, BT)
    tmask = t < end
    kv_mask = tmask[:, None] & dmask[None, :]
    k = tl.load(kbase + t[:, None] * D + d[None, :], mask=kv_mask, other=0.0)
    sc = tl.dot(q, tl.trans(k)) * scale
    sc = tl.where(tmask[None, :], sc, float("-inf"))
    m_new = tl.maximum(m, tl.max(sc, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no valid position yet: exp(-inf - 0) = 0, not NaN
    p = tl.exp(sc - m_safe[:, None])
    alpha = tl.exp(m - m_safe)
    l = l * alpha + tl.sum(p, axis=1)
    v = tl.load(vbase + t[:, None] * D + d[None, :], mask=kv_mask, other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l, acc


@triton.jit
def _load_partial(ptr, mask, other, CG: tl.constexpr):
    """A load of the splits' partials; CG: through L2 only (another program of this launch wrote them)."""
    if CG:
        x = tl.load(ptr, mask=mask, other=other, cache_modifier=".cg")
    else:
        x = tl.load(ptr, mask=mask, other=other)
    return x


@triton.jit
def _combine_query_head(m_ptr, l_ptr, acc_ptr, o_ptr, h, g, n_active, d0, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                        DP: tl.constexpr, CD: tl.constexpr, NS: tl.constexpr, CS: tl.constexpr, CG: tl.constexpr,
                        OUT_SCALE: tl.constexpr):
    """Columns d0 .. d0 + CD - 1 of query head g of KV head h from its first `n_active` splits'
    partials, CS splits a step: o = sum w acc / sum w l, w = exp(m - max m); splits without a valid
    position (l = 0) weigh nothing. With CS >= NS one step, as a single tile. Stored times OUT_SCALE
    (1 / 16 into fp8_pairs' f16 halves, else 1) in o_ptr's dtype."""
    d = d0 + tl.arange(0, CD)
    c = tl.arange(0, CS)
    tops = tl.full((CS,), float("-inf"), tl.float32)
    for s0 in range(0, NS, CS):
        s = s0 + c
        tops = tl.maximum(tops, _load_partial(m_ptr + (h * NS + s) * GP + g, (s < n_active) & (s < NS), float("-inf"), CG))
    top = tl.max(tops, axis=0)
    num = tl.zeros((CD,), tl.float32)
    dens = tl.zeros((CS,), tl.float32)
    for s0 in range(0, NS, CS):
        s = s0 + c
        smask = (s < n_active) & (s < NS)
        idx = (h * NS + s) * GP + g
        m = _load_partial(m_ptr + idx, smask, float("-inf"), CG)
        l = _load_partial(l_ptr + idx, smask, 0.0, CG)
        w = tl.where(smask & (l > 0), tl.exp(m - top), 0.0)
        part = _load_partial(acc_ptr + idx[:, None] * DP + d[None, :], smask[:, None], 0.0, CG)
        num += tl.sum(part * w[:, None], axis=0)
        dens += l * w
    o = num / tl.sum(dens, axis=0)
    if OUT_SCALE != 1.0:
        o = o * OUT_SCALE
    tl.store(o_ptr + (h * G + g) * D + d, o.to(o_ptr.dtype.element_ty), mask=d < D)


@triton.jit
def _attention_split_kernel(q_ptr, kc_ptr, vc_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, o_ptr, count_ptr, scale, pf_programs,
                            l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines, l2c_per,
                            G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, L: tl.constexpr,
                            SPLIT: tl.constexpr, BT: tl.constexpr, NS: tl.constexpr, CS: tl.constexpr,
                            SKIP_EMPTY: tl.constexpr, COMBINE: tl.constexpr, PDL: tl.constexpr, PF: tl.constexpr,
                            PF_LINE: tl.constexpr, OUT_SCALE: tl.constexpr, L2_PRI: tl.constexpr,
                            L2A_TILE: tl.constexpr, L2A_STEPS: tl.constexpr, L2B_TILE: tl.constexpr, L2B_STEPS: tl.constexpr,
                            L2C_TILE: tl.constexpr, L2C_STEPS: tl.constexpr, L2_AT: tl.constexpr):
    """Program (KV head h, split s): the group's G query heads against positions [s * SPLIT, ...) of
    the cache, up to the step's own position; writes the split's running max, sum and weighted V.
    With COMBINE, the last of the head's splits with a valid position to finish also writes the
    group's attention output to o_ptr. With PDL and PF, the split's first PF elements of K and of V
    (its first positions, whatever the step's position: the cache does not depend on the kernel
    before, bar the step's own row) are prefetched into L2 before the wait, by the first pf_programs
    programs in launch order (h fastest). With PDL and L2_PRI, every program first prefetches its share
    of the l2 spans (the o projection's weight, and the first rows of gate_up's: the lever l2_ahead) into
    L2: the weights the kernels after the attention read stream while it waits on its latencies; before
    its wait (L2_AT 0: while the kernel before drains) or after its partials are stored (L2_AT 1: while
    the combine and the handover to o run)."""
    h = tl.program_id(0)
    s = tl.program_id(1)
    if PDL:
        if L2_AT == 0:
            l2_ahead(s * tl.num_programs(0) + h, l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines,
                     l2c_per, L2_PRI, L2A_TILE, L2A_STEPS, L2B_TILE, L2B_STEPS, L2C_TILE, L2C_STEPS)
        if PF > 0:
            if s * tl.num_programs(0) + h < pf_programs:
                off = tl.minimum((h * L + s * SPLIT) * D + tl.arange(0, PF // PF_LINE) * PF_LINE, (h + 1) * L * D - 1)
                prefetch_l2(kc_ptr + off)
                prefetch_l2(vc_ptr + off)
    pdl_start(PDL)
    n_valid = tl.load(pos_ptr) + 1  # the step's key and value were appended at its position
    start = s * SPLIT
    end = tl.minimum(start + SPLIT, n_valid)
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    dmask = d < D
    q = tl.load(q_ptr + (h * G + g)[:, None] * D + d[None, :], mask=(g < G)[:, None] & dmask[None, :], other=0.0)
    m = tl.full((GP,), float("-inf"), tl.float32)
    l = tl.zeros((GP,), tl.float32)
    acc = tl.zeros((GP, DP), tl.float32)
    kbase = kc_ptr + h * L * D
    vbase = vc_ptr + h * L * D
    # a fixed trip count (Triton's interpreter, which the CPU tests run, takes no run-time loop bounds)
    for c in range(0, SPLIT, BT):
        if SKIP_EMPTY:
            if start + c < end:
                m, l, acc = _attend_block(q, kbase, vbase, start + c, end, d, dmask, m, l, acc, scale, D, BT)
        else:
            m, l, acc = _attend_block(q, kbase, vbase, start + c, end, d, dmask, m, l, acc, scale, D, BT)
    idx = (h * NS + s) * GP + g
    real = g < G  # the rows tl.dot's 16 padded the group to are not stored: the combine reads the group's own
    tl.store(m_ptr + idx, m, mask=real)
    tl.store(l_ptr + idx, l, mask=real)
    tl.store(acc_ptr + idx[:, None] * DP + d[None, :], acc, mask=real[:, None])
    if PDL:
        if L2_AT == 1:
            l2_ahead(s * tl.num_programs(0) + h, l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines,
                     l2c_per, L2_PRI, L2A_TILE, L2A_STEPS, L2B_TILE, L2B_STEPS, L2C_TILE, L2C_STEPS)
    if COMBINE:
        if start < n_valid:
            n_active = (n_valid + SPLIT - 1) // SPLIT
            done = tl.atomic_add(count_ptr + h, 1, sem="acq_rel")  # orders this program's partials before the count
            if done == n_active - 1:
                for gi in range(0, G):  # not `g`: that name holds the group's arange above (Triton keeps one type a name)
                    _combine_query_head(m_ptr, l_ptr, acc_ptr, o_ptr, h, gi, n_active, 0, G, GP, D, DP, DP, NS, CS, True,
                                        OUT_SCALE)
                tl.atomic_xchg(count_ptr + h, 0)


@triton.jit
def _attention_combine_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                              DP: tl.constexpr, CD: tl.constexpr, NS: tl.constexpr, CS: tl.constexpr, PDL: tl.constexpr,
                              OUT_SCALE: tl.constexpr):
    """Program (query head, block of CD columns): the splits' partial softmaxes joined
    (_combine_query_head), CS splits a step, so the registers a program holds do not grow with the
    number of splits."""
    pdl_start(PDL)
    qh = tl.program_id(0)
    _combine_query_head(m_ptr, l_ptr, acc_ptr, o_ptr, qh // G, qh % G, NS, tl.program_id(1) * CD, G, GP, D, DP, CD, NS, CS,
                        False, OUT_SCALE)


def attention(q, k_cache, v_cache, position, out, *, plan: AttentionPlan, scratch, heads: HeadLayout, scale: float,
              pdl: bool = False, prefetch_steps: int = 0, prefetching: int | None = None, only: str | None = None,
              l2_ahead=None, l2_priority: str = "evict_last", l2_at: str = "start") -> None:
    """out (heads * head_dim,) = softmax(q K^T * scale) V over the cache's positions 0..position, each
    query head against its group's KV head; k_cache and v_cache (kv heads, cache length, head_dim).
    Two launches (the splits, their combine), or one with plan.config.combine == "in_split". With
    pdl, each split program (the first `prefetching` only, when given) prefetches its first
    `prefetch_steps` loop steps of K and V into L2 before it waits for the kernel before.
    only="split" or "combine" launches that one alone (benchmarks time the two apart; out is then
    not the attention's output unless both ran). out int32 (heads * head_dim / 2 of them): fp8_pairs'
    f16 halves of the output / 16, two columns a word (the lever o_pairs). l2_ahead: up to three
    contiguous tensors (the o projection's weight, the first rows of gate_up's gate and up halves)
    whose bytes the split programs prefetch into L2, each a share, with `l2_priority` ("evict_last" or
    "evict_normal"), where pdl is on (the lever l2_ahead): at `l2_at`, "start" (before their wait) or
    "end" (after their partials are stored)."""
    where = "attention"
    if only not in (None, "split", "combine"):
        raise ValueError(f"{where}: only={only!r}: 'split', 'combine' or None (both)")
    d = heads.head_dim
    require(where, "q", q, numel=heads.n_heads * d)
    dev = q.device
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        require(where, name, t, dtype=q.dtype, device=dev)
        if t.dim() != 3 or t.shape[0] != heads.n_kv or t.shape[2] != d:
            raise ValueError(f"{where}: {name} must be (kv heads {heads.n_kv}, positions, head_dim {d}), not {tuple(t.shape)}")
    if plan.n_splits * plan.split < k_cache.shape[1]:
        raise ValueError(f"{where}: the plan covers {plan.n_splits * plan.split} positions, the cache holds {k_cache.shape[1]}")
    require(where, "position", position, dtype=(torch.int64, torch.int32), numel=1, device=dev)
    halves = isinstance(out, torch.Tensor) and out.dtype == torch.int32  # the o projection's fp8 halves
    require(where, "out", out, numel=heads.n_heads * d // 2 if halves else heads.n_heads * d,
            dtype=(q.dtype, torch.int32), device=dev)
    if halves and heads.n_heads * d % 4:
        raise ValueError(f"{where}: out as fp8 halves feeds a GEMV reading whole words of 4 columns: {heads.n_heads * d} columns")
    o, out_scale = (out.view(torch.float16), 1.0 / X_SCALE) if halves else (out, 1.0)
    m, l, acc, count = scratch
    gp, dp = m.shape[-1], acc.shape[-1]
    for name, t, shape in (("scratch max", m, (heads.n_kv, plan.n_splits, gp)), ("scratch sum", l, (heads.n_kv, plan.n_splits, gp)),
                           ("scratch weighted V", acc, (heads.n_kv, plan.n_splits, gp, dp)), ("scratch counters", count, (heads.n_kv,))):
        require(where, name, t, shape=shape, device=dev)
    cfg, group = plan.config, heads.group
    fused_combine = cfg.combine == "in_split"
    line = max(1, 128 // k_cache.element_size())
    pf = prefetch_elements(plan.split * d, k_cache.element_size(), prefetch_steps, cfg.block_t * d, pdl)  # of a split's K and V
    if fused_combine and only == "combine":
        raise ValueError(f"{where}: combine 'in_split' has no combine launch of its own to run alone")
    cd = min(cfg.combine_cols or dp, dp)
    for i, span in enumerate(l2_ahead or []):
        require(where, f"l2_ahead[{i}]", span, device=dev)
    if l2_at not in L2_AHEAD_AT:
        raise ValueError(f"{where}: l2_at {l2_at!r}: one of {', '.join(L2_AHEAD_AT)}")
    ahead = {**l2_ahead_args(l2_ahead, heads.n_kv * plan.n_splits, l2_priority, pdl, q), "L2_AT": L2_AHEAD_AT.index(l2_at)}
    if only != "combine":
        _attention_split_kernel[(heads.n_kv, plan.n_splits)](
            q, k_cache, v_cache, position, m, l, acc, o, count, scale, prefetch_programs(heads.n_kv * plan.n_splits, prefetching),
            G=group, GP=gp, D=d, DP=dp, L=k_cache.shape[1], SPLIT=plan.split, BT=cfg.block_t, NS=plan.n_splits,
            CS=min(COMBINE_SPLITS_PER_STEP, p2(plan.n_splits)), SKIP_EMPTY=cfg.skip_empty, COMBINE=fused_combine, PDL=pdl, PF=pf,
            PF_LINE=line, OUT_SCALE=out_scale, **ahead, **launch_options(cfg.warps, pdl, cfg.stages))
    if not fused_combine and only != "split":
        _attention_combine_kernel[(heads.n_heads, dp // cd)](m, l, acc, o, G=group, GP=gp, D=d, DP=dp, CD=cd, NS=plan.n_splits,
                                                              CS=min(SEPARATE_COMBINE_SPLITS_PER_STEP, p2(plan.n_splits)),
                                                              PDL=pdl, OUT_SCALE=out_scale, **launch_options(4, pdl))
