"""What a 4-bit GEMV with two values an instruction could stream: decodegap's int4 words through
packed half2 arithmetic, beside the fused step's int4 loop on the same weights, one process.

    python benchmarks/int4_packed_gemv.py [--models qwen2.5-7b llama-3.1-8b] [--json out.json]
    python benchmarks/int4_packed_gemv.py --smoke      # the CPU: the layout under Triton's interpreter
    python benchmarks/int4_packed_gemv.py --sass       # no GPU: ptxas's SASS instructions a weight, sm_90
    python benchmarks/int4_packed_gemv.py --dot [--sass]  # also the tensor cores' kernel, beside the read-only one

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
16), as the kernel before writes it in the step (the lever x_pairs: add_norm and gate_up's epilogue).
The loop is the fused step's own (fused_kernels/int4_pairs.py, its range limit there), timed here as a
plain GEMV: no norm, no epilogue.

Per card and role (qkv, o, gate_up, down as plain GEMVs, weights cycled past L2): the step's int4 loop
at the table's int4 launch shape (plain `gemv.linear`), and the packed loop at a few shapes; microseconds,
GB/s of the weights as stored (scales and zeros included), and each one's relative L2 against float32
torch on the same dequantized weights and input.

With --dot, also the tensor cores' way (`_dot_gemv_kernel`, the lever Marlin-style kernels pull): the
same words as a tile of f16 1024 + q multiplied by x (in the words' order, padded to the dot's 16
columns) with tl.dot, whose loop Triton pipelines through shared memory, beside the read-only kernel
over the same bytes. On the H200 it took 2.15-3.09x the step loop's time
(results/benchmarks/int4_dot_gemv_h200.txt): Triton moves the dequantized tile into the mma's layout
through shared memory one 16-bit value at a time (--sass --dot: 5.2-11.4 instructions a weight).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import triton
import triton.language as tl

from decodegap.measure.fused_kernels.int4_pairs import (  # noqa: F401 - x_pairs and ptx_reference: the tests' too
    GROUP, XP_EMULATED, XP_PTX, pairs_rows, ptx_reference, x_pairs)

SHAPES = [(2, 512, 4), (4, 512, 4), (4, 1024, 4), (8, 512, 4), (8, 1024, 8), (16, 512, 8), (4, 2048, 8)]  # rows, block_k, warps


@triton.jit
def _packed_gemv_kernel(w_ptr, s_ptr, z_ptr, xp_ptr, y_ptr, N: tl.constexpr, K: tl.constexpr, R: tl.constexpr,
                        BK: tl.constexpr, XP: tl.constexpr):
    """Program (block of R rows): y = W x for int4 words (gemv.py's format) and x as f16 pairs: the
    fused step's own pair loop (int4_pairs.pairs_rows), with no prologue or epilogue."""
    rows = tl.program_id(0) * R + tl.arange(0, R)
    rmask = rows < N
    y = pairs_rows(xp_ptr, w_ptr, s_ptr, z_ptr, rows, rmask, K, BK, R, XP, False)  # without load_ahead
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rmask)


