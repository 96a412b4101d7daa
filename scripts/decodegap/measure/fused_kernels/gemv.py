"""The fused step's GEMV kernels, generic over how the weight is stored, with the small ops of a
layer folded into their prologues and epilogues:

  qkv_rope   RMSNorm of x (prologue), the joined q/k/v GEMV (+ bias), RoPE on q and k, and the
             append of k and v to the layer's cache at the step's position (epilogue)
  linear     a GEMV with an optional RMSNorm prologue and residual epilogue: o (x += W_o a),
             down (x += W_down h), the output projection (logits = W_lm norm(x))
  gate_up    RMSNorm (prologue), the joined gate/up GEMV, SiLU(gate) * up (epilogue)
  add_norm   one program: x += y, then the next RMSNorm (for paths whose own GEMV runs outside)

A GEMV program reads R whole rows of W along K (contiguous, so the loads vectorise; streamed with
evict-first so x stays in L2) and reduces them in float32; the input vector is normalised per
program. The norm's statistic (x's sum of squares) is either summed by every program (a pass over
x from L2 before the loop: NORM_PROGRAM) or read as one float32 that the kernel which wrote x added
its rows' squares into (`sum_out` of o and down, `norm_sum` of the next GEMV: NORM_SUM, the
step's `norm` lever "sum"); a caller may also pass x already normalised (no norm_weight). RoPE pairs element i of a head with i + head_dim/2
(transformers' rotate_half), so a qkv program owns BP pairs: a tile of 2 * BP rows, head_dim/2
apart. gate_up likewise: gate row n with up row n + I.

The weight (`WeightOperand`) is stored in one of three formats; the prologue and epilogues are the
same for all, only the loop that reads W differs (`gemv_rows`):

  dense  as stored (bf16 on the GPU, float32 in tests)
  fp8    float8_e4m3fn, one float32 scale per row (output channel), applied to the row's sum
  int4   int32 words of eight 4-bit values q along K; one bf16 scale s and one integer-valued bf16
         zero z per group of 128 columns and row, W = (q - z) * s. Nibble j (bits 4j..4j+3) of word i
         of a group holds column 16j + i of the group, so the x values each nibble multiplies are
         16 contiguous columns and a row's words load as one contiguous run

int4 turns a nibble into a float without a conversion or a shift: a nibble q at bits 4p..4p+3 of
a word, masked out and OR-ed under the exponent of 2^(23 - 4p), is the float 2^(23 - 4p) + q
(its mantissa's last bit is worth 2^-4p), and subtracting 2^(23 - 4p) + z leaves q - z exactly;
nibbles 5..7 take one shift per word first, and a group's sum is scaled once. Per weight that is one
and-or (LOP3), a subtract and a multiply-add (cuobjdump of the sm_90 cubin, fused_kernels.ahead).

The input chunk x meets W's tile either as a vector (one load per step, which Triton then spreads
to the tile's layout through shared memory, a barrier each step) or, with GemvConfig.x_tile, loaded
as a tile of W's shape (each thread loads the x values its weights need from L1: no barrier, but a
normalising prologue computes once per tile element instead of once per column). Which is faster
depends on the role and the GPU: it is part of the launch shape.

The launch wrappers take keyword arguments, check every tensor they pass (contiguous, dtype, size)
and raise a ValueError that names the argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.common import (
    DENSE, FMT_FP8, FMT_INT4, FP8, INT4, INT4_GROUP, INT4_PER_WORD, NORM_OFF, NORM_PROGRAM, NORM_SUM, check_index_range,
    input_chunk, int4_groups, launch_options, p2, pdl_start, prefetch_programs, prefetch_rows, prefetch_span, require, rstd_for)
from decodegap.measure.fused_kernels.fp8_pairs import fp8_pairs_rows
from decodegap.measure.fused_kernels.int4_pairs import XP_OFF, pairs_rows, store_pairs, xp_mode
from decodegap.measure.fused_kernels.launch import GemvConfig

ACTIVATION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INT4_MAGIC = 0x4B000000  # the float 2^23's bits: the int4 loop's exponent (a run-time argument: _int4_rows says why)
FORMAT_CODES = {"dense": DENSE, "fp8": FP8, "int4": INT4}


@dataclass(frozen=True)
class WeightOperand:
    """A weight as the GEMV kernels read it, `n` rows (outputs) by `k` columns (inputs):

      dense  weight (n, k), as stored
      fp8    weight (n, k) float8_e4m3fn; scale (n,) float32: W = weight * scale[:, None]
      int4   weight (n, k / 8) int32 (module docstring); scale and zero (n, k / 128) bf16: W = (q - zero) * scale
    """

    format: str
    weight: torch.Tensor
    scale: torch.Tensor | None = None
    zero: torch.Tensor | None = None

    @property
    def code(self) -> int:
        return FORMAT_CODES[self.format]

    @property
    def n(self) -> int:
        return self.weight.shape[0]

    @property
    def k(self) -> int:
        return self.weight.shape[1] * (INT4_PER_WORD if self.format == "int4" else 1)

    def validate(self, where: str, name: str, device) -> None:
        """Each stored tensor contiguous, of the format's dtype and shape, on `device`."""
        if self.format not in FORMAT_CODES:
            raise ValueError(f"{where}: {name} has format {self.format!r}; formats are {', '.join(FORMAT_CODES)}")
        if self.weight.dim() != 2:
            raise ValueError(f"{where}: {name}.weight must be 2-D (rows, columns), not shape {tuple(self.weight.shape)}")
        n, k = self.n, self.k
        if self.format == "dense":
            require(where, f"{name}.weight", self.weight, dtype=ACTIVATION_DTYPES, device=device)
        elif self.format == "fp8":
            require(where, f"{name}.weight", self.weight, dtype=torch.float8_e4m3fn, device=device)
            require(where, f"{name}.scale", self.scale, dtype=torch.float32, numel=n, device=device)
        else:
            if k % INT4_GROUP:
                raise ValueError(f"{where}: {name} has {k} columns, not whole int4 groups of {INT4_GROUP}")
            require(where, f"{name}.weight", self.weight, dtype=torch.int32, device=device)
            for part in ("scale", "zero"):
                require(where, f"{name}.{part}", getattr(self, part), dtype=torch.bfloat16, shape=(n, k // INT4_GROUP),
                        device=device)

    def block_k(self, where: str, shape: GemvConfig) -> int:
        """Columns per loop step: the shape's, at most K's padding; whole groups for int4."""
        bk = min(shape.block_k, p2(self.k))
        if self.format == "int4" and (bk % INT4_GROUP or bk & (bk - 1)):
            raise ValueError(f"{where}: int4 reads whole groups: block_k {shape.block_k} must be a power of 2 "
                             f"and a multiple of {INT4_GROUP}")
        return bk


def as_operand(weight) -> WeightOperand:
    return weight if isinstance(weight, WeightOperand) else WeightOperand("dense", weight)


@dataclass(frozen=True)
class HeadLayout:
    """Query heads, KV heads and head dim of a GQA attention."""

    n_heads: int
    n_kv: int
    head_dim: int

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv

    @property
    def qkv_rows(self) -> int:
        return (self.n_heads + 2 * self.n_kv) * self.head_dim


# ----------------------------------------------------------------------------- the weight loops


@triton.jit
def _dense_rows(x_ptr, g_ptr, rstd, w_ptr, rows, rmask, K: tl.constexpr, BK: tl.constexpr, R: tl.constexpr,
                NORM: tl.constexpr, XT: tl.constexpr, LA: tl.constexpr, LS: tl.constexpr):
    """W[rows] . x over K for a W stored element by element (bf16, float32 or fp8): an R x BK tile a
    step, float32 products, one sum per row at the end. XT: x loaded as an R x BK tile (module
    docstring). LA (the lever load_ahead): each step's tile of W loaded one step ahead. LS (the shape's
    loop_stages): the loop pipelined that deep (launch.GemvConfig)."""
    acc = tl.zeros((R, BK), tl.float32)
    cols0 = tl.arange(0, BK)
    if LA:
        w = tl.load(w_ptr + rows[:, None] * K + cols0[None, :], mask=rmask[:, None] & (cols0 < K)[None, :], other=0.0,
                    eviction_policy="evict_first")
    for k0 in tl.range(0, K, BK, num_stages=LS):
        cols = k0 + cols0
        cmask = cols < K
        m = rmask[:, None] & cmask[None, :]
        if LA:  # the next step's tile (masked off past K): its loads overlap this step's math
            nxt = cols + BK
            w_next = tl.load(w_ptr + rows[:, None] * K + nxt[None, :], mask=rmask[:, None] & (nxt < K)[None, :], other=0.0,
                             eviction_policy="evict_first")
        if XT:
            x = input_chunk(x_ptr, g_ptr, cols[None, :] + 0 * rows[:, None], m, rstd, NORM)
        else:
            x = input_chunk(x_ptr, g_ptr, cols, cmask, rstd, NORM)[None, :]
        if not LA:
            w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=m, other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * x
        if LA:
            w = w_next
    return tl.sum(acc, axis=1)


@triton.jit
def _int4_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, rows, rmask, K: tl.constexpr, BK: tl.constexpr,
               R: tl.constexpr, NORM: tl.constexpr, XT: tl.constexpr, LA: tl.constexpr, LS: tl.constexpr):
    """W[rows] . x over K for int4 words (module docstring): BK / 128 groups a step, an R x groups x 16
    tile of words, each word's eight nibbles against eight 16-column chunks of x; each group's sum
    scaled by its row's scale once. `magic` is 0x4B000000 (2^23's bits), passed at run time so that
    ptxas keeps it in a register and the mask-and-or is one LOP3 (as two immediates it took two). LA
    (the lever load_ahead): each step's words, scales and zeros loaded one step ahead. LS: as _dense_rows'."""
    GB: tl.constexpr = BK // 128  # groups per step
    NG: tl.constexpr = K // 128  # groups per row
    acc = tl.zeros((R, GB, 16), tl.float32)
    g0 = tl.arange(0, GB)
    i16 = tl.arange(0, 16)
    if LA:
        words, scale, zs = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, g0, K)
    for k0 in tl.range(0, K, BK, num_stages=LS):
        grp = k0 // 128 + g0
        gmask = grp < NG
        m2 = rmask[:, None] & gmask[None, :]
        if LA:  # the next step's tile (masked off past the last group): its loads overlap this step's math
            words_next, scale_next, zs_next = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, grp + GB, K)
        else:
            words, scale, zs = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, grp, K)
        zero = zs.to(tl.float32)
        high = words >> 12  # nibbles 5, 6, 7 moved to bits 8..19, below the exponent
        for j in tl.static_range(8):
            cols = (grp * 128)[:, None] + j * 16 + i16[None, :]
            if XT:
                x = input_chunk(x_ptr, g_ptr, cols[None, :, :] + 0 * rows[:, None, None], m2[:, :, None], rstd, NORM)
            else:
                x = input_chunk(x_ptr, g_ptr, cols, gmask[:, None], rstd, NORM)[None, :, :]
            # nibble q at bits 4p..4p+3 under the exponent of 2^(23 - 4p): the float 2^(23 - 4p) + q, one
            # and-or; minus 2^(23 - 4p) + z (exact for z in 0..15): q - z, exactly
            if j < 5:
                bits = (words & (15 << (4 * j))) | (magic - ((4 * j) << 23))
                base = 2.0 ** (23 - 4 * j)
            else:
                bits = (high & (15 << (4 * (j - 3)))) | (magic - ((4 * (j - 3)) << 23))
                base = 2.0 ** (23 - 4 * (j - 3))
            term = (bits.to(tl.float32, bitcast=True) - (zero + base)[:, :, None]) * x
            if j == 0:  # the group's sum starts from its first nibble's products (no zeroed tile to add to)
                part = term
            else:
                part += term
        acc += part * scale[:, :, None]
        if LA:
            words, scale, zs = words_next, scale_next, zs_next
    return tl.sum(tl.sum(acc, axis=2), axis=1)


