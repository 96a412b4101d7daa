"""The fused step's kernels on the GPU: each checked in bf16 against float32, then timed per launch
shape against cuBLAS (F.linear, what the transformers step calls) and the device copy bandwidth.

    python benchmarks/fused_kernels.py [--models qwen2.5-7b llama-3.1-8b] [--ctx 2048 16384]
                                       [--format dense] [--json best.json] [--top 3]

Per card and GEMV role (qkv, o, gate_up, down, lm_head) at the card's shapes, weights stored as
--format (dense bf16, fp8, int4): the role's kernel (decodegap.measure.fused_kernels) is checked once
(relative L2 against float32 torch, NaN-poisoned outputs), then every candidate launch shape is
timed as a CUDA graph of launches cycling over enough copies of the weight that none is read from L2
(graph replay, the way the step runs them); the first card times every candidate, later cards the
first card's --top best per role. GB/s counts the bytes a launch must read (its weight as stored,
bias, norm weight, input vector). Attention: the split kernel plus combine, at the GPU's table entry,
at each --ctx against SDPA's decode call on the same cache, checked the same way. --json writes each
role's fastest shape over all cards (the least summed time), the form benchmarks/floor_chase.py
--gemv-configs and FusedModel(gemv_configs=...) take. benchmarks/floor_limit.py measures more (the
whole step, the levers, tune_launch_shapes). Needs CUDA.
"""

import argparse
import json
import sys

from decodegap.core.config import load_models


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "llama-3.1-8b"])
    ap.add_argument("--ctx", nargs="+", type=int, default=[2048, 16384])
    ap.add_argument("--format", default="dense", choices=["dense", "fp8", "int4"], help="the weights' storage")
    ap.add_argument("--top", type=int, default=3, help="launch shapes per role the later cards time (the first card's fastest)")
    ap.add_argument("--json", help="write each role's fastest launch shape here")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("fused_kernels: needs a CUDA GPU (it times on the device); nothing measured", file=sys.stderr)
        return 2
    from decodegap.measure import fused_kernels as fk
    from decodegap.measure.bandwidth import copy_bandwidth_Bps
    from decodegap.measure.fused_kernels.tune import GEMV_CANDIDATES, AttentionBench, RoleBench, graph_us

    device = torch.device("cuda")
    print(f"on {torch.cuda.get_device_name()} (torch {torch.__version__}); device copy "
          f"{copy_bandwidth_Bps('cuda') / 1e9:.0f} GB/s", flush=True)
    cards, table = load_models(), fk.resolve(None, device)
    timed: dict = {}  # role -> shape -> card -> us
    checks: dict = {}
    with torch.inference_mode():
        for n, key in enumerate(a.models):
            card = cards[key]
            for role in fk.ROLES:
                if role == "lm_head" and a.format != "dense":
                    continue
                if n == 0:
                    cands = [fk.GemvConfig(*c) for c in GEMV_CANDIDATES[a.format]]
                else:  # the first card's fastest few
                    first = timed.get(role, {})
                    cands = sorted((c for c in first if a.models[0] in first[c]), key=lambda c: first[c][a.models[0]])[: a.top]
                bench = RoleBench(role, a.format, card.architecture, device, qkv_bias=card.model_type == "qwen2")
                checks[f"{key}/{role}"] = err = bench.error(table.gemv_for(a.format, role))
                cublas = graph_us(lambda i: F.linear(bench.x.view(1, -1), bench.ops[i].weight), len(bench.ops), device) \
                    if a.format == "dense" else None
                rows = []
                for shape in cands:
                    try:
                        us = graph_us(lambda i: bench.launch(shape, i), len(bench.ops), device)
                    except Exception as exc:  # noqa: BLE001 - a shape the compiler refuses is a line, not the end
                        print(f"  {role} {shape}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                        continue
                    rows.append((us, shape))
                    timed.setdefault(role, {}).setdefault(shape, {})[key] = us
                rows.sort(key=lambda r: r[0])
                best_us, best = rows[0]
                vs = f"  cuBLAS {cublas:8.2f} us ({best_us / cublas:.2f}x cuBLAS)" if cublas else ""
                print(f"{key:16s} {role:8s} {bench.n:>6d} x {bench.k:<6d} check {err:.1e}  best {best.as_dict()} {best_us:8.2f} us "
                      f"{bench.bytes / best_us / 1e3:6.0f} GB/s{vs}; worst {rows[-1][0]:.1f} us", flush=True)
                del bench
            hq, hkv = card.architecture["num_attention_heads"], card.architecture["num_key_value_heads"]
            heads = fk.HeadLayout(hq, hkv, card.architecture.get("head_dim") or card.architecture["hidden_size"] // hq)
            layers = card.architecture["num_hidden_layers"]
            for ctx in a.ctx:
                att = AttentionBench(heads, ctx, layers, device)
                plan = att.plan(table.attention)
                err = att.error(plan)
                ours = graph_us(lambda i: att.launch(plan, i), layers, device)
                sdpa = graph_us(att.sdpa, layers, device)
                print(f"{key:16s} attention ctx {ctx:>5d}: check {err:.1e}  ours {ours:7.2f} us ({att.bytes / ours / 1e3:5.0f} GB/s, "
                      f"{plan.n_splits} splits of {plan.split})  SDPA {sdpa:7.2f} us ({att.bytes / sdpa / 1e3:5.0f} GB/s)", flush=True)
                checks[f"{key}/attention ctx {ctx}"] = err
                del att
            torch.cuda.empty_cache()
    best = {}
    for role, shapes in timed.items():
        everywhere = {c: sum(t.values()) for c, t in shapes.items() if len(t) == len(a.models)}
        best[role] = min(everywhere, key=everywhere.get).as_dict()
    print("fastest over all cards:", json.dumps(best))
    bad = {k: v for k, v in checks.items() if not v < 3e-2}
    if bad:
        print(f"CHECK FAILED (relative L2 >= 3e-2 or unwritten): {bad}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(best if a.format == "dense" else {"gemv": {a.format: best}}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
