"""What a 4-bit GEMV with two values an instruction could stream: decodegap's int4 words through
packed half2 arithmetic, beside the fused step's int4 loop on the same weights, one process.

    python benchmarks/int4_packed_gemv.py [--models qwen2.5-7b llama-3.1-8b] [--json out.json]
    python benchmarks/int4_packed_gemv.py --smoke      # the CPU: the layout under Triton's interpreter
    python benchmarks/int4_packed_gemv.py --sass       # no GPU: ptxas's SASS instructions a weight, sm_90

Why: the fused step's int4 loop (gemv._int4_rows) turns each nibble into a float32 with one and-or,
subtracts its zero and multiplies-adds it in float32: with addressing and the input's conversion,
4.6-7.8 SASS instructions a weight (results/benchmarks/gemv_issue_sm90.txt), which the H200 cannot
issue fast enough for 4-bit weights to stream at the memory's speed. Here (inline PTX, one int32 word
of eight nibbles at a time) the word's nibbles become four f16x2 pairs with one and-or each (under the
exponent of 0x6400, the half 1024: nibbles 0, 2, 4, 6 give 1024 + q, nibbles 1, 3, 5, 7 give 1024 + 16 q),
minus the pair's 1024 + z (1024 + 16 z), times the input's pair (the odd nibbles' x divided by 16, exactly),
summed in f16x2 (four products a half) and once into float32: about two instructions a weight.

The input arrives as the f16 pairs the words need (`x_pairs`: per group of 128 columns, four rows of
16 int32 words, pair p of word i holding x[16 p + i] and x[16 (p + 4) + i], the odd pairs divided by
16), as a kernel before would write it (the step writes its GEMVs' inputs itself: the lever x_fp32).
f16 holds bf16's values exactly while |x| stays under 1024 / 60 x 2^6 (a word's half sums four
products of at most 15 |x|): the step's normalised inputs do; the MLP's activations would need a
power-of-two scale per vector. This is a measurement of the inner loop, not a kernel of the step: no
norm, no epilogue, not wired into the fused step.

Per card and role (qkv, o, gate_up, down as plain GEMVs, weights cycled past L2): the step's int4 loop
at the table's launch shape (plain `gemv.linear`), and the packed loop at a few shapes; microseconds,
GB/s of the weights as stored (scales and zeros included), and each one's relative L2 against float32
torch on the same dequantized weights and input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import triton
import triton.language as tl

GROUP = 128
HALF_1024 = 0x6400  # the f16 bits of 1024.0: a nibble OR-ed under it is 1024 + q
_GROUP, _HALF_1024 = tl.constexpr(GROUP), tl.constexpr(HALF_1024)  # the same, as a kernel reads a global
SHAPES = [(2, 512, 4), (4, 512, 4), (4, 1024, 4), (8, 512, 4), (8, 1024, 8), (16, 512, 8), (4, 2048, 8)]  # rows, block_k, warps


@triton.jit
def _word_dot(w, x0, x1, x2, x3, z0, z1, EMULATE: tl.constexpr):
    """Sum over a word's eight nibbles of (q - z) x, float32, per element: w the int32 words, x0..x3
    the input's f16x2 pairs (as int32 bits), z0 and z1 the pairs (1024 + z, 1024 + z) and
    (1024 + 16 z, 1024 + 16 z). EMULATE (Triton's interpreter, which runs no PTX): the same nibbles,
    pairs and constants in float32."""
    if EMULATE:
        out = tl.zeros(w.shape, tl.float32)
        for p in tl.static_range(4):
            xp = x0 if p == 0 else x1 if p == 1 else x2 if p == 2 else x3
            zp = z0 if p % 2 == 0 else z1
            src = w if p < 2 else w >> 8
            mask = 0x000F000F if p % 2 == 0 else 0x00F000F0
            t = (src & mask) | 0x64006400
            for half in tl.static_range(2):
                tv = ((t >> (16 * half)) & 0xFFFF) - 0x6400  # 1024 + v, less 1024: v (q or 16 q), exactly
                zv = ((zp >> (16 * half)) & 0xFFFF) - 0x6400
                xv = ((xp >> (16 * half)) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
                out += (tv - zv).to(tl.float32) * xv
        return out
    else:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t0, t1, t2, t3, w8, d0, d1, d2, d3, a;
            .reg .b16 lo, hi;
            .reg .f32 flo, fhi;
            lop3.b32 t0, $1, 0x000F000F, 0x64006400, 0xEA;
            lop3.b32 t1, $1, 0x00F000F0, 0x64006400, 0xEA;
            shr.u32 w8, $1, 8;
            lop3.b32 t2, w8, 0x000F000F, 0x64006400, 0xEA;
            lop3.b32 t3, w8, 0x00F000F0, 0x64006400, 0xEA;
            sub.f16x2 d0, t0, $6;
            sub.f16x2 d1, t1, $7;
            sub.f16x2 d2, t2, $6;
            sub.f16x2 d3, t3, $7;
            mul.f16x2 a, d0, $2;
            fma.rn.f16x2 a, d1, $3, a;
            fma.rn.f16x2 a, d2, $4, a;
            fma.rn.f16x2 a, d3, $5, a;
            mov.b32 {lo, hi}, a;
            cvt.f32.f16 flo, lo;
            cvt.f32.f16 fhi, hi;
            add.f32 $0, flo, fhi;
            }""",
            constraints="=f,r,r,r,r,r,r,r", args=[w, x0, x1, x2, x3, z0, z1], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _packed_gemv_kernel(w_ptr, s_ptr, z_ptr, xp_ptr, y_ptr, N: tl.constexpr, K: tl.constexpr, R: tl.constexpr,
                        BK: tl.constexpr, EMULATE: tl.constexpr):
    """Program (block of R rows): y = W x for int4 words (gemv.py's format) and x as f16 pairs
    (module docstring), BK / 128 groups a loop step, each word's dot in packed halves, scaled per
    group in float32."""
    GB: tl.constexpr = BK // _GROUP
    NG: tl.constexpr = K // _GROUP
    rows = tl.program_id(0) * R + tl.arange(0, R)
    rmask = rows < N
    g0 = tl.arange(0, GB)
    i16 = tl.arange(0, 16)
    acc = tl.zeros((R, GB, 16), tl.float32)
    for k0 in range(0, K, BK):
        grp = k0 // _GROUP + g0
        gmask = grp < NG
        m2 = rmask[:, None] & gmask[None, :]
        words = tl.load(w_ptr + rows[:, None, None] * (K // 8) + (grp * 16)[None, :, None] + i16[None, None, :],
                        mask=m2[:, :, None], other=0, eviction_policy="evict_first")
        sz = rows[:, None] * NG + grp[None, :]
        scale = tl.load(s_ptr + sz, mask=m2, other=0.0).to(tl.float32)
        zi = tl.load(z_ptr + sz, mask=m2, other=0.0).to(tl.int32)
        z0 = tl.broadcast_to(((zi + 0x6400) * 65537)[:, :, None], (R, GB, 16))
        z1 = tl.broadcast_to(((16 * zi + 0x6400) * 65537)[:, :, None], (R, GB, 16))
        xb = xp_ptr + (grp * 64)[:, None] + i16[None, :]
        xm = gmask[:, None]
        x0 = tl.broadcast_to(tl.load(xb, mask=xm, other=0)[None, :, :], (R, GB, 16))
        x1 = tl.broadcast_to(tl.load(xb + 16, mask=xm, other=0)[None, :, :], (R, GB, 16))
        x2 = tl.broadcast_to(tl.load(xb + 32, mask=xm, other=0)[None, :, :], (R, GB, 16))
        x3 = tl.broadcast_to(tl.load(xb + 48, mask=xm, other=0)[None, :, :], (R, GB, 16))
        acc += _word_dot(words, x0, x1, x2, x3, z0, z1, EMULATE) * scale[:, :, None]
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rmask)


def x_pairs(x: torch.Tensor) -> torch.Tensor:
    """The input as the packed loop reads it: (groups, 4, 16) int32, pair p of word i = (x[16 p + i],
    x[16 (p + 4) + i]) as f16 bits, the odd pairs (nibbles 1, 3, 5, 7 read as 16 q) divided by 16."""
    k = x.numel()
    if k % GROUP:
        raise ValueError(f"x_pairs: {k} columns, not whole groups of {GROUP}")
    v = x.float().view(k // GROUP, 8, 16)  # group, nibble j, word i
    v = v / torch.tensor([1, 16, 1, 16, 1, 16, 1, 16], dtype=torch.float32, device=x.device).view(1, 8, 1)
    # nibble order of the pairs: (0, 4), (1, 5) from the word, (2, 6), (3, 7) from the word shifted by 8
    lo, hi = v[:, [0, 1, 2, 3]], v[:, [4, 5, 6, 7]]
    bits = lambda t: t.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF  # noqa: E731
    return (bits(lo) | (bits(hi) << 16)).contiguous()


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
        prod = d * halves(xp[:, p].unsqueeze(0).expand(n, g, 16))
        acc = prod if acc is None else acc + prod
    return (acc[..., 0].float() + acc[..., 1].float()).view(n, words_per_row)


def packed_gemv(op, xp: torch.Tensor, out: torch.Tensor, rows: int, block_k: int, warps: int, emulate: bool = False) -> None:
    """out = W x with W an int4 gemv.WeightOperand and xp = x_pairs(x)."""
    n, k = op.n, op.k
    if xp.shape != (k // GROUP, 4, 16) or xp.dtype != torch.int32:
        raise ValueError(f"packed_gemv: x pairs must be int32 of shape {(k // GROUP, 4, 16)}, not {xp.dtype} {tuple(xp.shape)}")
    bk = min(block_k, triton.next_power_of_2(k))
    _packed_gemv_kernel[(triton.cdiv(n, rows),)](op.weight, op.scale, op.zero, xp, out, N=n, K=k, R=rows, BK=bk,
                                                 EMULATE=emulate, num_warps=warps)


def random_int4(n: int, k: int, device) -> "object":
    """An int4 operand with random words, zeros 0..15 and scales keeping outputs near 1."""
    from decodegap.measure.fused_kernels.gemv import WeightOperand

    g = k // GROUP
    words = torch.randint(-2**31, 2**31 - 1, (n, k // 8), device=device, dtype=torch.int32)
    scale = (torch.rand(n, g, device=device) + 0.5).mul(0.2 * k**-0.5).to(torch.bfloat16)
    zero = torch.randint(0, 16, (n, g), device=device).to(torch.bfloat16)
    return WeightOperand("int4", words, scale, zero)


def _rel(got, ref) -> float:
    return float((got.float() - ref).norm() / ref.norm())


def run(models, device, log=print, smoke: bool = False, json_path: str | None = None) -> list[dict]:
    """Every card's four int4 roles: the step's loop and the packed one (module docstring); the rows
    written to `json_path` after each GEMV, so a run cut short keeps what it measured."""
    from decodegap.core.config import load_models
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.ops import dequantize
    from decodegap.measure.fused_kernels.tune import L2_FLUSH_BYTES, graph_us, role_shapes

    cards, table, rows = load_models(), fk.resolve(None, device), []
    shapes = SHAPES[1:2] if smoke else SHAPES
    for key in models:
        arch = dict(cards[key].architecture)
        if smoke:  # tiny cards widened to whole groups, as the tests widen them
            arch.update(hidden_size=256, intermediate_size=256, head_dim=64)
        for role in ("qkv", "o", "gate_up", "down"):
            n, k = role_shapes(arch)[role]
            op0 = random_int4(n, k, device)
            stored = sum(t.numel() * t.element_size() for t in (op0.weight, op0.scale, op0.zero))
            copies = max(1, -(-L2_FLUSH_BYTES // stored)) if device.type == "cuda" else 1
            ops = [op0] + [random_int4(n, k, device) for _ in range(copies - 1)]
            x = (torch.randn(k, device=device) * (1 + torch.rand(k, device=device))).to(torch.bfloat16)
            xp, out = x_pairs(x), torch.empty(n, device=device, dtype=torch.bfloat16)
            ref = dequantize(op0) @ x.float()
            step_shape = table.gemv_for("int4", role, arch["hidden_size"])
            row = {"model": key, "role": role, "n": n, "k": k, "bytes": stored, "step_shape": step_shape.as_dict(), "packed": {}}
            out.fill_(float("nan"))
            fk.linear(x, op0, out, shape=step_shape)
            row["step_check"] = _rel(out, ref)
            row["step_us"] = graph_us(lambda i: fk.linear(x, ops[i], out, shape=step_shape), len(ops), device)
            for r, bk, w in shapes:
                name = f"{r}x{bk}/{w}w"
                try:
                    out.fill_(float("nan"))
                    packed_gemv(op0, xp, out, r, bk, w, emulate=smoke)
                    check = _rel(out, ref)
                    us = graph_us(lambda i: packed_gemv(ops[i], xp, out, r, bk, w, emulate=smoke), len(ops), device)
                    row["packed"][name] = {"us": us, "check": check, "GBps": stored / us / 1e3}
                except Exception as exc:  # noqa: BLE001 - a shape that does not compile is a line
                    row["packed"][name] = {"error": str(exc).splitlines()[0][:200]}
            ok = {s: v for s, v in row["packed"].items() if "us" in v}
            best = min(ok, key=lambda s: ok[s]["us"]) if ok else None
            row["best"] = best
            log(f"{key:16s} {role:8s} {n:>6d} x {k:<6d} step loop {row['step_us']:8.2f} us {stored / row['step_us'] / 1e3:6.0f} GB/s "
                f"(check {row['step_check']:.1e})" + (f" | packed best {best} {ok[best]['us']:8.2f} us {ok[best]['GBps']:6.0f} GB/s "
                f"(check {ok[best]['check']:.1e}), {row['step_us'] / ok[best]['us']:.2f}x" if best else " | packed: none ran")
                + "  [" + "  ".join(f"{s} {v['us']:.2f}" if "us" in v else f"{s} error" for s, v in row["packed"].items()) + "]")
            rows.append(row)
            if json_path:
                with open(json_path, "w") as f:
                    json.dump(rows, f, indent=1)
            del ops
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def sass_counts(arch: int = 90, n: int = 37888, k: int = 3584) -> dict:
    """Per shape, the packed loop compiled for sm_`arch` without a GPU (fused_kernels.ahead's compile,
    SASS count and issue bound), at Qwen-2.5-7B's gate_up shape by default: SASS instructions per
    weight by class, registers, spills and the bandwidth the H200 could issue them at."""
    from decodegap.measure.fused_kernels import ahead

    out = {}
    for r, bk, w in SHAPES:
        args = (torch.empty(n, k // 8, dtype=torch.int32), torch.empty(n, k // GROUP, dtype=torch.bfloat16),
                torch.empty(n, k // GROUP, dtype=torch.bfloat16), torch.empty(k // GROUP, 4, 16, dtype=torch.int32),
                torch.empty(n, dtype=torch.bfloat16))
        kernel, options = ahead._compile(_packed_gemv_kernel, args, {"N": n, "K": k, "R": r, "BK": bk, "EMULATE": False,
                                                                     "num_warps": w}, arch)
        row = {"weight_dtype": "int32", **ahead._inspect(kernel.asm["cubin"]),
               "program": {"weights_per_thread": r * k / (w * 32), "trips": -(-k // bk)}}
        iss = ahead.issue_bound(row)
        out[f"{r}x{bk}/{w}w"] = {"registers": row["registers"], "spill_bytes": row["spill_bytes"],
                                 "per_weight": iss["per_weight"], "issue_TBps": iss["issue_TBps"],
                                 "by_op": {op: round(v, 3) for op, v in list(iss["by_op"].items())[:8]}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "llama-3.1-8b"])
    ap.add_argument("--json", help="write the rows here as well")
    ap.add_argument("--smoke", action="store_true", help="the CPU under Triton's interpreter, the tiny cards: a test of the layout")
    ap.add_argument("--sass", action="store_true", help="no GPU: the packed loop's SASS instructions a weight for sm_90")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.sass:
        for name, got in sass_counts().items():
            mix = " ".join(f"{op} {v:.2f}" for op, v in got["by_op"].items())
            print(f"{name:12s} regs {got['registers']:3d} spills {got['spill_bytes']} B  {got['per_weight']:.2f} instructions a weight "
                  f"({mix}): issues at most {got['issue_TBps']:.2f} TB/s of int4 weights")
        return 0
    if a.smoke:
        import os

        if os.environ.get("TRITON_INTERPRET") != "1":
            print("int4_packed_gemv --smoke: set TRITON_INTERPRET=1 (the CPU runs Triton's interpreter)", file=sys.stderr)
            return 2
        device, models = torch.device("cpu"), ["tiny-qwen"]
    else:
        if not torch.cuda.is_available():
            print("int4_packed_gemv: needs a CUDA GPU (it times on the device); --smoke runs the layout on the CPU", file=sys.stderr)
            return 2
        device, models = torch.device("cuda"), a.models
        from decodegap.measure.environment import gpu_uuid

        print(f"on {torch.cuda.get_device_name()} {gpu_uuid(0)} (torch {torch.__version__}, Triton {triton.__version__})")
    with torch.inference_mode():
        rows = run(models, device, smoke=a.smoke, json_path=a.json)
    print(f"{len(rows)} GEMVs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