@triton.jit
def gemv_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, rows, rmask, K: tl.constexpr, BK: tl.constexpr,
              R: tl.constexpr, FMT: tl.constexpr, NORM: tl.constexpr, XT: tl.constexpr, XP: tl.constexpr,
              LA: tl.constexpr, LS: tl.constexpr, WS: tl.constexpr):
    """W[rows] . x (float32, R rows) for a W stored as FMT, x normalised first when NORM, loaded as
    a tile when XT; int4 words against x given as f16 pairs when XP is 1 or 2 (int4_pairs), fp8 weights
    against x given as f16 halves when XP is 3 or 4 (fp8_pairs; NORM off with either, XT their pairs as a tile);
    each loop step's weights loaded one step ahead when LA (the lever load_ahead); the loop over K
    software-pipelined LS deep when LS is set (the shape's loop_stages: Triton copies each step's tiles
    into shared memory with cp.async, LS - 1 steps ahead; None: not pipelined); the pair reads' (int4
    and fp8) WS words a thread summed in f16 before float32 (the shape's f16_words)."""
    if XP == 1 or XP == 2:
        y = pairs_rows(x_ptr, w_ptr, s_ptr, z_ptr, rows, rmask, K, BK, R, XP, LA, XT, LS, WS)
    elif XP == 3 or XP == 4:
        y = fp8_pairs_rows(x_ptr, w_ptr, s_ptr, rows, rmask, K, BK, R, XP, LA, XT, LS, WS)
    elif FMT == FMT_INT4:
        y = _int4_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, rows, rmask, K, BK, R, NORM, XT, LA, LS)
    else:
        y = _dense_rows(x_ptr, g_ptr, rstd, w_ptr, rows, rmask, K, BK, R, NORM, XT, LA, LS)
        if FMT == FMT_FP8:
            y = y * tl.load(s_ptr + rows, mask=rmask, other=0.0)
    return y


