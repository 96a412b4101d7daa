"""What the fused kernels share: the legend of their compile-time names, the checks every launch
wrapper makes of its tensors, and the small Triton helpers (the RMSNorm prologue, the input chunk,
programmatic dependent launch).

Legend. Triton specialises a kernel on its `tl.constexpr` arguments; they are upper-case here:

  K, KP      columns of W (the input vector's length), and K padded to a power of 2 (tl.arange's)
  N          rows of W
  R          rows one GEMV tile holds: BN, or 2 * BP for row pairs
  BN         rows of W per program (linear, gate_up)
  BK         columns of W per loop step
  BP         RoPE pairs per program (qkv): row i of a head with row i + head_dim/2
  I          intermediate size: rows of gate, and of up, in the joined gate/up weight
  H, HP      hidden size and its padding (add_norm)
  HQ, HKV    query heads, KV heads
  D, DP      head dim, and padded (at least 16, tl.dot's smallest tile)
  G, GP      query heads per KV head (the group), and padded (at least 16)
  L          positions the KV cache holds (its length, not the step's position)
  SPLIT      cache positions per attention split program
  BT         positions per attention loop step (a BT x D tile of K and of V)
  NS, NSP    attention splits, and padded to a power of 2
  CS         splits per step of a combine
  FMT        weight storage format: DENSE (as stored, bf16 or float32), FP8 (e4m3, a float32 scale
             per row), INT4 (int32 words of eight 4-bit values, a scale and zero per group of 128)
  XT         the input chunk loaded as a tile of W's shape, not a vector (GemvConfig.x_tile)
  XP         the input as f16 pairs (the lever x_pairs): 0 off; 1 or 2 int4's pairs (int4_pairs.py:
             inline PTX, or emulated under the interpreter); 3 or 4 fp8's halves (fp8_pairs.py, likewise)
  LA         each loop step's weights loaded one step ahead (the lever load_ahead)
  PAIRS, OUT_PAIRS
             a writer's output as f16 pairs for the next GEMV: 0 as its dtype, 1 int4's, 2 fp8's
  NORM       the input's RMSNorm prologue: NORM_OFF (x is used as given: already normalised, or
             no norm), NORM_PROGRAM (every program sums x's squares itself) or NORM_SUM (x's sum of
             squares read from one float32 that the kernel which wrote x added it into)
  SUM_OUT    an epilogue adds the sum of squares of the rows it wrote into one float32 (NORM_SUM's)
  HAS_BIAS, RESIDUAL, FROM_Y, ADD
             epilogue switches: add a bias, add into a residual, take a packed path's GEMV output
             instead of computing it, add before the norm
  SKIP_EMPTY, COMBINE, PDL
             levers (launch.py): branch past empty attention blocks, combine splits in the split
             kernel, programmatic dependent launch
  PF, PF_LINE, ROWW
             with PDL, each row's first PF stored elements (a power of 2; 0: none) prefetched into L2
             before the wait, one prefetch a PF_LINE elements (a 128-byte line), by the programs
             below the run-time argument pf_programs; ROWW: a row's stored elements (K, or K / 8
             int4 words)

Numerics: every product is float32 (Triton 3.6's interpreter, which the CPU tests run, computes
bf16 `*` and bf16 `tl.dot` wrongly); where transformers rounds to the activations' dtype, the kernels
round too (`.to(dtype).to(tl.float32)`), so in bf16 the two differ only in summation order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.launch import L2_AHEAD_PRIORITIES

try:  # Triton 3.2+: griddepcontrol, Hopper's programmatic dependent launch
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - an older Triton: the PDL lever is unavailable
    gdc_launch_dependents = gdc_wait = None

DENSE, FP8, INT4 = 0, 1, 2  # FMT: the weight storage formats (gemv.WeightOperand.format names them)
FMT_FP8, FMT_INT4 = tl.constexpr(FP8), tl.constexpr(INT4)  # the same, as a kernel may read a global
INT4_GROUP = 128  # columns per int4 group: one scale and one zero per group and row
INT4_PER_WORD = 8  # 4-bit values per int32 word
INT4_WORDS_PER_GROUP = INT4_GROUP // INT4_PER_WORD
NORM_OFF, NORM_PROGRAM, NORM_SUM = 0, 1, 2  # NORM: how a GEMV's RMSNorm prologue gets x's statistics (legend)


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


def pdl_available(device) -> str | None:
    """None when programmatic dependent launch can be switched on for `device`, else why not."""
    device = torch.device(device)
    if device.type != "cuda":
        return "programmatic dependent launch needs a CUDA GPU"
    if gdc_wait is None:
        return f"Triton {triton.__version__} has no griddepcontrol (triton.language.extra.cuda.gdc_wait)"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "programmatic dependent launch needs compute capability 9.0 (Hopper) or newer"
    return None


def launch_options(warps: int, pdl: bool, stages: int | None = None) -> dict:
    """Keyword options of a kernel launch; launch_pdl only when on (the interpreter takes no such option)."""
    out = {"num_warps": warps}
    if stages is not None:
        out["num_stages"] = stages
    if pdl:
        out["launch_pdl"] = True
    return out


def prefetch_programs(programs: int, prefetching: int | None) -> int:
    """The kernels' pf_programs: the first `prefetching` of a launch's `programs` (all when None)."""
    return programs if prefetching is None else min(programs, prefetching)


def prefetch_span(weight, steps: int, block: int, pdl: bool) -> dict:
    """The kernels' PF, PF_LINE and ROWW for a row-major `weight` (rows x ROWW stored elements) whose
    program reads `block` stored elements of a row a loop step (prefetch_elements)."""
    roww, elem_bytes = weight.shape[-1], weight.element_size()
    return {"PF": prefetch_elements(roww, elem_bytes, steps, block, pdl), "PF_LINE": max(1, 128 // elem_bytes), "ROWW": roww}


def prefetch_elements(span: int, elem_bytes: int, steps: int, block: int, pdl: bool) -> int:
    """Elements a program prefetches of a run of `span` elements it reads `block` at a time: with PDL,
    its first `steps` loop steps, rounded up to a power of 2 of whole 128-byte lines and at most the
    run's; 0 without PDL or with steps 0 (then nothing is prefetched)."""
    if not pdl or steps <= 0:
        return 0
    return max(max(1, 128 // elem_bytes), min(p2(steps * block), p2(span)))


def p2(n: int) -> int:
    return triton.next_power_of_2(int(n))


def require(where: str, name: str, t, *, dtype=None, numel: int | None = None, shape=None, device=None) -> None:
    """A launch wrapper's check of one tensor it passes to a kernel: a contiguous tensor (the kernels
    index it as dense memory), of `dtype` (one dtype or a tuple), `numel` elements or exactly `shape`,
    on `device`; a ValueError names the function and the argument."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{where}: {name} must be a tensor, not {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{where}: {name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
    if dtype is not None and t.dtype not in (dtype if isinstance(dtype, tuple) else (dtype,)):
        want = ", ".join(str(d).removeprefix("torch.") for d in (dtype if isinstance(dtype, tuple) else (dtype,)))
        raise ValueError(f"{where}: {name} must be {want}, not {str(t.dtype).removeprefix('torch.')}")
    if numel is not None and t.numel() != numel:
        raise ValueError(f"{where}: {name} must hold {numel} elements, not {t.numel()} (shape {tuple(t.shape)})")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{where}: {name} must have shape {tuple(shape)}, not {tuple(t.shape)}")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"{where}: {name} is on {t.device}, the other tensors on {device}")


def check_index_range(where: str, n: int, k: int) -> None:
    if n * k >= 2**31:  # the kernels index W in 32 bits
        raise ValueError(f"{where}: a {n} x {k} weight is too large for the fused kernels' 32-bit indexing")


# ----------------------------------------------------------------------------- Triton helpers


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """With PDL, wait until the kernel before this one has finished and its writes are visible
    (nothing a kernel does before this call may read an activation or write anything), then let the
    kernel after this one start launching as this one's programs drain."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs, LAST: tl.constexpr = False):
    """Each pointer's 128-byte line fetched into L2 (PTX prefetch.global.L2: nothing written to a
    register, nothing waited for); LAST: with L2's evict-last priority (prefetch.global.L2::evict_last,
    sm_80 and newer), so the line outlives the evict-first weight streams that run before it is read.
    Not under the interpreter, which runs no PTX: only behind PDL."""
    if LAST:
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                                  is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                                  is_pure=False, pack=1)


L2_MARK = 3  # l2_ahead's PRI that marks the lines it would prefetch (tests: the shares, run under the interpreter)
L2_AHEAD_SLOTS = 3  # spans a kernel prefetches under l2_ahead: o's weight, and the first rows of gate_up's gate and up halves


@triton.jit
def l2_ahead_span(ptr, lines, per, pid, PRI: tl.constexpr, TILE: tl.constexpr, STEPS: tl.constexpr):
    """Program `pid`'s share of a span of `lines` 128-byte lines from `ptr` (a byte pointer): lines
    pid * per .. pid * per + per - 1, TILE a step for STEPS steps (none: STEPS 0), prefetched into L2 with
    priority PRI (L2_AHEAD_PRIORITIES: 1 normal, 2 evict-last). A line past the share prefetches the
    share's last line again, one past the span the span's last (addresses that exist). PRI L2_MARK
    (tests, under the interpreter, which runs no PTX) writes 1 to each line's first byte instead."""
    last = tl.minimum(pid * per + per, lines) - 1
    for i in tl.static_range(STEPS):
        line = tl.minimum(pid * per + i * TILE + tl.arange(0, TILE), last)
        if PRI == 3:  # L2_MARK
            tl.store(ptr + line.to(tl.int64) * 128, tl.full((TILE,), 1, tl.uint8))
        else:
            prefetch_l2(ptr + line.to(tl.int64) * 128, PRI == 2)


@triton.jit
def l2_ahead(pid, l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines, l2c_per, L2_PRI: tl.constexpr,
             L2A_TILE: tl.constexpr, L2A_STEPS: tl.constexpr, L2B_TILE: tl.constexpr, L2B_STEPS: tl.constexpr,
             L2C_TILE: tl.constexpr, L2C_STEPS: tl.constexpr):
    """Program `pid`'s share of each of the (up to) L2_AHEAD_SLOTS spans l2_ahead_args laid out, in slot
    order (the weight read first, first): what a latency-bound kernel (attention) does for the weights
    read after it, so the memory streams them while it waits on latencies. Nothing when L2_PRI is 0."""
    if L2_PRI > 0:
        l2_ahead_span(l2a_ptr, l2a_lines, l2a_per, pid, L2_PRI, L2A_TILE, L2A_STEPS)
        l2_ahead_span(l2b_ptr, l2b_lines, l2b_per, pid, L2_PRI, L2B_TILE, L2B_STEPS)
        l2_ahead_span(l2c_ptr, l2c_lines, l2c_per, pid, L2_PRI, L2C_TILE, L2C_STEPS)


def l2_ahead_args(spans, programs: int, priority: str | None, pdl: bool, stand_in) -> dict:
    """l2_ahead's arguments for `spans` (up to L2_AHEAD_SLOTS contiguous tensors of any dtype: their
    bytes, in the order they are read), each shared among `programs` programs in whole lines, with
    `priority` (L2_AHEAD_PRIORITIES). Nothing (L2_PRI 0) without spans or PDL: the prefetch goes before
    PDL's wait (the interpreter, which runs no PTX, never has it)."""
    spans = [t for t in (spans or []) if t is not None and t.numel()]
    out = {"L2_PRI": 0}
    for slot in "abc":
        out.update({f"l2{slot}_ptr": stand_in, f"l2{slot}_lines": 1, f"l2{slot}_per": 0,
                    f"L2{slot.upper()}_TILE": 1, f"L2{slot.upper()}_STEPS": 0})
    if not spans or not pdl:
        return out
    if priority not in L2_AHEAD_PRIORITIES:
        raise ValueError(f"l2_ahead priority {priority!r}: one of {', '.join(L2_AHEAD_PRIORITIES)}")
    if len(spans) > L2_AHEAD_SLOTS:
        raise ValueError(f"l2_ahead: {len(spans)} spans, at most {L2_AHEAD_SLOTS}")
    out["L2_PRI"] = L2_AHEAD_PRIORITIES[priority]
    for slot, span in zip("abc", spans):
        if not span.is_contiguous():
            raise ValueError(f"l2_ahead: span {slot} must be contiguous (shape {tuple(span.shape)}, strides {span.stride()})")
        lines = -(-span.numel() * span.element_size() // 128)
        per = -(-lines // programs)
        tile = min(p2(per), 2048)
        out.update({f"l2{slot}_ptr": span.reshape(-1).view(torch.uint8), f"l2{slot}_lines": lines, f"l2{slot}_per": per,
                    f"L2{slot.upper()}_TILE": tile, f"L2{slot.upper()}_STEPS": -(-per // tile)})
    return out


@triton.jit
def prefetch_rows(w_ptr, rows, rmask, pid, pf_programs, ROWW: tl.constexpr, PF: tl.constexpr, PF_LINE: tl.constexpr):
    """The first PF stored elements of each of `rows` (ROWW a row, row-major) prefetched into L2, one
    prefetch a line, by the kernel's first `pf_programs` programs (pid below it); a masked row
    prefetches row 0 (an address that exists), and a row shorter than PF its last line again. What a
    GEMV program does before PDL's wait: its weight does not depend on the kernel before, so its first
    loop steps stream into L2 while that kernel drains. Only the first programs: those that start
    while the kernel before still runs; a later one would pay the prefetch's round trip before its
    own loads for nothing (measured: every program prefetching ran the steps 0.86-0.99x)."""
    if PF > 0:
        if pid < pf_programs:
            r = tl.where(rmask, rows, 0)
            c = tl.minimum(tl.arange(0, PF // PF_LINE) * PF_LINE, ROWW - 1)
            prefetch_l2(w_ptr + r[:, None] * ROWW + c[None, :])


@triton.jit
def rstd_of(x_ptr, K: tl.constexpr, KP: tl.constexpr, eps):
    """1 / RMS of x's K elements, in float32 (transformers' RMSNorm takes the variance in float32)."""
    offs = tl.arange(0, KP)
    x = tl.load(x_ptr + offs, mask=offs < K, other=0.0).to(tl.float32)
    return tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)


@triton.jit
def rstd_for(x_ptr, ss_ptr, K: tl.constexpr, KP: tl.constexpr, eps, NORM: tl.constexpr):
    """The RMSNorm prologue's 1 / RMS of x: summed by this program (NORM_PROGRAM: K loads and a
    reduction in every program), from the sum of squares at ss_ptr (NORM_SUM: one load), or 1.0
    (NORM_OFF, unused)."""
    rstd = 1.0
    if NORM == 1:
        rstd = rstd_of(x_ptr, K, KP, eps)
    elif NORM == 2:
        rstd = tl.rsqrt(tl.load(ss_ptr) / K + eps)
    return rstd


@triton.jit
def input_chunk(x_ptr, g_ptr, cols, cmask, rstd, NORM: tl.constexpr):
    """x[cols] (any shape of column indices) as the GEMV multiplies it, in float32: normalised and
    scaled by the norm's weight g, each rounded to the activations' dtype as transformers' RMSNorm
    rounds them, when NORM; else as stored."""
    x = tl.load(x_ptr + cols, mask=cmask, other=0.0)
    x32 = x.to(tl.float32)
    if NORM:  # float32 products rounded to x's dtype: what a bf16 multiply gives (the interpreter's bf16 arithmetic is wrong)
        xn = (x32 * rstd).to(x.dtype).to(tl.float32)
        x32 = (tl.load(g_ptr + cols, mask=cmask, other=0.0).to(tl.float32) * xn).to(x.dtype).to(tl.float32)
    return x32


@triton.jit
def int4_groups(w_ptr, s_ptr, z_ptr, rows, rmask, grp, K: tl.constexpr):
    """One loop step's int4 tile (gemv.py's format): the words of groups `grp` of `rows` (an R x groups x
    16 tile, streamed with evict-first), their scales in float32 and their zeros as stored (bf16
    integers), masked past the last row and group."""
    NG: tl.constexpr = K // 128
    i16 = tl.arange(0, 16)
    m2 = rmask[:, None] & (grp < NG)[None, :]
    words = tl.load(w_ptr + rows[:, None, None] * (K // 8) + (grp * 16)[None, :, None] + i16[None, None, :],
                    mask=m2[:, :, None], other=0, eviction_policy="evict_first")
    sz = rows[:, None] * NG + grp[None, :]
    return words, tl.load(s_ptr + sz, mask=m2, other=0.0).to(tl.float32), tl.load(z_ptr + sz, mask=m2, other=0.0)
