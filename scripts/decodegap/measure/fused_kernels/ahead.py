"""Compile the fused kernels for a GPU without one: every kernel the step launches, at the cards' real
shapes, in each weight format and with each lever, through Triton's compiler and ptxas for a target
(default sm_90, the H200), with each cubin's registers, spills (local memory), barriers and load
widths (cuobjdump, shipped with Triton). A kernel that does not compile, or spills, is a failure:
exit status 1.

    python -m decodegap.measure.fused_kernels.ahead [--arch 90] [--quick] [--json out.json] [--loops]

--loops adds what bounds a GEMV by its instructions rather than its bytes: the SASS instructions a
program executes (its straight-line code once and the body of its loop over K, where ptxas kept
one, once per trip) per weight a thread multiplies (R rows x K columns over warps x 32 threads), by
instruction class, and the bandwidth at which the GPU could just issue them: a multiprocessor
issues at most one warp instruction per scheduler per clock (4 schedulers on sm_90), so i
instructions per weight cannot stream more than bytes-per-weight x SMs x 4 x 32 x clock / i bytes a
second, whatever the memory does (H200: 132 SMs at up to 1.98 GHz, 33.4 T lane-instructions a
second; ISSUE below). It is an optimistic bound: a stall, a barrier or the integer pipes' half
rate only lower it.

How: the launch wrappers run on small CPU tensors with Triton's launcher replaced by a recorder, so
what compiles is what a launch on the GPU specialises: the same constexprs, pointer dtypes, 16-byte
alignment (which decides the load widths) and launch options (warps, stages, PDL). Triton's
interpreter must be off (TRITON_INTERPRET unset). tests/test_fused_kernels_compile.py runs it.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TYPES = {"bfloat16": "*bf16", "float32": "*fp32", "float16": "*fp16", "float8_e4m3fn": "*fp8e4nv", "int32": "*i32",
         "int64": "*i64", "uint8": "*u8"}
# the H200's instruction issue: multiprocessors, warp schedulers each (one warp instruction a clock),
# threads a warp, and the SM clock's maximum (nvidia-smi's clocks.max.sm on the lent H200s: 1980 MHz)
ISSUE = {"sms": 132, "schedulers": 4, "lanes": 32, "clock_hz": 1.98e9}
PDL_PREFETCH = 4  # loop steps the "pdl prefetch" cases prefetch (LaunchShapes.pdl_prefetch)
BYTES_PER_WEIGHT = {"bfloat16": 2.0, "float8_e4m3fn": 1.0 + 4 / 4096, "int32": 0.5 + 2 * 2 / 128}  # as stored, scales included
CARDS = {  # the head layouts and widths of the configured cards (config/models.yaml), a small vocabulary
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4, head_dim=128,
                       vocab_size=32768),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                         vocab_size=32768),
}


def _record_launches():
    """Triton's launcher replaced by a recorder of (kernel, args, kwargs); returns the list and an undo."""
    from triton.runtime.jit import JITFunction

    launches, real = [], JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    JITFunction.run = record
    return launches, lambda: setattr(JITFunction, "run", real)


def _compile(fn, args, kwargs, arch: int):
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "launch_pdl") if k in kwargs}
    bound = {**dict(zip(fn.arg_names, args)), **kwargs}
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(zip(fn.arg_names, fn.params)):
        value = bound[name]
        if param.is_constexpr:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):  # allocations are 16-byte aligned: the JIT marks them so
            signature[name], attrs[(i,)] = TYPES[str(value.dtype).removeprefix("torch.")], [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32" if isinstance(value, float) else "i32"
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options), options


def _inspect(cubin: bytes) -> dict:
    import triton

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tools / "cuobjdump"), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    ops = collections.Counter(m.group(1) for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass, re.M))
    return {"registers": int(re.search(r"REG:(\d+)", usage).group(1)), "spill_bytes": int(re.search(r"LOCAL:(\d+)", usage).group(1)),
            "instructions": sum(ops.values()), "barriers": sum(c for o, c in ops.items() if o.startswith("BAR.SYNC")),
            "loads": {o: c for o, c in sorted(ops.items()) if o.startswith(("LDG", "LDGSTS"))}, "loop": _loop(sass),
            "pdl": _pdl_order(sass)}


