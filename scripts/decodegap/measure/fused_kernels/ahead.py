"""Compile the fused kernels for a GPU without one: every kernel the step launches, at the cards' real
shapes, in each weight format and with each lever, through Triton's compiler and ptxas for a target
(default sm_90, the H200), with each cubin's registers, spills (local memory), barriers and load
widths (cuobjdump, shipped with Triton). A kernel that does not compile, or spills, is a failure:
exit status 1.

    python -m decodegap.measure.fused_kernels.ahead [--arch 90] [--quick] [--json out.json]

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
         "int64": "*i64"}
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
            "loads": {o: c for o, c in sorted(ops.items()) if o.startswith(("LDG", "LDGSTS"))}}


def cases(quick: bool) -> dict:
    """label -> a call of the launch wrappers (on CPU tensors), as the step makes them."""
    import torch

    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.fused_kernels.tune import AttentionBench, RoleBench

    table = fk.LAUNCH_SHAPES["h200"]
    out = {}
    for key, arch in list(CARDS.items())[:1 if quick else None]:
        for fmt in fk.FORMATS:
            for role in fk.ROLES:
                if role == "lm_head" and fmt != "dense":
                    continue
                shape = table.gemv_for(fmt, role)
                variants = {"": shape}
                if not quick and role in ("o", "down"):
                    variants["x_tile flipped "] = dataclasses.replace(shape, x_tile=not shape.x_tile)
                for tag, sh in variants.items():
                    for pdl in (False, True) if not quick or fmt == "dense" else (False,):
                        out[f"{key} {fmt} {role} {tag}{'pdl' if pdl else ''}".strip()] = (
                            lambda role=role, fmt=fmt, arch=arch, sh=sh, pdl=pdl:
                            RoleBench(role, fmt, arch, "cpu", torch.bfloat16, copies=1, qkv_bias=True).launch(sh, 0, pdl=pdl))
        heads = fk.HeadLayout(arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"])
        attention = {"table": table.attention, "masked": dataclasses.replace(table.attention, skip_empty=False),
                     "skipping": dataclasses.replace(table.attention, skip_empty=True),
                     "masked in-split": dataclasses.replace(table.attention, skip_empty=False, combine="in_split"),
                     "default": fk.LAUNCH_SHAPES["default"].attention, "bt128 w8": fk.AttentionConfig(128, 4, 8, 2, False)}
        for ctx in (2048, 16384):
            for name, cfg in list(attention.items())[:4 if quick else None]:
                for pdl in (False, True) if name == "table" else (False,):
                    out[f"{key} attention ctx {ctx} {name}{' pdl' if pdl else ''}"] = (
                        lambda heads=heads, ctx=ctx, cfg=cfg, pdl=pdl:
                        (lambda b: b.launch(b.plan(cfg), 0, pdl=pdl))(AttentionBench(heads, ctx, 1, "cpu", torch.bfloat16)))

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


def compile_all(arch: int = 90, quick: bool = False, log=print) -> list:
    """Every case's kernels compiled for sm_<arch>: a row per kernel launch with what cuobjdump says."""
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
                except Exception as exc:  # noqa: BLE001 - a kernel that does not compile is the finding
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
                rows.append(row)
                log(f"{label:48s} {row['kernel']:26s} " + (f"COMPILE FAILED: {row['error'][:300]}" if "error" in row else
                    f"regs {row['registers']:3d} spills {row['spill_bytes']:4d} B  barriers {row['barriers']:3d}  {row['loads']}"))
    finally:
        undo()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability as major*10+minor (90: Hopper, the H200)")
    ap.add_argument("--quick", action="store_true", help="one card, the table's shapes, fewer levers")
    ap.add_argument("--json", help="write every row here")
    a = ap.parse_args(argv)
    rows = compile_all(a.arch, a.quick)
    bad = [r for r in rows if "error" in r or r.get("spill_bytes")]
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows)} kernels compiled for sm_{a.arch}; {len(bad)} failed or spill" + (f": {[r['case'] for r in bad]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
