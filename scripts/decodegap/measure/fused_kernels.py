"""The fused step's Triton kernels: a batch-1 decoder layer in six launches.

One token's layer reads each weight once and little else, so every launch that is not a weight read
is overhead, and on a graph-replayed step each costs a kernel's start and drain (about 1.4 us on the
H200, `benchmarks/step_model.py`). The kernels fold the small ops into the weight reads:

  qkv_rope   RMSNorm of x (prologue), the joined q/k/v GEMV (+ bias), RoPE on q and k, and the
             append of k and v to the layer's cache at the step's position (epilogue)
  attention  one query per head against the cache, split over positions (flash decoding), then
             a combine of the splits
  linear     a GEMV with an optional RMSNorm prologue and residual epilogue: o (x += W_o a),
             down (x += W_down h), the output projection (logits = W_lm norm(x))
  gate_up    RMSNorm (prologue), the joined gate/up GEMV, SiLU(gate) * up (epilogue)

A GEMV program reads `rows` whole rows of W (contiguous along K, so the loads vectorise; streamed
with evict-first so x stays in L2) and reduces them in float32; its input vector and norm are
recomputed per program (a few KB from L2). RoPE pairs element i of a head with i + head_dim/2
(transformers' rotate_half), so a qkv program owns a block of pairs: two row tiles, head_dim/2
apart. gate/up likewise: rows n and n + intermediate. Where a weight path packs the projections
(int4), the same epilogues run on its output (`y=`), and `add_norm` does the residual add and the
next norm in one small launch.

Arithmetic follows transformers' bf16 roundings where they are visible (the linear's output, the
normalised activation, cos/sin tables in the activations' dtype); sums are float32.
tests/test_fused_kernels.py runs these kernels under Triton's CPU interpreter against float64
references and the transformers model (TRITON_INTERPRET=1, which must be set before anything
imports triton: transformers does, so tests/conftest.py sets it first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class GemvConfig:
    """One GEMV role's launch shape: rows of W per program (pairs for qkv, gate/up rows for gate_up),
    columns per loop step, warps per program."""

    rows: int
    block_k: int
    warps: int

    def as_dict(self) -> dict:
        return {"rows": self.rows, "block_k": self.block_k, "warps": self.warps}


# Chosen on the H200 (GPU-5872d8e9, 2026-12-01) by `benchmarks/fused_kernels.py --json`: each role's
# least summed time over Qwen-2.5-7B's and Llama-3.1-8B's shapes, of 12 candidates (graph-replayed
# launches, weights cycled past L2). Another GPU type may want others: the benchmark prints them.
GEMV_CONFIGS = {
    "qkv": GemvConfig(rows=4, block_k=512, warps=4),
    "o": GemvConfig(rows=2, block_k=512, warps=4),
    "gate_up": GemvConfig(rows=8, block_k=256, warps=4),
    "down": GemvConfig(rows=2, block_k=512, warps=4),
    "lm_head": GemvConfig(rows=4, block_k=512, warps=4),
}
ATTENTION_BLOCK_T = 32  # positions per loop step of a split (a 32 x head_dim tile of K and of V)
ATTENTION_PROGRAMS = 264  # splits x KV heads to aim for: two per multiprocessor on the H200 (132)


def usable_here(device) -> str | None:
    """None when the kernels can run on `device`, else why not: a CPU runs them only under Triton's
    interpreter, switched on before triton was first imported."""
    if torch.device(device).type == "cuda":
        return None
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.sum, InterpretedFunction):
        return ("the fused kernels run on a CPU only under Triton's interpreter: set TRITON_INTERPRET=1 before "
                "anything imports triton (transformers does), as tests/conftest.py does")
    return None


def _p2(n: int) -> int:
    return triton.next_power_of_2(int(n))


# ----------------------------------------------------------------------------- shared pieces


@triton.jit
def _rstd(x_ptr, K: tl.constexpr, KP: tl.constexpr, eps):
    """1 / RMS of x's K elements, in float32 (transformers' RMSNorm takes the variance in float32)."""
    offs = tl.arange(0, KP)
    x = tl.load(x_ptr + offs, mask=offs < K, other=0.0).to(tl.float32)
    return tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)


@triton.jit
def _input_chunk(x_ptr, g_ptr, cols, cmask, rstd, NORM: tl.constexpr):
    """x[cols] as the GEMV multiplies it: normalised and scaled by the norm's weight (each rounded to
    the activations' dtype, as transformers' RMSNorm rounds them) when NORM, else as stored."""
    x = tl.load(x_ptr + cols, mask=cmask, other=0.0)
    x32 = x.to(tl.float32)
    if NORM:  # float32 products rounded to x's dtype: what a bf16 multiply gives (the interpreter's bf16 arithmetic is wrong)
        xn = (x32 * rstd).to(x.dtype).to(tl.float32)
        x32 = (tl.load(g_ptr + cols, mask=cmask, other=0.0).to(tl.float32) * xn).to(x.dtype).to(tl.float32)
    return x32


@triton.jit
def _dot_rows(x_ptr, w_ptr, g_ptr, rstd, rows, rmask, K: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
              NORM: tl.constexpr):
    """W[rows] . x over K (float32), BN rows at a time, BK columns a step."""
    acc = tl.zeros((BN, BK), tl.float32)
    cols0 = tl.arange(0, BK)
    for k0 in range(0, K, BK):
        cols = k0 + cols0
        cmask = cols < K
        x = _input_chunk(x_ptr, g_ptr, cols, cmask, rstd, NORM)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0,
                    eviction_policy="evict_first")
        acc += w.to(tl.float32) * x[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def _dot_row_pairs(x_ptr, w_ptr, g_ptr, rstd, rows, offset, rmask, K: tl.constexpr, BK: tl.constexpr,
                   BN: tl.constexpr, NORM: tl.constexpr):
    """W[rows] . x and W[rows + offset] . x in one pass over x (float32)."""
    acc1 = tl.zeros((BN, BK), tl.float32)
    acc2 = tl.zeros((BN, BK), tl.float32)
    cols0 = tl.arange(0, BK)
    for k0 in range(0, K, BK):
        cols = k0 + cols0
        cmask = cols < K
        x = _input_chunk(x_ptr, g_ptr, cols, cmask, rstd, NORM)
        m = rmask[:, None] & cmask[None, :]
        w1 = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        w2 = tl.load(w_ptr + (rows + offset)[:, None] * K + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        acc1 += w1.to(tl.float32) * x[None, :]
        acc2 += w2.to(tl.float32) * x[None, :]
    return tl.sum(acc1, axis=1), tl.sum(acc2, axis=1)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _qkv_rope_kernel(x_ptr, w_ptr, b_ptr, g_ptr, y_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, kc_ptr, vc_ptr, eps,
                     K: tl.constexpr, KP: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                     L: tl.constexpr, BP: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr,
                     FROM_Y: tl.constexpr):
    HALF: tl.constexpr = D // 2
    PER_HEAD: tl.constexpr = HALF // BP
    pid = tl.program_id(0)
    head = pid // PER_HEAD  # of the joined rows: q heads, then k heads, then v heads
    j = (pid % PER_HEAD) * BP + tl.arange(0, BP)
    rows = head * D + j
    if FROM_Y:  # a packed path's output (its bias included)
        y1 = tl.load(y_ptr + rows).to(tl.float32)
        y2 = tl.load(y_ptr + rows + HALF).to(tl.float32)
    else:
        rstd = _rstd(x_ptr, K, KP, eps)
        y1, y2 = _dot_row_pairs(x_ptr, w_ptr, g_ptr, rstd, rows, HALF, j < HALF, K, BK, BP, True)
        if HAS_BIAS:
            y1 += tl.load(b_ptr + rows).to(tl.float32)
            y2 += tl.load(b_ptr + rows + HALF).to(tl.float32)
    dt = q_ptr.dtype.element_ty
    y1 = y1.to(dt).to(tl.float32)  # the linear's output, in the activations' dtype
    y2 = y2.to(dt).to(tl.float32)
    pos = tl.load(pos_ptr)
    if head < HQ + HKV:  # q and k turn by the position's angle; v does not
        c = tl.load(cos_ptr + pos * HALF + j).to(tl.float32)
        s = tl.load(sin_ptr + pos * HALF + j).to(tl.float32)
        o1 = y1 * c - y2 * s
        o2 = y2 * c + y1 * s
    else:
        o1 = y1
        o2 = y2
    if head < HQ:
        tl.store(q_ptr + rows, o1.to(dt))
        tl.store(q_ptr + rows + HALF, o2.to(dt))
    elif head < HQ + HKV:
        base = kc_ptr + (head - HQ) * L * D + pos * D
        tl.store(base + j, o1.to(dt))
        tl.store(base + j + HALF, o2.to(dt))
    else:
        base = vc_ptr + (head - HQ - HKV) * L * D + pos * D
        tl.store(base + j, o1.to(dt))
        tl.store(base + j + HALF, o2.to(dt))


@triton.jit
def _linear_kernel(x_ptr, w_ptr, b_ptr, g_ptr, res_ptr, out_ptr, eps, N: tl.constexpr, K: tl.constexpr,
                   KP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
                   RESIDUAL: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rows < N
    rstd = 1.0
    if NORM:
        rstd = _rstd(x_ptr, K, KP, eps)
    y = _dot_rows(x_ptr, w_ptr, g_ptr, rstd, rows, rmask, K, BK, BN, NORM)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    dt = out_ptr.dtype.element_ty
    if RESIDUAL:  # out = res + W x, each rounded as transformers' bf16 add rounds (out may be res: rows are the program's own)
        y = y.to(dt).to(tl.float32) + tl.load(res_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(dt), mask=rmask)


@triton.jit
def _gate_up_kernel(x_ptr, w_ptr, g_ptr, y_ptr, out_ptr, eps, I: tl.constexpr, K: tl.constexpr, KP: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, FROM_Y: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rows < I
    if FROM_Y:
        gate = tl.load(y_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
        up = tl.load(y_ptr + rows + I, mask=rmask, other=0.0).to(tl.float32)
    else:
        rstd = _rstd(x_ptr, K, KP, eps)
        gate, up = _dot_row_pairs(x_ptr, w_ptr, g_ptr, rstd, rows, I, rmask, K, BK, BN, True)
    dt = out_ptr.dtype.element_ty
    gate = gate.to(dt).to(tl.float32)
    up = up.to(dt).to(tl.float32)
    act = (gate * tl.sigmoid(gate)).to(dt).to(tl.float32)  # SiLU, rounded as transformers' act_fn output is
    tl.store(out_ptr + rows, (act * up).to(dt), mask=rmask)


@triton.jit
def _add_norm_kernel(x_ptr, y_ptr, g_ptr, xn_ptr, eps, H: tl.constexpr, HP: tl.constexpr, ADD: tl.constexpr):
    """One program: x += y (when ADD), then xn = RMSNorm(x) * g; for the packed paths' unfused layers."""
    offs = tl.arange(0, HP)
    m = offs < H
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if ADD:
        x = (x.to(tl.float32) + tl.load(y_ptr + offs, mask=m, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(x_ptr + offs, x, mask=m)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / H + eps)
    xn = tl.load(g_ptr + offs, mask=m, other=0.0).to(tl.float32) * (x32 * rstd).to(x.dtype).to(tl.float32)
    tl.store(xn_ptr + offs, xn.to(x.dtype), mask=m)


@triton.jit
def _attention_split_kernel(q_ptr, kc_ptr, vc_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, scale, G: tl.constexpr,
                            GP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, L: tl.constexpr,
                            SPLIT: tl.constexpr, BT: tl.constexpr, NS: tl.constexpr):
    """Program (kv head h, split s): the group's G query heads against positions [s*SPLIT, ...) of
    the cache, up to the step's own position; writes the split's running max, sum and weighted V."""
    h = tl.program_id(0)
    s = tl.program_id(1)
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
    # a fixed trip count with whole chunks past the end skipped (not a loop to `end`: Triton's
    # interpreter, which the CPU tests run, takes no run-time loop bounds); every chunk that runs
    # holds at least one valid position, so m stays finite
    for c in range(0, SPLIT, BT):
        t0 = start + c
        if t0 < end:
            t = t0 + tl.arange(0, BT)
            tmask = t < end
            kv_mask = tmask[:, None] & dmask[None, :]
            k = tl.load(kbase + t[:, None] * D + d[None, :], mask=kv_mask, other=0.0)
            sc = tl.dot(q, tl.trans(k)) * scale
            sc = tl.where(tmask[None, :], sc, float("-inf"))
            m_new = tl.maximum(m, tl.max(sc, axis=1))
            p = tl.exp(sc - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, axis=1)
            v = tl.load(vbase + t[:, None] * D + d[None, :], mask=kv_mask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
    idx = (h * NS + s) * GP + g
    tl.store(m_ptr + idx, m)
    tl.store(l_ptr + idx, l)
    tl.store(acc_ptr + idx[:, None] * DP + d[None, :], acc)


@triton.jit
def _attention_combine_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                              DP: tl.constexpr, NS: tl.constexpr, NSP: tl.constexpr):
    """Program (query head): the splits' partial softmaxes joined; empty splits weigh nothing."""
    qh = tl.program_id(0)
    h = qh // G
    s = tl.arange(0, NSP)
    smask = s < NS
    idx = (h * NS + s) * GP + qh % G
    m = tl.load(m_ptr + idx, mask=smask, other=float("-inf"))
    l = tl.load(l_ptr + idx, mask=smask, other=0.0)
    top = tl.max(m, axis=0)
    w = tl.where(smask & (l > 0), tl.exp(m - top), 0.0)
    d = tl.arange(0, DP)
    acc = tl.load(acc_ptr + idx[:, None] * DP + d[None, :], mask=smask[:, None], other=0.0)
    o = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(o_ptr + qh * D + d, o.to(o_ptr.dtype.element_ty), mask=d < D)


# ----------------------------------------------------------------------------- launches


def _check_index_range(n: int, k: int) -> None:
    if n * k >= 2**31:  # the kernels index W in 32 bits
        raise ValueError(f"a {n} x {k} weight is too large for the fused kernels' 32-bit indexing")


def qkv_rope(x, w, b, g, eps, cos, sin, pos, q, k_cache, v_cache, n_heads, n_kv, head_dim, cfg, y=None):
    """q (heads*head_dim,) and the cache rows at `pos` from x: norm, joined q/k/v GEMV, bias, RoPE, append.
    With `y` (a packed path's q/k/v output) the GEMV is skipped."""
    half = head_dim // 2
    bp = min(cfg.rows, half)
    if half % bp:
        raise ValueError(f"head_dim {head_dim}: {bp} pairs per program do not divide its {half} pairs")
    k = x.shape[-1]
    _check_index_range(w.shape[0] if w is not None else 0, k)
    grid = ((n_heads + 2 * n_kv) * (half // bp),)
    _qkv_rope_kernel[grid](x, w if w is not None else x, b if b is not None else x, g, y if y is not None else x,
                           cos, sin, pos, q, k_cache, v_cache, eps, K=k, KP=_p2(k), HQ=n_heads, HKV=n_kv, D=head_dim,
                           L=k_cache.shape[1], BP=bp, BK=min(cfg.block_k, _p2(k)), HAS_BIAS=b is not None,
                           FROM_Y=y is not None, num_warps=cfg.warps)


def linear(x, w, out, cfg, b=None, g=None, eps=0.0, residual=None):
    """out = (residual +) W (RMSNorm(x) * g if g is given else x) (+ b), one GEMV launch."""
    n, k = w.shape
    _check_index_range(n, k)
    bn = min(cfg.rows, _p2(n))
    _linear_kernel[(triton.cdiv(n, bn),)](x, w, b if b is not None else x, g if g is not None else x,
                                          residual if residual is not None else x, out, eps, N=n, K=k, KP=_p2(k),
                                          BN=bn, BK=min(cfg.block_k, _p2(k)), NORM=g is not None,
                                          HAS_BIAS=b is not None, RESIDUAL=residual is not None, num_warps=cfg.warps)


def gate_up(x, w, g, eps, out, intermediate, cfg, y=None):
    """out = SiLU(gate) * up of the joined gate/up GEMV on RMSNorm(x) * g; from `y` when a path packed it."""
    k = x.shape[-1]
    _check_index_range(2 * intermediate, k)
    bn = min(cfg.rows, _p2(intermediate))
    _gate_up_kernel[(triton.cdiv(intermediate, bn),)](x, w if w is not None else x, g, y if y is not None else x, out,
                                                      eps, I=intermediate, K=k, KP=_p2(k), BN=bn,
                                                      BK=min(cfg.block_k, _p2(k)), FROM_Y=y is not None,
                                                      num_warps=cfg.warps)


def add_norm(x, y, g, eps, xn):
    """x += y (unless y is None), then xn = RMSNorm(x) * g: one program, for the packed paths."""
    h = x.shape[-1]
    _add_norm_kernel[(1,)](x, y if y is not None else x, g, xn, eps, H=h, HP=_p2(h), ADD=y is not None, num_warps=4)


@dataclass(frozen=True)
class AttentionPlan:
    """How a cache of `max_len` positions is split among programs (fixed per cache, so a captured graph
    replays it at any position; splits past the step's position exit at once)."""

    split: int  # positions per split
    n_splits: int
    block_t: int

    @classmethod
    def for_cache(cls, max_len: int, n_kv: int, block_t: int = ATTENTION_BLOCK_T, programs: int = ATTENTION_PROGRAMS):
        want = max(1, programs // n_kv)
        split = triton.cdiv(triton.cdiv(max_len, want), block_t) * block_t
        return cls(split, triton.cdiv(max_len, split), block_t)


def attention_scratch(plan: AttentionPlan, n_heads: int, n_kv: int, head_dim: int, device):
    """The splits' partial results: running max, sum (float32, kv heads x splits x padded group) and weighted V."""
    gp = max(16, _p2(n_heads // n_kv))  # tl.dot wants 16 rows at least
    shape = (n_kv, plan.n_splits, gp)
    return (torch.empty(shape, dtype=torch.float32, device=device), torch.empty(shape, dtype=torch.float32, device=device),
            torch.empty((*shape, max(16, _p2(head_dim))), dtype=torch.float32, device=device))


def attention(q, k_cache, v_cache, pos, plan, scratch, out, n_heads, n_kv, head_dim, scale):
    """out (heads*head_dim,) = softmax(q K^T * scale) V over the cache's positions 0..pos, per query head
    against its group's KV head: two launches (the splits, their combine)."""
    m, l, acc = scratch
    group, gp, dp = n_heads // n_kv, m.shape[-1], acc.shape[-1]
    _attention_split_kernel[(n_kv, plan.n_splits)](q, k_cache, v_cache, pos, m, l, acc, scale, G=group, GP=gp, D=head_dim,
                                                   DP=dp, L=k_cache.shape[1], SPLIT=plan.split, BT=plan.block_t,
                                                   NS=plan.n_splits, num_warps=4, num_stages=2)
    _attention_combine_kernel[(n_heads,)](m, l, acc, out, G=group, GP=gp, D=head_dim, DP=dp, NS=plan.n_splits,
                                          NSP=_p2(plan.n_splits), num_warps=4)
