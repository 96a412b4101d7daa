"""int4 words read two weights an instruction: the GEMV input as f16 pairs in the words' order, and the
packed-half loop that multiplies them (the lever x_pairs, launch.py).

Why: the int4 loop of gemv._int4_rows turns each nibble into a float32 and multiplies-adds it in float32,
4.6-7.8 SASS instructions a weight, more than the H200 issues for 4-bit weights to stream at the memory's
speed (results/benchmarks/gemv_issue_sm90.txt). Here one int32 word of eight nibbles becomes four f16x2
pairs with one and-or each (under the exponent of 0x6400, the half 1024: nibbles 0, 2, 4, 6 give 1024 + q,
nibbles 1, 3, 5, 7 give 1024 + 16 q), minus the pair's 1024 + z (1024 + 16 z), times the input's pair,
summed in f16x2 (four products a half) and once into float32: about two instructions a weight
(benchmarks/int4_packed_gemv.py measured it 1.17-1.45x faster than the float32 loop on the H200).

The input (`pairs`, int32, K / 2 of them) holds, per group of 128 columns, four rows of 16 words: pair
p of word i is (x[16 p + i], x[16 (p + 4) + i]) as f16, the odd pairs (nibbles read as 16 q) divided by
16. The kernels that write a GEMV's input write it so themselves (`store_pairs`: add_norm, gate_up's
epilogue), so no launch converts it.

Range: f16 holds a bf16 value exactly from 2^-14 to 65504 (below, as a subnormal, to 2^-24 absolute);
a pair's half sums four products of at most 15 |x|, so |x| must stay under 65504 / 60 = 1091 or the sum
overflows to inf (which the session's logit check then fails). With the shape's f16_words (w words of a
thread, one row and group, their halves summed in f16 before float32: `word_partial`, `hadd2`) a half
sums 4 w products, so |x| must stay under 1091 / w (545 for 2, 272 for 4). The normalised inputs of the random-weight
cards do; a trained checkpoint's outlier activations would need a power-of-two scale per vector.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.common import INT4_GROUP as GROUP, int4_groups

XP_OFF, XP_PTX, XP_EMULATED = 0, 1, 2  # the kernels' XP: x as given; as pairs, through inline PTX; as pairs, emulated


def xp_mode(x: torch.Tensor) -> int:
    """The GEMV kernels' XP for input x: int32 is pairs, read through the inline PTX, or emulated under
    Triton's interpreter (which runs no PTX; fused_kernels.ahead compiles CPU tensors' launches for
    the GPU, so the device does not decide)."""
    if x.dtype != torch.int32:
        return XP_OFF
    from triton.runtime.interpreter import InterpretedFunction

    return XP_EMULATED if isinstance(tl.sum, InterpretedFunction) else XP_PTX


@triton.jit
def word_partial(w, x0, x1, x2, x3, z0, z1, XP: tl.constexpr):
    """A word's eight (q - z) x summed in its two f16 halves (int32 bits: the halves of pairs 0-3 of
    nibbles 0-3 and of 4-7): one and-or a pair under the exponent of 0x6400, one subtract of the zero's
    pair, one multiply-add with the input's pair. XP_EMULATED (Triton's interpreter, which runs no PTX):
    the same nibbles, pairs and constants in float32, each half rounded to f16 once."""
    if XP == 2:
        lo = tl.zeros(w.shape, tl.float32)
        hi = tl.zeros(w.shape, tl.float32)
        for p in tl.static_range(4):
            xp = x0 if p == 0 else x1 if p == 1 else x2 if p == 2 else x3
            zp = z0 if p % 2 == 0 else z1
            src = w if p < 2 else w >> 8
            mask = 0x000F000F if p % 2 == 0 else 0x00F000F0
            t = (src & mask) | 0x64006400
            for half in tl.static_range(2):  # 1024 + v, less 1024: v (q or 16 q), exactly
                tv = ((t >> (16 * half)) & 0xFFFF) - 0x6400
                zv = ((zp >> (16 * half)) & 0xFFFF) - 0x6400
                xv = half_f32(xp, half)
                if half == 0:
                    lo += (tv - zv).to(tl.float32) * xv
                else:
                    hi += (tv - zv).to(tl.float32) * xv
        return _pack_halves(lo, hi)
    else:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t0, t1, t2, t3, w8, d0, d1, d2, d3;
            lop3.b32 t0, $1, 0x000F000F, 0x64006400, 0xEA;
            lop3.b32 t1, $1, 0x00F000F0, 0x64006400, 0xEA;
            shr.u32 w8, $1, 8;
            lop3.b32 t2, w8, 0x000F000F, 0x64006400, 0xEA;
            lop3.b32 t3, w8, 0x00F000F0, 0x64006400, 0xEA;
            sub.f16x2 d0, t0, $6;
            sub.f16x2 d1, t1, $7;
            sub.f16x2 d2, t2, $6;
            sub.f16x2 d3, t3, $7;
            mul.f16x2 $0, d0, $2;
            fma.rn.f16x2 $0, d1, $3, $0;
            fma.rn.f16x2 $0, d2, $4, $0;
            fma.rn.f16x2 $0, d3, $5, $0;
            }""",
            constraints="=&r,r,r,r,r,r,r,r", args=[w, x0, x1, x2, x3, z0, z1], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _pack_halves(lo, hi):
    """Two float32s rounded to f16 and packed as an f16x2's int32 bits (lo in the low half)."""
    lo16 = lo.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    hi16 = hi.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return lo16 | (hi16 << 16)