@triton.jit
def _halves(y, B: tl.constexpr):
    """The first and the last B elements of a 2B vector, exactly (each a sum of one value and zeros),
    with broadcasts only: a 2B x B selection, tiny beside the GEMV's tile."""
    i = tl.arange(0, 2 * B)[:, None]
    j = tl.arange(0, B)[None, :]
    return tl.sum(tl.where(i == j, y[:, None], 0.0), axis=0), tl.sum(tl.where(i == j + B, y[:, None], 0.0), axis=0)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _qkv_rope_kernel(x_ptr, g_ptr, ss_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, kc_ptr,
                     vc_ptr, eps, magic, pf_programs, K: tl.constexpr, KP: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr,
                     D: tl.constexpr, L: tl.constexpr, BP: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
                     XT: tl.constexpr, XP: tl.constexpr, LA: tl.constexpr, LS: tl.constexpr, WS: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr, FROM_Y: tl.constexpr,
                     PDL: tl.constexpr, PF: tl.constexpr, PF_LINE: tl.constexpr, ROWW: tl.constexpr):
    """Program (head of the joined q/k/v rows, block of BP pairs): y = W norm(x) (+ b) for the block's
    rows i and i + D/2 (or y read from y_ptr, FROM_Y), rounded to the activations' dtype; q and k
    heads turned by RoPE at the step's position; q stored to q_ptr, k and v to the cache at the
    position (a (HKV, L, D) tensor each). Nothing else of the cache is written."""
    HALF: tl.constexpr = D // 2
    PER_HEAD: tl.constexpr = HALF // BP
    pid = tl.program_id(0)
    head = pid // PER_HEAD  # of the joined rows: q heads, then k heads, then v heads
    j = (pid % PER_HEAD) * BP + tl.arange(0, BP)
    rows = head * D + j
    pair = tl.arange(0, 2 * BP)  # the block's rows i, then its rows i + D/2: one tile, one pass over x
    both = head * D + (pid % PER_HEAD) * BP + pair % BP + (pair // BP) * HALF
    if PDL:
        prefetch_rows(w_ptr, both, pair < 2 * BP, pid, pf_programs, ROWW, PF, PF_LINE)
    pdl_start(PDL)
    if FROM_Y:  # a packed path's output (its bias included)
        y1 = tl.load(y_ptr + rows).to(tl.float32)
        y2 = tl.load(y_ptr + rows + HALF).to(tl.float32)
    else:
        rstd = rstd_for(x_ptr, ss_ptr, K, KP, eps, NORM)
        y1, y2 = _halves(gemv_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, both, pair < 2 * BP, K, BK, 2 * BP, FMT, NORM, XT, XP, LA, LS, WS), BP)
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
def _linear_kernel(x_ptr, g_ptr, ss_ptr, w_ptr, s_ptr, z_ptr, b_ptr, res_ptr, out_ptr, sum_ptr, eps, magic, pf_programs,
                   N: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
                   XT: tl.constexpr, XP: tl.constexpr, LA: tl.constexpr, LS: tl.constexpr, WS: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr, RESIDUAL: tl.constexpr,
                   SUM_OUT: tl.constexpr, PDL: tl.constexpr, PF: tl.constexpr, PF_LINE: tl.constexpr, ROWW: tl.constexpr):
    """Program (block of BN rows): out = W (norm(x) unless NORM_OFF, else x) (+ b) (+ res when
    RESIDUAL: the product rounded to out's dtype first, as transformers' bf16 add rounds). `out` may
    be `res`: a program reads and writes only its own rows. SUM_OUT: the squares of the rows it
    stored (as stored) added into sum_ptr's float32, for the next GEMV's norm (NORM_SUM)."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rows < N
    if PDL:
        prefetch_rows(w_ptr, rows, rmask, tl.program_id(0), pf_programs, ROWW, PF, PF_LINE)
    pdl_start(PDL)
    rstd = rstd_for(x_ptr, ss_ptr, K, KP, eps, NORM)
    y = gemv_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, rows, rmask, K, BK, BN, FMT, NORM, XT, XP, LA, LS, WS)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    dt = out_ptr.dtype.element_ty
    if RESIDUAL:
        y = y.to(dt).to(tl.float32) + tl.load(res_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(dt), mask=rmask)
    if SUM_OUT:
        stored = tl.where(rmask, y.to(dt).to(tl.float32), 0.0)
        tl.atomic_add(sum_ptr, tl.sum(stored * stored, axis=0))


@triton.jit
def _gate_up_kernel(x_ptr, g_ptr, ss_ptr, w_ptr, s_ptr, z_ptr, y_ptr, out_ptr, eps, magic, pf_programs, ACT: tl.constexpr,
                    I: tl.constexpr,
                    K: tl.constexpr, KP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
                    XT: tl.constexpr, XP: tl.constexpr, LA: tl.constexpr, LS: tl.constexpr, WS: tl.constexpr, NORM: tl.constexpr, FROM_Y: tl.constexpr, PDL: tl.constexpr,
                    PF: tl.constexpr, PF_LINE: tl.constexpr, ROWW: tl.constexpr, OUT_PAIRS: tl.constexpr):
    """Program (block of BN gate rows): gate and up = W norm(x) (x when NORM_OFF) for rows n and n + I (or read from
    y_ptr, FROM_Y), each rounded to the activations' dtype ACT; out = SiLU(gate) * up, SiLU's output
    rounded as transformers' act_fn rounds it, stored as out's dtype (ACT, or float32 holding ACT's
    values), or as the next int4 GEMV's f16 pairs (OUT_PAIRS 1: out_ptr is their float16 view), or the
    next fp8 GEMV's f16 halves of out / 16 (OUT_PAIRS 2: fp8_pairs)."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rows < I
    pair = tl.arange(0, 2 * BN)  # the block's gate rows, then its up rows
    own = tl.program_id(0) * BN + pair % BN
    both = own + (pair // BN) * I
    if PDL:
        prefetch_rows(w_ptr, both, own < I, tl.program_id(0), pf_programs, ROWW, PF, PF_LINE)
    pdl_start(PDL)
    if FROM_Y:
        gate = tl.load(y_ptr + rows, mask=rmask, other=0.0).to(tl.float32)
        up = tl.load(y_ptr + rows + I, mask=rmask, other=0.0).to(tl.float32)
    else:
        rstd = rstd_for(x_ptr, ss_ptr, K, KP, eps, NORM)
        gate, up = _halves(gemv_rows(x_ptr, g_ptr, rstd, w_ptr, s_ptr, z_ptr, magic, both, own < I, K, BK, 2 * BN, FMT, NORM, XT, XP, LA, LS, WS), BN)
    gate = gate.to(ACT).to(tl.float32)
    up = up.to(ACT).to(tl.float32)
    act = (gate * tl.sigmoid(gate)).to(ACT).to(tl.float32)
    h = (act * up).to(ACT)
    if OUT_PAIRS == 1:
        store_pairs(out_ptr, rows, h.to(tl.float32), rmask)
    elif OUT_PAIRS == 2:
        tl.store(out_ptr + rows, (h.to(tl.float32) * (1.0 / 16.0)).to(tl.float16), mask=rmask)
    else:
        tl.store(out_ptr + rows, h.to(out_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _add_norm_kernel(x_ptr, y_ptr, g_ptr, xn_ptr, eps, H: tl.constexpr, HP: tl.constexpr, ADD: tl.constexpr,
                     PDL: tl.constexpr, PAIRS: tl.constexpr):
    """One program: x += y (when ADD, rounded to x's dtype), then xn = RMSNorm(x) * g, rounded to x's
    dtype and stored as xn's (x's, or float32 holding those values: the lever x_fp32), or as an int4
    GEMV's f16 pairs (PAIRS 1: xn_ptr is their float16 view; the lever x_pairs), or an fp8 GEMV's f16
    halves of xn / 16 (PAIRS 2: fp8_pairs)."""
    pdl_start(PDL)
    offs = tl.arange(0, HP)
    m = offs < H
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    if ADD:
        x = (x.to(tl.float32) + tl.load(y_ptr + offs, mask=m, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(x_ptr + offs, x, mask=m)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, axis=0) / H + eps)
    xn = tl.load(g_ptr + offs, mask=m, other=0.0).to(tl.float32) * (x32 * rstd).to(x.dtype).to(tl.float32)
    if PAIRS == 1:
        store_pairs(xn_ptr, offs, xn.to(x.dtype).to(tl.float32), m)
    elif PAIRS == 2:
        tl.store(xn_ptr + offs, (xn.to(x.dtype).to(tl.float32) * (1.0 / 16.0)).to(tl.float16), mask=m)
    else:
        tl.store(xn_ptr + offs, xn.to(x.dtype).to(xn_ptr.dtype.element_ty), mask=m)


# ----------------------------------------------------------------------------- launches


def _operand_args(op: WeightOperand | None, stand_in):
    """The kernel's weight pointers (weight, scale, zero); unused ones point at `stand_in`."""
    if op is None:
        return stand_in, stand_in, stand_in
    return op.weight, op.scale if op.scale is not None else stand_in, op.zero if op.zero is not None else stand_in


def _gemv_input(where: str, x, op: WeightOperand | None, norm_weight) -> tuple[int, int]:
    """(K, XP) of a GEMV's input x: an activation vector of K values, or (int32) K values as f16 in
    pairs, already normalised (the lever x_pairs): for int4 weights in the words' order (int4_pairs),
    for fp8 weights x / 16 in column order (fp8_pairs)."""
    require(where, "x", x, dtype=(*ACTIVATION_DTYPES, torch.int32))
    xp = xp_mode(x)
    if xp == XP_OFF:
        return x.numel(), xp
    if op is None or op.format not in ("int4", "fp8"):
        raise ValueError(f"{where}: x as int32 f16 pairs (the lever x_pairs) is read by int4 and fp8 weights only, "
                         f"not {'a packed path' if op is None else op.format}")
    if norm_weight is not None:
        raise ValueError(f"{where}: x as f16 pairs is normalised by the kernel that wrote it: norm_weight must be None")
    if op.format == "fp8" and x.numel() % 2:
        raise ValueError(f"{where}: x as f16 pairs for fp8 weights reads whole words of 4 columns: {2 * x.numel()} columns are not")
    return 2 * x.numel(), xp + 2 if op.format == "fp8" else xp


def _norm_args(where: str, x, norm_weight, norm_sum):
    """(NORM, the norm weight's pointer, the sum's pointer) of a GEMV's prologue: no norm_weight, no
    norm (x as given); norm_weight alone, every program sums x's squares; with norm_sum (a float32
    tensor of one element holding sum(x^2), as an earlier kernel's sum_out added it up), read once."""
    if norm_weight is None:
        if norm_sum is not None:
            raise ValueError(f"{where}: norm_sum is the statistic of a norm: it needs norm_weight")
        return NORM_OFF, x, x
    require(where, "norm_weight", norm_weight, numel=x.numel(), device=x.device, dtype=ACTIVATION_DTYPES)
    if norm_sum is None:
        return NORM_PROGRAM, norm_weight, x
    require(where, "norm_sum", norm_sum, dtype=torch.float32, numel=1, device=x.device)
    return NORM_SUM, norm_weight, norm_sum


def linear(x, weight, out, *, shape: GemvConfig, bias=None, norm_weight=None, eps: float = 0.0, residual=None,
           norm_sum=None, sum_out=None, pdl: bool = False, prefetch_steps: int = 0, prefetching: int | None = None) -> None:
    """out = (residual +) W (RMSNorm(x) * norm_weight if norm_weight is given, else x) (+ bias), one launch.
    `weight`: a WeightOperand or a dense (n, k) tensor; x (k,), out, bias and residual (n,); out may
    be residual (the residual add in place). norm_sum: x's sum of squares (_norm_args); sum_out: a
    float32 tensor of one element that out's sum of squares is added into (zero it first). With pdl,
    each program prefetches its rows' first `prefetch_steps` loop steps of W into L2 before it waits
    for the kernel before; only its first `prefetching` programs when given (those that start while the
    kernel before runs: launch.LaunchShapes.pdl_prefetch and pdl_prefetch_per_sm)."""
    where, op = "linear", as_operand(weight)
    _, xp = _gemv_input(where, x, op, norm_weight)
    op.validate(where, "weight", x.device)
    n, k = op.n, op.k
    require(where, "x", x, numel=k // 2 if xp else k)
    require(where, "out", out, dtype=_out_dtypes(x), numel=n, device=x.device)
    for name, t, size in (("bias", bias, n), ("residual", residual, n)):
        if t is not None:
            require(where, name, t, numel=size, device=x.device, dtype=ACTIVATION_DTYPES)
    if sum_out is not None:
        require(where, "sum_out", sum_out, dtype=torch.float32, numel=1, device=x.device)
    norm, g, ss = _norm_args(where, x, norm_weight, norm_sum)
    check_index_range(where, n, k)
    bn = min(shape.rows, p2(n))
    w, s, z = _operand_args(op, x)
    bk = op.block_k(where, shape)
    grid = triton.cdiv(n, bn)
    _linear_kernel[(grid,)](
        x, g, ss, w, s, z, bias if bias is not None else x, residual if residual is not None else x, out,
        sum_out if sum_out is not None else x, eps, INT4_MAGIC, prefetch_programs(grid, prefetching), N=n, K=k, KP=p2(k), BN=bn, BK=bk,
        FMT=op.code, XT=shape.x_tile, XP=xp, LA=shape.load_ahead, LS=shape.loop_stages, WS=shape.f16_words, NORM=norm, HAS_BIAS=bias is not None, RESIDUAL=residual is not None,
        SUM_OUT=sum_out is not None, PDL=pdl, **_prefetch(op, prefetch_steps, bk, pdl),
        **launch_options(shape.warps, pdl, shape.stages))


def qkv_rope(x, weight, *, heads: HeadLayout, position, cos, sin, q_out, k_cache, v_cache, norm_weight, eps: float,
             shape: GemvConfig, bias=None, y=None, norm_sum=None, pdl: bool = False, prefetch_steps: int = 0,
             prefetching: int | None = None) -> None:
    """q_out (heads * head_dim,) and the cache rows at `position` from x: RMSNorm, the joined q/k/v
    GEMV, bias, RoPE, append. cos and sin: (positions, head_dim / 2) tables; k_cache and v_cache:
    (kv heads, cache length, head_dim). norm_weight None: x is already normalised; norm_sum: x's sum
    of squares (_norm_args). With `y` (a packed path's q/k/v output, its bias included) the GEMV is
    skipped and `weight` must be None. prefetch_steps, prefetching: as linear's."""
    where = "qkv_rope"
    d, half = heads.head_dim, heads.head_dim // 2
    bp = min(shape.rows, half)
    if half % bp:
        raise ValueError(f"{where}: head_dim {d}: {bp} pairs per program do not divide its {half} pairs")
    op = None if y is not None else as_operand(weight)
    k, xp = _gemv_input(where, x, op, norm_weight)
    dev = x.device
    norm, g, ss = _norm_args(where, x, norm_weight, norm_sum)
    require(where, "q_out", q_out, numel=heads.n_heads * d, dtype=_out_dtypes(x), device=dev)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        require(where, name, t, dtype=q_out.dtype, device=dev)
        if t.dim() != 3 or t.shape[0] != heads.n_kv or t.shape[2] != d:
            raise ValueError(f"{where}: {name} must be (kv heads {heads.n_kv}, positions, head_dim {d}), not {tuple(t.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        require(where, name, t, device=dev)
        if t.dim() != 2 or t.shape[1] != half:
            raise ValueError(f"{where}: {name} must be (positions, head_dim / 2 = {half}), not {tuple(t.shape)}")
    require(where, "position", position, dtype=(torch.int64, torch.int32), numel=1, device=dev)
    if y is not None:
        if weight is not None:
            raise ValueError(f"{where}: give the weight or a packed path's output y, not both")
        require(where, "y", y, numel=heads.qkv_rows, device=dev)
    else:
        op.validate(where, "weight", dev)
        if (op.n, op.k) != (heads.qkv_rows, k):
            raise ValueError(f"{where}: weight is {op.n} x {op.k}; the heads and x need {heads.qkv_rows} x {k}")
        check_index_range(where, op.n, k)
        if bias is not None:
            require(where, "bias", bias, numel=heads.qkv_rows, device=dev)
    w, s, z = _operand_args(op, x)
    grid = ((heads.n_heads + 2 * heads.n_kv) * (half // bp),)
    _qkv_rope_kernel[grid](
        x, g, ss, w, s, z, bias if bias is not None else x, y if y is not None else x, cos, sin, position, q_out,
        k_cache, v_cache, eps, INT4_MAGIC, prefetch_programs(grid[0], prefetching), K=k, KP=p2(k), HQ=heads.n_heads, HKV=heads.n_kv, D=d, L=k_cache.shape[1], BP=bp,
        BK=op.block_k(where, shape) if op is not None else 16, FMT=op.code if op is not None else DENSE, XT=shape.x_tile, LA=shape.load_ahead, LS=shape.loop_stages, WS=shape.f16_words,
        XP=xp, NORM=norm, HAS_BIAS=bias is not None, FROM_Y=y is not None, PDL=pdl,
        **_prefetch(op, prefetch_steps, op.block_k(where, shape) if op is not None else 0, pdl),
        **launch_options(shape.warps, pdl, shape.stages))


def gate_up(x, weight, out, *, norm_weight, eps: float, shape: GemvConfig, y=None, norm_sum=None, pdl: bool = False,
            prefetch_steps: int = 0, prefetching: int | None = None, act_dtype=None, pairs_for: str = "int4") -> None:
    """out (intermediate,) = SiLU(gate) * up of the joined gate/up GEMV (2 * intermediate rows: gate,
    then up) on RMSNorm(x) * norm_weight (x as given when norm_weight is None; norm_sum: x's sum of
    squares, _norm_args); from `y` (that GEMV's output) when a path ran it, weight None. prefetch_steps,
    prefetching: as linear's. gate, up and SiLU(gate) * up are rounded to `act_dtype` (default out's
    dtype); out may be float32 holding those rounded values (the lever x_fp32: the down GEMV then
    converts nothing), or int32: the down GEMV's f16 pairs of them (the lever x_pairs), as the weights
    of `pairs_for` read them ("int4": int4_pairs' order; "fp8": fp8_pairs' halves of x / 16)."""
    where = "gate_up"
    op = None if y is not None else as_operand(weight)
    k, xp = _gemv_input(where, x, op, norm_weight)
    dev = x.device
    require(where, "out", out, dtype=(*_out_dtypes(x), torch.float32, torch.int32), device=dev)
    act = out.dtype if act_dtype is None else act_dtype
    if act not in ACTIVATION_DTYPES or out.dtype not in (act, torch.float32, torch.int32):
        raise ValueError(f"{where}: out ({str(out.dtype).removeprefix('torch.')}) must hold the activations' dtype "
                         f"act_dtype ({str(act).removeprefix('torch.')}), float32 (their values, for the next GEMV) "
                         "or int32 (their f16 pairs, for an int4 GEMV)")
    norm, g, ss = _norm_args(where, x, norm_weight, norm_sum)
    out_pairs = _pairs_mode(where, out, pairs_for)
    inter = 2 * out.numel() if out_pairs else out.numel()
    if out_pairs == 1 and inter % INT4_GROUP:
        raise ValueError(f"{where}: out as f16 pairs needs whole groups of {INT4_GROUP}: intermediate size {inter} is not")
    if y is not None:
        if weight is not None:
            raise ValueError(f"{where}: give the weight or a packed path's output y, not both")
        require(where, "y", y, numel=2 * inter, device=dev)
    else:
        op.validate(where, "weight", dev)
        if (op.n, op.k) != (2 * inter, k):
            raise ValueError(f"{where}: weight is {op.n} x {op.k}; out and x need {2 * inter} x {k}")
        check_index_range(where, op.n, k)
    bn = min(shape.rows, p2(inter))
    w, s, z = _operand_args(op, x)
    grid = triton.cdiv(inter, bn)
    _gate_up_kernel[(grid,)](
        x, g, ss, w, s, z, y if y is not None else x, out.view(torch.float16) if out_pairs else out, eps, INT4_MAGIC,
        prefetch_programs(grid, prefetching), ACT=_TL_DTYPES[act], I=inter, K=k, KP=p2(k), BN=bn,
        BK=op.block_k(where, shape) if op is not None else 16, FMT=op.code if op is not None else DENSE, XT=shape.x_tile, LA=shape.load_ahead, LS=shape.loop_stages, WS=shape.f16_words,
        XP=xp, NORM=norm, FROM_Y=y is not None, PDL=pdl, OUT_PAIRS=out_pairs,
        **_prefetch(op, prefetch_steps, op.block_k(where, shape) if op is not None else 0, pdl),
        **launch_options(shape.warps, pdl, shape.stages))


_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def _pairs_mode(where: str, out, pairs_for: str) -> int:
    """The writers' PAIRS / OUT_PAIRS for an output `out`: 0 as its dtype, or (int32) the f16 pairs the
    next GEMV's weights read: 1 int4's (int4_pairs), 2 fp8's (fp8_pairs)."""
    if pairs_for not in ("int4", "fp8"):
        raise ValueError(f"{where}: pairs_for {pairs_for!r}: the f16 pairs of int4 or fp8 weights")
    return 0 if out.dtype != torch.int32 else 1 if pairs_for == "int4" else 2


def _out_dtypes(x) -> tuple:
    """The dtypes a GEMV's outputs may have for its input x: x's; any activation dtype when x is
    float32 (it may hold bf16 values, written so by the lever x_fp32) or f16 pairs (x_pairs)."""
    return ACTIVATION_DTYPES if x.dtype in (torch.float32, torch.int32) else (x.dtype,)


def _prefetch(op: WeightOperand | None, steps: int, block_k: int, pdl: bool) -> dict:
    """The kernels' prefetch constexprs (common.prefetch_span) for W's first `steps` loop steps of
    `block_k` columns (block_k / 8 words for int4); none without a weight (a packed path's y)."""
    if op is None:
        return {"PF": 0, "PF_LINE": 1, "ROWW": 1}
    per_step = block_k // INT4_PER_WORD if op.format == "int4" else block_k
    return prefetch_span(op.weight, steps, per_step, pdl)


def add_norm(x, y, norm_weight, xn, *, eps: float, pdl: bool = False, pairs_for: str = "int4") -> None:
    """x += y (unless y is None), then xn = RMSNorm(x) * norm_weight: one program, for paths whose
    own GEMV runs outside these kernels, and the norm apart (launch.py's lever norm). xn has x's
    dtype, or float32 (x's dtype's values, which a GEMV then reads without converting), or int32 (their
    f16 pairs, h / 2 of them, the lever x_pairs, as the weights of `pairs_for` read them: "int4",
    int4_pairs' order; "fp8", fp8_pairs' halves of xn / 16)."""
    where = "add_norm"
    require(where, "x", x, dtype=ACTIVATION_DTYPES)
    h = x.numel()
    if y is not None:
        require(where, "y", y, numel=h, device=x.device)
    require(where, "norm_weight", norm_weight, numel=h, device=x.device)
    pairs = _pairs_mode(where, xn, pairs_for) if isinstance(xn, torch.Tensor) else 0
    if pairs == 1 and h % INT4_GROUP:
        raise ValueError(f"{where}: xn as f16 pairs needs whole groups of {INT4_GROUP}: x has {h} values")
    require(where, "xn", xn, numel=h // 2 if pairs else h, dtype=(x.dtype, torch.float32, torch.int32), device=x.device)
    _add_norm_kernel[(1,)](x, y if y is not None else x, norm_weight, xn.view(torch.float16) if pairs else xn, eps, H=h, HP=p2(h),
                           ADD=y is not None, PDL=pdl, PAIRS=pairs, **launch_options(4, pdl))
