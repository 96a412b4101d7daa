"""fp8 weights read two at a time in packed halves: the GEMV input as f16 halves (x / 16, in column
order, two to an int32 word), and the loop that multiplies them (the lever x_pairs for fp8, launch.py).

Why: the fp8 loop of gemv._dense_rows turns each e4m3 weight into a float32 (F2FP for two, then an
HADD2 each) and multiplies-adds it in float32, with a float32 accumulator per weight of the tile: about
4.6 SASS instructions a weight and 117-119 registers in qkv and gate_up, so 13-24 % of the warps a
multiprocessor holds (results/benchmarks/gemv_stalls_h200.txt: DRAM at 32-62 % of its peak where the
read-only kernel over the same bytes reaches 55-87 %). Here one int32 word of four e4m3 weights
becomes two f16x2 pairs with one cvt.rn.f16x2.e4m3x2 each (exact: every e4m3 value is an f16 value),
times the input's two f16x2 pairs (one mul.f16x2, one fma.rn.f16x2), summed once into float32: seven
instructions for four weights, and a float32 accumulator per word.

The input (`x_halves(x)`: int32, K / 2 of them) holds x / 16 as f16, in column order: word j holds
columns 2j and 2j + 1. The kernels that write a GEMV's input write it so themselves (add_norm and
gate_up's epilogue, given its float16 view; under the lever o_pairs the attention's combine, for o), so
no launch converts it; the GEMV multiplies its row sums
by 16 with the row's scale.

Range: an e4m3 weight is at most 448 in magnitude (the path's per-row scale puts a row's largest
weight there); a word's half sums two products, so |x| / 16 * 448 * 2 must stay under f16's 65504:
|x| under 1170, or the sum overflows to inf (which the session's logit check then fails). With the
shape's f16_words (w words of a thread and row with their halves summed in f16 before the one conversion
to float32: `fp8_word_halves`, int4_pairs.hadd2) a half sums 2 w products: |x| under 1170 / w. Below
16 * 2^-14 (about 1e-3), x / 16 is an f16 subnormal: its absolute error stays under 16 * 2^-25.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.int4_pairs import _pack_halves, hadd2, hadd2_rows_emulated, half_f32, halves_sum

X_SCALE = 16.0  # the halves hold x / X_SCALE (a power of 2: exact in f16 above its subnormals)
XP_F16, XP_F16_EMULATED = 3, 4  # the kernels' XP for fp8 weights against f16 halves: inline PTX, or emulated (interpreter)


@triton.jit
def fp8_word_dot(w, x, XP: tl.constexpr):
    """Per element, the sum over a word's four e4m3 weights (w: int32, little-endian bytes = columns
    4i..4i+3) of weight * x, x the four columns' f16 halves (x: int64), as float32. XP_F16_EMULATED
    (Triton's interpreter, which runs no PTX): the same bytes and halves in float32."""
    if XP == 4:
        out = tl.zeros(w.shape, tl.float32)
        for b in tl.static_range(4):
            wb = ((w >> (8 * b)) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
            xb = ((x >> (16 * b)) & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
            out += wb * xb
        return out
    else:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b16 w0, w1, lo, hi;
            .reg .b32 x0, x1, p0, p1, a;
            .reg .f32 flo, fhi;
            mov.b32 {w0, w1}, $1;
            mov.b64 {x0, x1}, $2;
            cvt.rn.f16x2.e4m3x2 p0, w0;
            cvt.rn.f16x2.e4m3x2 p1, w1;
            mul.f16x2 a, p0, x0;
            fma.rn.f16x2 a, p1, x1, a;
            mov.b32 {lo, hi}, a;
            cvt.f32.f16 flo, lo;
            cvt.f32.f16 fhi, hi;
            add.f32 $0, flo, fhi;
            }""",
            constraints="=f,r,l", args=[w, x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _e4m3_byte(w, b: tl.constexpr):
    """Byte b of int32 w read as an e4m3 value, in float32 (exact)."""
    return ((w >> (8 * b)) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def _byte_pair_emulated(w, x, h: tl.constexpr):
    """Half h of fp8_word_halves in float32: byte h times column h's half, rounded to f16 (HMUL2), plus
    byte h + 2 times column h + 2's (HFMA2's one rounding: the caller's _pack_halves)."""
    first = (_e4m3_byte(w, h) * half_f32(x, h)).to(tl.float16).to(tl.float32)
    return _e4m3_byte(w, h + 2) * half_f32(x >> 32, h) + first


@triton.jit
def fp8_word_halves(w, x, XP: tl.constexpr):
    """A word's four e4m3 weights times their columns' f16 halves (as fp8_word_dot), left in the two
    f16 halves of an f16x2 (int32 bits: columns 4i and 4i+2 in the low half, 4i+1 and 4i+3 in the high),
    for the caller to sum several words' in f16 (f16_words). XP_F16_EMULATED: the same products in
    float32, each half rounded to f16 after its product and after its multiply-add (as HMUL2, HFMA2)."""
    if XP == 4:
        return _pack_halves(_byte_pair_emulated(w, x, 0), _byte_pair_emulated(w, x, 1))
    else:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b16 w0, w1;
            .reg .b32 x0, x1, p0, p1, a;
            mov.b32 {w0, w1}, $1;
            mov.b64 {x0, x1}, $2;
            cvt.rn.f16x2.e4m3x2 p0, w0;
            cvt.rn.f16x2.e4m3x2 p1, w1;
            mul.f16x2 a, p0, x0;
            fma.rn.f16x2 $0, p1, x1, a;
            }""",
            constraints="=r,r,l", args=[w, x], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def fp8_pairs_rows(xp_ptr, w_ptr, s_ptr, rows, rmask, K: tl.constexpr, BK: tl.constexpr, R: tl.constexpr,
                   XP: tl.constexpr, LA: tl.constexpr, XT: tl.constexpr, LS: tl.constexpr = None,
                   WS: tl.constexpr = 1):
    """W[rows] . x over K for fp8 weights (per-row scale s) and x as f16 halves of x / 16 (module
    docstring): BK / 4 words of each row a loop step, each word's four products in packed halves, the
    row sums in float32 times 16 and the row's scale. LA (the lever load_ahead): each step's words
    loaded one step ahead. XT (the shape's x_tile): the input loaded in the words' tile shape, each
    thread its own columns' halves (from L1), instead of once and broadcast (a shared-memory exchange
    and its barriers a loop step). LS (the shape's loop_stages): the loop pipelined that deep. WS (the
    shape's f16_words): WS adjacent words of a row summed in their f16 halves before float32."""
    KW: tl.constexpr = K // 4  # words a row
    BW: tl.constexpr = BK // 4  # words a loop step
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    xq = xp_ptr.to(tl.pointer_type(tl.int64))  # four f16 halves: a weight word's columns
    c0 = tl.arange(0, BW)
    acc = tl.zeros((R, BW // WS), tl.float32)
    if LA:
        w = tl.load(wp + rows[:, None] * KW + c0[None, :], mask=rmask[:, None] & (c0 < KW)[None, :], other=0,
                    eviction_policy="evict_first")
    for k0 in tl.range(0, KW, BW, num_stages=LS):
        cols = k0 + c0
        cmask = cols < KW
        if LA:  # the next step's words (masked off past K): their loads overlap this step's math
            nxt = cols + BW
            w_next = tl.load(wp + rows[:, None] * KW + nxt[None, :], mask=rmask[:, None] & (nxt < KW)[None, :], other=0,
                             eviction_policy="evict_first")
        else:
            w = tl.load(wp + rows[:, None] * KW + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0,
                        eviction_policy="evict_first")
        if XT:
            x = tl.load(xq + cols[None, :] + 0 * rows[:, None], mask=rmask[:, None] & cmask[None, :], other=0)
        else:
            x = tl.broadcast_to(tl.load(xq + cols, mask=cmask, other=0)[None, :], (R, BW))
        if WS > 1:  # WS words of the thread's row: their halves summed in f16, then once into float32
            if XP == 4:
                part = tl.reshape(hadd2_rows_emulated(tl.reshape(fp8_word_halves(w, x, XP), (R * (BW // WS), WS)), R * (BW // WS), WS),
                                  (R, BW // WS))
            else:
                part = tl.reduce(tl.reshape(fp8_word_halves(w, x, XP), (R, BW // WS, WS)), 2, hadd2)
            acc += halves_sum(part, XP - 2)  # halves_sum's XP: 2 emulated (ours 4), 1 PTX (ours 3)
        else:
            acc += fp8_word_dot(w, x, XP)
        if LA:
            w = w_next
    return tl.sum(acc, axis=1) * (16.0 * tl.load(s_ptr + rows, mask=rmask, other=0.0))


def x_halves(x: torch.Tensor) -> torch.Tensor:
    """The f16 halves of x as the kernels write them, in torch: x / 16 as f16, two to an int32 word."""
    if x.numel() % 4:
        raise ValueError(f"x_halves: {x.numel()} columns, not whole words of 4 fp8 weights")
    return (x.float() / X_SCALE).to(torch.float16).contiguous().view(torch.int32)


def from_halves(halves: torch.Tensor) -> torch.Tensor:
    """x (float32) back from its halves: the inverse of x_halves (up to f16's rounding of x / 16)."""
    return halves.contiguous().view(torch.float16).float() * X_SCALE