def _pdl_order(sass: str) -> dict:
    """Where PDL's wait (griddepcontrol.wait: ACQBULK) falls in the SASS, and the L2 prefetches
    (prefetch.global.L2: CCTL) a thread issues before it: what the lever pdl_prefetch is for, the
    weight streaming while the kernel before drains."""
    ops = [m.group(1) for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", sass, re.M)]
    wait = ops.index("ACQBULK") if "ACQBULK" in ops else None
    return {"waits": ops.count("ACQBULK"), "prefetches": ops.count("CCTL"),
            "prefetches_before_wait": ops[:wait].count("CCTL") if wait is not None else 0}


def _loop(sass: str) -> dict:
    """A kernel's SASS counted by instruction (opcode without modifiers): all of it (`ops`, without
    the padding after its end) and the body of its longest backward branch (`loop_ops`, the loop over
    K; empty where ptxas unrolled it)."""
    ins = [(int(m.group(1), 16), m.group(2), line) for line in sass.splitlines()
           if (m := re.match(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line))]
    best = None
    for addr, op, line in ins:
        m = re.search(r"\bBRA\s+(?:`\()?(0x[0-9a-f]+)", line) if op == "BRA" else None
        if m and int(m.group(1), 16) < addr and (best is None or addr - int(m.group(1), 16) > best[1] - best[0]):
            best = (int(m.group(1), 16), addr)
    body = [op for addr, op, _ in ins if best and best[0] <= addr <= best[1] and best[0] != best[1]]  # BRA to itself: the end
    code = [op for addr, op, line in ins if op != "NOP" and not (op == "BRA" and f"BRA 0x{addr:x}" in line)]
    return {"ops": dict(collections.Counter(code).most_common()), "loop_ops": dict(collections.Counter(body).most_common())}


def gemv_program(kernel: str, constexprs: dict, warps: int) -> dict | None:
    """What one program of a GEMV kernel does, from the launch's constexprs: weights a thread
    multiplies (R rows x K over the program's threads) and trips of the loop over K; None for a
    kernel without a weight loop (FROM_Y)."""
    if constexprs.get("FROM_Y"):
        return None
    rows = {"_linear_kernel": constexprs.get("BN"), "_gate_up_kernel": 2 * constexprs.get("BN", 0),
            "_qkv_rope_kernel": 2 * constexprs.get("BP", 0)}.get(kernel)
    if not rows:
        return None
    return {"weights_per_thread": rows * constexprs["K"] / (warps * 32), "trips": -(-constexprs["K"] // constexprs["BK"])}


def issue_bound(row: dict, issue: dict = ISSUE) -> dict | None:
    """A compiled GEMV row's instructions per weight (a program's: straight-line code once, the loop
    body once per trip), by class, and the bandwidth the GPU could issue them at (module docstring)."""
    code, program = row.get("loop"), row.get("program")
    if not code or not program:
        return None
    body = code["loop_ops"]
    executed = collections.Counter(code["ops"])
    for op, n in body.items():  # the listing holds the body once; the program runs it once a trip
        executed[op] += n * (program["trips"] - 1)
    per_weight = sum(executed.values()) / program["weights_per_thread"]
    rate = issue["sms"] * issue["schedulers"] * issue["lanes"] * issue["clock_hz"]  # lane-instructions a second
    return {"per_weight": per_weight, "looped": bool(body),
            "by_op": {op: n / program["weights_per_thread"] for op, n in executed.most_common()},
            "issue_TBps": BYTES_PER_WEIGHT[row["weight_dtype"]] * rate / per_weight / 1e12}


def step_issue_bounds(rows: list) -> list:
    """Per card and format, the least time the whole step's GEMVs could take at the issue bound: each
    role's instructions a weight (the table's kernel, `rows`) times the card's real weights in that
    role over all layers (config/models.yaml), over the issue rate, with the output projection in
    bf16 as the paths keep it, and int4's and fp8's qkv, gate_up and down (fp8's o too, under o_pairs)
    reading f16 pairs with the table's f16_words where the table has the lever x_pairs; beside the bytes
    the GEMVs stream, and the bandwidth that bound allows."""
    from decodegap.core.config import load_models
    from decodegap.measure.fused_kernels.launch import FORMATS, LAUNCH_SHAPES
    from decodegap.measure.fused_kernels.tune import role_shapes

    rate = ISSUE["sms"] * ISSUE["schedulers"] * ISSUE["lanes"] * ISSUE["clock_hz"]
    by_case = {r["case"]: r for r in rows if r.get("issue")}
    cards, out = load_models(), []
    for key in CARDS:
        arch = cards[key].architecture
        for fmt in FORMATS:
            seconds = stored = 0.0
            table, hidden = LAUNCH_SHAPES["h200"], arch["hidden_size"]
            for role, (n, k) in role_shapes(arch).items():
                tag = ""
                if table.reads_pairs(fmt, role, hidden):
                    words = table.gemv_for(f"{fmt}_pairs", role, hidden).f16_words  # the table's pair read, as compiled
                    tag = " x pairs" + (f" f16 words {words}" if words > 1 else "")
                row = by_case.get(f"{key} {'dense' if role == 'lm_head' else fmt} {role}{tag}")
                if row is None:
                    break
                weights = n * k * (1 if role == "lm_head" else arch["num_hidden_layers"])
                seconds += weights * row["issue"]["per_weight"] / rate
                stored += weights * BYTES_PER_WEIGHT[row["weight_dtype"]]
            else:
                out.append({"card": key, "format": fmt, "issue_ms": seconds * 1e3, "stored_GB": stored / 1e9,
                            "issue_TBps": stored / seconds / 1e12})
    return out


def cases(quick: bool) -> dict:
    """label -> a call of the launch wrappers (on CPU tensors), as the step makes them."""
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import NORM_INPUT_OF, AttentionBench, RoleBench, step_writes_input

    table = fk.LAUNCH_SHAPES["h200"]
    out = {}
    for key, arch in list(CARDS.items())[:1 if quick else None]:
        for fmt in fk.FORMATS:
            for role in fk.ROLES:
                if role == "lm_head" and fmt != "dense":
                    continue
                shape = table.gemv_for(fmt, role, arch["hidden_size"])
                own_norm = NORM_INPUT_OF[table.norm_for(fmt)]  # what the table's norm leaves this role's kernel
                # the input as the step has it: float32 where the table has the lever x_fp32 for this format and width
                table_x32 = step_writes_input(role, own_norm) and table.x_fp32_for(fmt, arch["hidden_size"])
                variants = {"": (shape, own_norm, table_x32)}  # tag -> (shape, the norm's input, x_fp32)
                if not quick and role in ("o", "down"):
                    variants["x_tile flipped "] = (dataclasses.replace(shape, x_tile=not shape.x_tile), own_norm, table_x32)
                if step_writes_input(role, own_norm) and not table_x32:
                    variants["x fp32 "] = (shape, own_norm, True)
                # the lever x_pairs at its own shapes (o too where the table has o_pairs)
                if fmt in ("int4", "fp8") and (role in ("qkv", "gate_up", "down") or (role == "o" and table.o_pairs_for(fmt, arch["hidden_size"]))):
                    # the pairs read one word at a time into float32 (f16_words 1), whatever the table chose, so
                    # that the f16_words variants below compare against the same loop at every table
                    pairs_shape = table.gemv_for(f"{fmt}_pairs", role, arch["hidden_size"])
                    variants["x pairs "] = (dataclasses.replace(pairs_shape, f16_words=1), "none", "pairs")
                for tag, (sh, norm, x32) in list(variants.items())[:1] + [v for v in variants.items() if v[0] == "x pairs "]:
                    # the lever load_ahead flipped: the table's read, and int4's pairs
                    variants[f"{tag}load ahead {'off' if sh.load_ahead else 'on'} "] = (
                        dataclasses.replace(sh, load_ahead=not sh.load_ahead), norm, x32)
                if "x pairs " in variants:  # words' halves summed in f16 before float32 (f16_words): int4 4, fp8 2 and 4
                    sh, norm, x32 = variants["x pairs "]
                    table_words = table.gemv_for(f"{fmt}_pairs", role, arch["hidden_size"]).f16_words  # the step's bound reads it
                    for words in sorted({4, table_words} - {1} if fmt == "int4" else {2, 4, table_words} - {1}):
                        variants[f"x pairs f16 words {words} "] = (dataclasses.replace(sh, f16_words=words), norm, x32)
                if role in ("gate_up", "down"):  # the loop pipelined through shared memory (loop_stages: cp.async)
                    for tag, (sh, norm, x32) in list(variants.items())[:1] + [v for v in variants.items() if v[0] == "x pairs "]:
                        variants[f"{tag}loop stages 3 "] = (dataclasses.replace(sh, loop_stages=3, load_ahead=False), norm, x32)
                if role in ("qkv", "gate_up", "lm_head"):  # the other norms: all of them, or (quick) per program or none
                    for norm, given in NORM_INPUT_OF.items():
                        if given != own_norm and (not quick or norm in ("program", "apart")):
                            variants[f"norm {norm} "] = (shape, given, False)
                for tag, (sh, norm, x32) in variants.items():
                    # PDL alone, and with the weight's first PDL_PREFETCH loop steps prefetched before the wait
                    levers = {"": (False, 0), "pdl": (True, 0), "pdl prefetch": (True, PDL_PREFETCH)}
                    if (quick and fmt != "dense") or tag.startswith(("norm", "x fp32", "x pairs", "load ahead", "loop stages")):
                        levers = {"": (False, 0)}
                    for lever, (pdl, pf) in levers.items():
                        out[f"{key} {fmt} {role} {tag}{lever}".strip()] = (
                            lambda role=role, fmt=fmt, arch=arch, sh=sh, pdl=pdl, norm=norm, pf=pf, x32=x32:
                            RoleBench(role, fmt, arch, "cpu", torch.bfloat16, copies=1, qkv_bias=True).launch(
                                sh, 0, pdl=pdl, norm=norm, prefetch=pf, x_fp32=x32 is True, x_pairs=x32 == "pairs"))
        heads = fk.HeadLayout(arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"])
        attention = {"table": table.attention, "masked": dataclasses.replace(table.attention, skip_empty=False),
                     "skipping": dataclasses.replace(table.attention, skip_empty=True),
                     "masked in-split": dataclasses.replace(table.attention, skip_empty=False, combine="in_split"),
                     "default": fk.LAUNCH_SHAPES["default"].attention, "bt128 w8": fk.AttentionConfig(128, 4, 8, 2, False)}
        for ctx in (2048, 16384):
            for name, cfg in list(attention.items())[:4 if quick else None]:
                levers = {"": (False, 0), " pdl": (True, 0), " pdl prefetch": (True, PDL_PREFETCH)} if name == "table" else {"": (False, 0)}
                for lever, (pdl, pf) in levers.items():
                    out[f"{key} attention ctx {ctx} {name}{lever}"] = (
                        lambda heads=heads, ctx=ctx, cfg=cfg, pdl=pdl, pf=pf:
                        (lambda b: b.launch(b.plan(cfg), 0, pdl=pdl, prefetch=pf))(AttentionBench(heads, ctx, 1, "cpu", torch.bfloat16)))
            # the split programs prefetching the o weight into L2 before PDL's wait (the lever l2_ahead)
            # (o's weight, then the first rows of gate_up's gate and up halves)
            o_weight = torch.empty(heads.n_heads * heads.head_dim, arch["hidden_size"], dtype=torch.bfloat16)
            gate_up = torch.empty(2 * arch["intermediate_size"], arch["hidden_size"], dtype=torch.bfloat16)
            spans = [o_weight, gate_up[:512], gate_up[arch["intermediate_size"]:arch["intermediate_size"] + 512]]
            for at in ("start", "end"):
                out[f"{key} attention ctx {ctx} table pdl l2 ahead {at}"] = (
                    lambda heads=heads, ctx=ctx, spans=spans, at=at: (lambda b: b.launch(b.plan(table.attention), 0, pdl=True, l2_ahead=spans,
                                                                                         l2_at=at))(
                        AttentionBench(heads, ctx, 1, "cpu", torch.bfloat16)))
            # the combine writing fp8's halves for o (the lever o_pairs): its store scaled and rounded to f16
            out[f"{key} attention ctx {ctx} table halves out"] = (
                lambda heads=heads, ctx=ctx: (lambda b: b.launch(b.plan(table.attention), 0, out=torch.empty(
                    heads.n_heads * heads.head_dim // 2, dtype=torch.int32)))(AttentionBench(heads, ctx, 1, "cpu", torch.bfloat16)))

        def epilogues(arch=arch, heads=heads):
            h, i = arch["hidden_size"], arch["intermediate_size"]
            bf = dict(dtype=torch.bfloat16)
            x, g = torch.randn(h, **bf), torch.ones(h, **bf)
            fk.add_norm(x, x.clone(), g, torch.empty(h, **bf), eps=1e-6)
            fk.gate_up(x, None, torch.empty(i, **bf), norm_weight=g, eps=1e-6, shape=table.gemv_for("dense", "gate_up"),
                       y=torch.randn(2 * i, **bf))
            fk.qkv_rope(x, None, heads=heads, position=torch.tensor([5]), cos=torch.randn(64, 64, **bf), sin=torch.randn(64, 64, **bf),
                        q_out=torch.empty(heads.n_heads * 128, **bf), k_cache=torch.empty(heads.n_kv, 64, 128, **bf),
                        v_cache=torch.empty(heads.n_kv, 64, 128, **bf), norm_weight=g, eps=1e-6,
                        shape=table.gemv_for("dense", "qkv"), y=torch.randn(heads.qkv_rows, **bf))

        out[f"{key} a packed path's epilogues"] = epilogues
    return out


def compile_all(arch: int = 90, quick: bool = False, log=print, loops: bool = False) -> list:
    """Every case's kernels compiled for sm_<arch>: a row per kernel launch with what cuobjdump says;
    a GEMV's row also its loop's instructions per weight and the bandwidth they could issue at
    (`issue`), printed with `loops`."""
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("compiling ahead needs Triton's compiler: unset TRITON_INTERPRET")
    launches, undo = _record_launches()
    rows = []
    try:
        for label, call in cases(quick).items():
            launches.clear()
            call()
            for fn, args, kwargs in list(launches):
                row = {"case": label, "kernel": fn.__name__}
                try:
                    kernel, options = _compile(fn, args, dict(kwargs), arch)
                    row.update(options=options, **_inspect(kernel.asm["cubin"]))
                    bound = {**dict(zip(fn.arg_names, args)), **kwargs}
                    if isinstance(bound.get("w_ptr"), torch.Tensor):
                        row["weight_dtype"] = str(bound["w_ptr"].dtype).removeprefix("torch.")
                        row["program"] = gemv_program(fn.__name__, bound, options.get("num_warps", 4))
                        row["issue"] = issue_bound(row)
                except Exception as exc:  # noqa: BLE001 - a kernel that does not compile is the finding
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
                rows.append(row)
                log(f"{label:48s} {row['kernel']:26s} " + (f"COMPILE FAILED: {row['error'][:300]}" if "error" in row else
                    f"regs {row['registers']:3d} spills {row['spill_bytes']:4d} B  barriers {row['barriers']:3d}  {row['loads']}"))
                if loops and row.get("issue"):
                    iss = row["issue"]
                    mix = " ".join(f"{op} {n:.2f}" for op, n in list(iss["by_op"].items())[:7])
                    log(f"{'':48s} {iss['per_weight']:.2f} instructions a weight ({mix}; "
                        f"{'a loop' if iss['looped'] else 'unrolled'}, {row['program']['trips']} trips, "
                        f"{iss['by_op'].get('BAR', 0) * row['program']['weights_per_thread']:.0f} barriers a program): "
                        f"issues at most {iss['issue_TBps']:.2f} TB/s of {row['weight_dtype']} weights")
    finally:
        undo()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability as major*10+minor (90: Hopper, the H200)")
    ap.add_argument("--quick", action="store_true", help="one card, the table's shapes, fewer levers")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--loops", action="store_true", help="print each GEMV loop's instructions a weight and the bandwidth they could issue at")
    a = ap.parse_args(argv)
    rows = compile_all(a.arch, a.quick, loops=a.loops)
    if a.loops:
        for b in step_issue_bounds(rows):
            print(f"{b['card']} {b['format']}: the step's GEMVs ({b['stored_GB']:.2f} GB as stored) issue in no less than "
                  f"{b['issue_ms']:.3f} ms on the H200 at one instruction a scheduler a clock: at most {b['issue_TBps']:.2f} TB/s")
    bad = [r for r in rows if "error" in r or r.get("spill_bytes")]
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} kernels compiled for sm_{a.arch}; {len(bad)} failed or spill" + (f": {[r['case'] for r in bad]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