def packed_gemv(op, xp: torch.Tensor, out: torch.Tensor, rows: int, block_k: int, warps: int, emulate: bool = False) -> None:
    """out = W x with W an int4 gemv.WeightOperand and xp = x_pairs(x)."""
    n, k = op.n, op.k
    if xp.shape != (k // GROUP, 4, 16) or xp.dtype != torch.int32:
        raise ValueError(f"packed_gemv: x pairs must be int32 of shape {(k // GROUP, 4, 16)}, not {xp.dtype} {tuple(xp.shape)}")
    bk = min(block_k, triton.next_power_of_2(k))
    _packed_gemv_kernel[(triton.cdiv(n, rows),)](op.weight, op.scale, op.zero, xp, out, N=n, K=k, R=rows, BK=bk,
                                                 XP=XP_EMULATED if emulate else XP_PTX, num_warps=warps)


# --- the tensor cores' way (the lever the README names as missing: the dequantized tile fed to mma) ---

DOT_SHAPES = [(128, 1, 1, 4, 3, 0), (64, 1, 1, 4, 3, 1), (128, 1, 1, 4, 3, 1), (64, 2, 1, 4, 3, 1), (128, 2, 1, 8, 3, 1),
              (64, 1, 1, 4, 5, 1), (32, 1, 4, 4, 3, 1), (64, 1, 4, 4, 3, 1), (64, 2, 2, 4, 4, 1)]
# rows, groups a loop step, K splits, warps, pipeline stages, W as the dot's second operand (1) or first (0)


@triton.jit
def _dot_gemv_kernel(w_ptr, s_ptr, z_ptr, xq_ptr, y_ptr, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr,
                     GS: tl.constexpr, SPLIT: tl.constexpr, STAGES: tl.constexpr, WB: tl.constexpr):
    """Program (BN rows, one of SPLIT spans of K): y = W x on the tensor cores, for the step's own int4
    words. Each group's words (BN x 16) become a BN x 128 f16 tile of 1024 + q (nibble n of word i at
    position 8 i + n: one shift and one and-or a weight, no zero subtracted) multiplied by `xq`, x
    permuted to that order (position 8 i + n of a group holds x[16 n + i]) and padded to the dot's
    16 columns (column 0 is x, the rest zeros); the zero and the 1024 come off once a group, as
    (1024 + z) times the group's sum of x. Loops with a dot are what Triton pipelines (cp.async
    copies of the words STAGES - 1 steps ahead into shared memory), which the GEMV loops never got."""
    NG: tl.constexpr = K // 128
    SPAN: tl.constexpr = NG // SPLIT  # groups of one program (the wrapper keeps NG a multiple)
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rows < N
    i16 = tl.arange(0, 16)
    p128 = tl.arange(0, 128)
    shifts = tl.arange(0, 8) * 4
    col = tl.arange(0, 16)
    acc = tl.zeros((16, BN), tl.float32)
    corr = tl.zeros((BN,), tl.float32)
    g_first = tl.program_id(1) * SPAN
    for t in tl.range(0, SPAN, GS, num_stages=STAGES):
        for u in tl.static_range(GS):
            g = g_first + t + u
            xg = tl.load(xq_ptr + g * 128 + p128)
            s = tl.load(s_ptr + rows * NG + g, mask=rmask, other=0.0).to(tl.float32)
            z = tl.load(z_ptr + rows * NG + g, mask=rmask, other=0.0).to(tl.float32)
            if WB:  # W the dot's second operand (128 x BN), x the first (16 x 128, x in row 0)
                words = tl.load(w_ptr + rows[None, :] * (K // 8) + g * 16 + i16[:, None], mask=rmask[None, :], other=0,
                                eviction_policy="evict_first")
                q = (words[:, None, :] >> shifts[None, :, None]) & 0xF | 0x6400  # 16 x 8 x BN: f16 bits of 1024 + q
                b = tl.reshape(q, (128, BN)).to(tl.int16).to(tl.float16, bitcast=True)
                xa = tl.where(col[:, None] == 0, xg[None, :], 0.0).to(tl.float16)
                acc += tl.dot(xa, b) * s[None, :]  # 16 x BN; rows 1-15 are zeros
            else:  # W the first operand (BN x 128), x the second (128 x 16, x in column 0)
                words = tl.load(w_ptr + rows[:, None] * (K // 8) + g * 16 + i16[None, :], mask=rmask[:, None], other=0,
                                eviction_policy="evict_first")
                q = (words[:, :, None] >> shifts[None, None, :]) & 0xF | 0x6400  # BN x 16 x 8: f16 bits of 1024 + q
                a = tl.reshape(q, (BN, 128)).to(tl.int16).to(tl.float16, bitcast=True)
                xb = tl.where(col[None, :] == 0, xg[:, None], 0.0).to(tl.float16)
                acc += tl.trans(tl.dot(a, xb)) * s[None, :]  # BN x 16 as 16 x BN; columns 1-15 are zeros
            corr += (1024.0 + z) * s * tl.sum(xg.to(tl.float32), axis=0)
    y = tl.sum(acc, axis=0) - corr
    if SPLIT == 1:
        tl.store(y_ptr + rows, y, mask=rmask)
    else:
        tl.atomic_add(y_ptr + rows, y, mask=rmask, sem="relaxed")


def x_dot_order(x: torch.Tensor) -> torch.Tensor:
    """x (K, whole groups of 128) in the dot's order, as f16: position 8 i + n of a group holds x[16 n + i]."""
    k = x.numel()
    if k % GROUP:
        raise ValueError(f"x_dot_order: {k} columns are not whole groups of {GROUP}")
    return x.view(k // GROUP, 8, 16).transpose(1, 2).reshape(k).to(torch.float16).contiguous()


def dot_gemv(op, xq: torch.Tensor, out: torch.Tensor, rows: int, groups: int, split: int, warps: int, stages: int,
             w_second: int = 1) -> None:
    """out (float32) = W x on the tensor cores, W an int4 gemv.WeightOperand and xq = x_dot_order(x);
    with split > 1 the K spans add into out, which this zeroes first (its memset is part of the time)."""
    n, k = op.n, op.k
    ng = k // GROUP
    if xq.shape != (k,) or xq.dtype != torch.float16:
        raise ValueError(f"dot_gemv: x must be float16 of shape ({k},) in the dot's order, not {xq.dtype} {tuple(xq.shape)}")
    if out.dtype != torch.float32:
        raise ValueError(f"dot_gemv: out must be float32, not {out.dtype}")
    if ng % (split * groups):
        raise ValueError(f"dot_gemv: {ng} groups do not split into {split} spans of {groups}-group steps")
    if split > 1:
        out.zero_()
    _dot_gemv_kernel[(triton.cdiv(n, rows), split)](op.weight, op.scale, op.zero, xq, out, N=n, K=k, BN=rows, GS=groups,
                                                     SPLIT=split, STAGES=stages, WB=w_second, num_warps=warps)


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


def run(models, device, log=print, smoke: bool = False, json_path: str | None = None, dot: bool = False) -> list[dict]:
    """Every card's four int4 roles: the step's loop and the packed one (module docstring), and with
    `dot` the tensor cores' kernel at DOT_SHAPES beside the read-only kernel over the same bytes; the
    rows written to `json_path` after each GEMV, so a run cut short keeps what it measured."""
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
            if dot:
                xq, out32 = x_dot_order(x), torch.empty(n, device=device, dtype=torch.float32)
                row["dot"] = {}
                for r, gs, sp, w, st, wb in (DOT_SHAPES[:2] if smoke else DOT_SHAPES):
                    name = f"{r}r{gs}g/{sp}s/{w}w/{st}st/{'WB' if wb else 'WA'}"
                    try:
                        out32.fill_(float("nan"))
                        dot_gemv(op0, xq, out32, r, gs, sp, w, st, wb)
                        check = _rel(out32, ref)
                        us = graph_us(lambda i: dot_gemv(ops[i], xq, out32, r, gs, sp, w, st, wb), len(ops), device)
                        row["dot"][name] = {"us": us, "check": check, "GBps": stored / us / 1e3}
                    except Exception as exc:  # noqa: BLE001 - a shape that does not compile (or fit) is a line
                        row["dot"][name] = {"error": str(exc).splitlines()[0][:200]}
                row["read_only_us"] = read_only_us(stored, len(ops), device)
                ok = {s: v for s, v in row["dot"].items() if "us" in v}
                best = min(ok, key=lambda s: ok[s]["us"]) if ok else None
                log(f"{'':16s} {role:8s} read-only {row['read_only_us']:8.2f} us {stored / row['read_only_us'] / 1e3:6.0f} GB/s"
                    + (f" | tensor cores best {best} {ok[best]['us']:8.2f} us {ok[best]['GBps']:6.0f} GB/s (check {ok[best]['check']:.1e}), "
                       f"{ok[best]['us'] / row['read_only_us']:.2f}x read-only, {ok[best]['us'] / row['step_us']:.2f}x the step loop"
                       if best else " | tensor cores: none ran")
                    + "  [" + "  ".join(f"{s} {v['us']:.2f}" if "us" in v else f"{s} error" for s, v in row["dot"].items()) + "]")
            rows.append(row)
            if json_path:
                with open(json_path, "w") as f:
                    json.dump(rows, f, indent=1)
            del ops
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def sass_counts(arch: int = 90, n: int = 37888, k: int = 3584, dot: bool = False) -> dict:
    """Per shape, the packed loop (with `dot`: the tensor cores' kernel) compiled for sm_`arch` without a
    GPU (fused_kernels.ahead's compile, SASS count and issue bound), at Qwen-2.5-7B's gate_up shape by
    default: SASS instructions per weight by class, registers, spills and the bandwidth the H200 could
    issue them at."""
    from decodegap.measure.fused_kernels import ahead

    words, sz = torch.empty(n, k // 8, dtype=torch.int32), torch.empty(n, k // GROUP, dtype=torch.bfloat16)
    if dot:
        builds = {f"{r}r{gs}g/{sp}s/{w}w/{st}st/{'WB' if wb else 'WA'}": (_dot_gemv_kernel, (words, sz, sz, torch.empty(k, dtype=torch.float16),
                                                                      torch.empty(n, dtype=torch.float32)),
                                                   {"N": n, "K": k, "BN": r, "GS": gs, "SPLIT": sp, "STAGES": st, "WB": wb, "num_warps": w},
                                                   {"weights_per_thread": r * (k // sp) / (w * 32), "trips": -(-k // (GROUP * sp * gs))})
                  for r, gs, sp, w, st, wb in DOT_SHAPES}
    else:
        builds = {f"{r}x{bk}/{w}w": (_packed_gemv_kernel, (words, sz, sz, torch.empty(k // GROUP, 4, 16, dtype=torch.int32),
                                                           torch.empty(n, dtype=torch.bfloat16)),
                                     {"N": n, "K": k, "R": r, "BK": bk, "XP": XP_PTX, "num_warps": w},
                                     {"weights_per_thread": r * k / (w * 32), "trips": -(-k // bk)})
                  for r, bk, w in SHAPES}
    out = {}
    for name, (fn, args, kwargs, program) in builds.items():
        kernel, _ = ahead._compile(fn, args, dict(kwargs), arch)
        row = {"weight_dtype": "int32", **ahead._inspect(kernel.asm["cubin"]), "program": program}
        iss = ahead.issue_bound(row)
        out[name] = {"registers": row["registers"], "spill_bytes": row["spill_bytes"],
                     "per_weight": iss["per_weight"], "issue_TBps": iss["issue_TBps"],
                     "by_op": {op: round(v, 3) for op, v in list(iss["by_op"].items())[:8]}}
    return out


def read_only_us(nbytes: int, copies: int, device) -> float:
    """floor_limit.py's read-only kernel over `nbytes` (its best shape; the file beside this one, loaded
    by its path: benchmarks are scripts, not a package)."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("floor_limit", os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_limit.py"))
    floor_limit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor_limit)
    return floor_limit.read_only_us(nbytes, copies, device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "llama-3.1-8b"])
    ap.add_argument("--json", help="write the rows here as well")
    ap.add_argument("--smoke", action="store_true", help="the CPU under Triton's interpreter, the tiny cards: a test of the layout")
    ap.add_argument("--sass", action="store_true", help="no GPU: the packed loop's SASS instructions a weight for sm_90")
    ap.add_argument("--dot", action="store_true", help="also the tensor cores' kernel (DOT_SHAPES) beside the read-only "
                    "kernel; with --sass, its instructions instead of the packed loop's")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.sass:
        for name, got in sass_counts(dot=a.dot).items():
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
        rows = run(models, device, smoke=a.smoke, json_path=a.json, dot=a.dot)
    print(f"{len(rows)} GEMVs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