@triton.jit
def half_f32(h, HALF: tl.constexpr):
    """Half HALF (0: the low 16 bits) of an f16x2's int32 bits, as float32 (exact)."""
    return ((h >> (16 * HALF)) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _unpack_sum(h):
    """An f16x2's two halves summed in float32 (the emulation's form of halves_sum)."""
    return half_f32(h, 0) + half_f32(h, 1)


@triton.jit
def hadd2(a, b):
    """f16x2 + f16x2 on int32 bits (add.f16x2), a reduction's combine."""
    return tl.inline_asm_elementwise(asm="add.f16x2 $0, $1, $2;", constraints="=r,r,r", args=[a, b], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def hadd2_emulated(a, b):
    """hadd2 under Triton's interpreter (which runs no PTX): each half's sum in float32, rounded to f16."""
    return _pack_halves(half_f32(a, 0) + half_f32(b, 0), half_f32(a, 1) + half_f32(b, 1))


@triton.jit
def hadd2_rows_emulated(part, M: tl.constexpr, WS: tl.constexpr):
    """The hadd2 sum of each row of part (M, WS: int32 f16x2 bits, WS 2..16 a power of 2) under the
    interpreter: halves added pairwise, a tree of log2(WS) vector ops. tl.reduce with a combine of our
    own runs that combine in Python once an element there (minutes for a tuner test); the float32
    sums rounded to f16 at each add are hadd2_emulated's, only their order is a tree's."""
    h = part
    if WS >= 16:
        a, b = tl.split(tl.reshape(h, (M, 8, 2)))
        h = hadd2_emulated(a, b)
    if WS >= 8:
        a, b = tl.split(tl.reshape(h, (M, 4, 2)))
        h = hadd2_emulated(a, b)
    if WS >= 4:
        a, b = tl.split(tl.reshape(h, (M, 2, 2)))
        h = hadd2_emulated(a, b)
    a, b = tl.split(h)
    return hadd2_emulated(a, b)


@triton.jit
def halves_sum(h, XP: tl.constexpr):
    """The two f16 halves of h (int32 bits) summed in float32."""
    if XP == 2:
        return _unpack_sum(h)
    else:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b16 lo, hi;
            .reg .f32 flo, fhi;
            mov.b32 {lo, hi}, $1;
            cvt.f32.f16 flo, lo;
            cvt.f32.f16 fhi, hi;
            add.f32 $0, flo, fhi;
            }""", constraints="=f,r", args=[h], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def pairs_rows(xp_ptr, w_ptr, s_ptr, z_ptr, rows, rmask, K: tl.constexpr, BK: tl.constexpr, R: tl.constexpr,
               XP: tl.constexpr, LA: tl.constexpr, XT: tl.constexpr = False, LS: tl.constexpr = None,
               WS: tl.constexpr = 1):
    """W[rows] . x over K for int4 words (gemv.py's format) and x as pairs (module docstring): BK / 128
    groups a loop step, each word's dot in packed halves, scaled per group in float32. LA (the lever
    load_ahead): each step's words, scales and zeros loaded one step ahead, in flight during the math.
    XT (the shape's x_tile): the input pairs loaded in the words' tile shape, each thread its own
    (from L1), instead of once and broadcast over the rows. LS (the shape's loop_stages): the loop over K
    software-pipelined that deep (cp.async copies of each step's words, scales, zeros and pairs into
    shared memory, LS - 1 steps ahead); None: not pipelined."""
    GB: tl.constexpr = BK // 128
    NG: tl.constexpr = K // 128
    g0 = tl.arange(0, GB)
    i16 = tl.arange(0, 16)
    acc = tl.zeros((R, GB, 16 // WS), tl.float32)
    if LA:
        words, scale, zi = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, g0, K)
    for k0 in tl.range(0, K, BK, num_stages=LS):
        grp = k0 // 128 + g0
        gmask = grp < NG
        if LA:  # the next step's tile (masked off past the last group): its loads overlap this step's math
            words_next, scale_next, zi_next = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, grp + GB, K)
        else:
            words, scale, zi = int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, grp, K)
        zw = zi.to(tl.int32)
        z0 = tl.broadcast_to(((zw + 0x6400) * 65537)[:, :, None], (R, GB, 16))
        z1 = tl.broadcast_to(((16 * zw + 0x6400) * 65537)[:, :, None], (R, GB, 16))
        xb = xp_ptr + (grp * 64)[:, None] + i16[None, :]
        xm = gmask[:, None]
        if XT:
            xb3 = xb[None, :, :] + 0 * rows[:, None, None]
            xm3 = xm[None, :, :] & rmask[:, None, None]
            x0 = tl.load(xb3, mask=xm3, other=0)
            x1 = tl.load(xb3 + 16, mask=xm3, other=0)
            x2 = tl.load(xb3 + 32, mask=xm3, other=0)
            x3 = tl.load(xb3 + 48, mask=xm3, other=0)
        else:
            x0 = tl.broadcast_to(tl.load(xb, mask=xm, other=0)[None, :, :], (R, GB, 16))
            x1 = tl.broadcast_to(tl.load(xb + 16, mask=xm, other=0)[None, :, :], (R, GB, 16))
            x2 = tl.broadcast_to(tl.load(xb + 32, mask=xm, other=0)[None, :, :], (R, GB, 16))
            x3 = tl.broadcast_to(tl.load(xb + 48, mask=xm, other=0)[None, :, :], (R, GB, 16))
        part = word_partial(words, x0, x1, x2, x3, z0, z1, XP)
        if WS > 1:  # WS words of the thread's row and group: their halves summed in f16 before float32
            if XP == 2:
                part = tl.reshape(hadd2_rows_emulated(tl.reshape(part, (R * GB * (16 // WS), WS)), R * GB * (16 // WS), WS),
                                  (R, GB, 16 // WS))
            else:
                part = tl.reduce(tl.reshape(part, (R, GB, 16 // WS, WS)), 3, hadd2)
        acc += halves_sum(part, XP) * scale[:, :, None]
        if LA:
            words, scale, zi = words_next, scale_next, zi_next
    return tl.sum(tl.sum(acc, axis=2), axis=1)


@triton.jit
def store_pairs(h_ptr, cols, v, mask):
    """Store float32 values v of columns `cols` into the pairs h_ptr (viewed as float16, K of them):
    column 128 g + 16 j + i goes to half j // 4 of pair j % 4 of word i of group g, divided by 16 for
    odd j (nibbles read as 16 q), rounded to f16."""
    c = cols % 128
    j = c // 16
    slot = (cols - c) + (j % 4) * 32 + (c % 16) * 2 + j // 4
    v = tl.where(j % 2 == 1, v * 0.0625, v)
    tl.store(h_ptr + slot, v.to(tl.float16), mask=mask)


def _nibble_weights(device) -> torch.Tensor:
    """What the input of nibble j is multiplied by in the pairs: 1, or 16 for odd j (read as 16 q), shaped
    (1, 8, 1) for a (groups, nibble, word) view."""
    return torch.tensor([1, 16, 1, 16, 1, 16, 1, 16], dtype=torch.float32, device=device).view(1, 8, 1)


def x_pairs(x: torch.Tensor) -> torch.Tensor:
    """The pairs of x as the kernels write them, in torch: (groups, 4, 16) int32, pair p of word i =
    (x[16 p + i], x[16 (p + 4) + i]) as f16 bits, the odd pairs divided by 16."""
    k = x.numel()
    if k % GROUP:
        raise ValueError(f"x_pairs: {k} columns, not whole groups of {GROUP}")
    v = x.float().view(k // GROUP, 8, 16) / _nibble_weights(x.device)  # group, nibble j, word i
    lo, hi = v[:, [0, 1, 2, 3]], v[:, [4, 5, 6, 7]]  # pairs (0, 4), (1, 5), (2, 6), (3, 7)
    bits = lambda t: t.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF  # noqa: E731
    return (bits(lo) | (bits(hi) << 16)).contiguous()


def from_pairs(pairs: torch.Tensor) -> torch.Tensor:
    """x (float32, K) back from its pairs: the inverse of x_pairs (up to f16's rounding of x)."""
    g = pairs.numel() // 64
    h = pairs.contiguous().view(torch.float16).view(g, 4, 16, 2).float()  # group, pair p, word i, half
    v = torch.cat((h[..., 0], h[..., 1]), dim=1)  # nibble j = p + 4 half
    return (v * _nibble_weights(pairs.device)).reshape(-1)


def ptx_reference(words: torch.Tensor, xp: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """What the inline PTX computes, word by word, in torch's float16 (the same bit operations, masks
    and shift; products and sums rounded to f16 as HFMA2 rounds them, up to FMA's single rounding):
    words (n, k / 8) int32, xp = x_pairs(x), zero (n, k / 128); returns (n, k / 8) float32, each word's
    sum of (q - z) x before the group's scale."""
    n, words_per_row = words.shape
    g = words_per_row // 16
    w = words.view(n, g, 16)
    z = zero.float().to(torch.int32).view(n, g, 1)
    halves = lambda t: t.contiguous().view(torch.float16).view(*t.shape, 2)  # noqa: E731 - int32 -> its (lo, hi) f16 pair
    acc = None
    for p in range(4):
        src = w if p < 2 else w >> 8
        t = (src & (0x000F000F if p % 2 == 0 else 0x00F000F0)) | 0x64006400
        zp = ((z + 0x6400) if p % 2 == 0 else (16 * z + 0x6400)) * 65537
        d = halves(t) - halves(zp.expand(n, g, 16))
        prod = d * halves(xp.view(g, 4, 16)[:, p].unsqueeze(0).expand(n, g, 16))
        acc = prod if acc is None else acc + prod
    return (acc[..., 0].float() + acc[..., 1].float()).view(n, words_per_row)
