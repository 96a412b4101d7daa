"""The fused step's kernels on the GPU: each checked in bf16 against float32, then timed per launch
shape against cuBLAS (F.linear, what the transformers step calls) and the device copy bandwidth.

    python benchmarks/fused_kernels.py [--models qwen2.5-7b llama-3.1-8b] [--ctx 2048 16384]
                                       [--json best.json] [--top 3]

Per card and GEMV role (qkv, o, gate_up, down, lm_head) at the card's shapes: the role's kernel
(decodegap.measure.fused_kernels) is checked once (relative L2 against float32 torch, NaN-poisoned
outputs), then every candidate launch shape is timed as a CUDA graph of launches cycling over enough
copies of the weight that none is read from L2 (graph replay, the way the step runs them); the first
card times every candidate, later cards the first card's --top best per role. GB/s counts the
bytes a launch must read (its weight, bias, norm weight, input vector). Attention: the split kernel
plus combine at each --ctx against SDPA's decode call on the same cache, checked the same way.
--json writes each role's fastest shape over all cards (the least summed time), the form
benchmarks/floor_chase.py --gemv-configs and GEMV_CONFIGS take. Needs CUDA.
"""

import argparse
import json
import statistics
import sys

from decodegap.core.config import load_models

CANDIDATES = [(2, 512, 4), (4, 512, 4), (8, 512, 4), (4, 512, 8), (8, 512, 8), (16, 512, 8), (1, 1024, 4),
              (2, 1024, 4), (4, 1024, 4), (8, 1024, 8), (4, 256, 2), (8, 256, 4)]  # (rows, block_k, warps)
L2_FLUSH_BYTES = 512 * 2**20  # copies of a weight cycled per graph: several times the H200's 60 MB L2


def graph_us(launch, n_copies: int, reps: int = 3) -> float:
    """Median microseconds per launch: `launch(i)` for copies i = 0..n_copies-1, captured as one
    graph (several rounds over the copies), replayed `reps` times."""
    import torch

    rounds = max(1, 64 // n_copies)
    for i in range(n_copies):  # compiles and warms outside the capture
        launch(i)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for i in range(n_copies):
                launch(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (rounds * n_copies))
    return statistics.median(times)


def roles(arch: dict) -> dict:
    """Role -> (rows of the joined weight, K): the fused step's GEMVs at a card's shapes."""
    h, i, hq, hkv = arch["hidden_size"], arch["intermediate_size"], arch["num_attention_heads"], arch["num_key_value_heads"]
    d = arch.get("head_dim") or h // hq
    return {"qkv": ((hq + 2 * hkv) * d, h), "o": (h, hq * d), "gate_up": (2 * i, h), "down": (h, i), "lm_head": (arch["vocab_size"], h)}


def rel(got, ref) -> float:
    import torch

    if torch.isnan(got).any():
        return float("nan")
    return float((got.float() - ref).norm() / ref.norm())


def bench_card(key: str, arch: dict, candidates: dict, device, out: dict) -> None:
    import torch
    import torch.nn.functional as F

    from decodegap.measure import fused_kernels as fk

    hq, hkv = arch["num_attention_heads"], arch["num_key_value_heads"]
    d = arch.get("head_dim") or arch["hidden_size"] // hq
    eps, bf = 1e-5, torch.bfloat16
    for role, (n, k) in roles(arch).items():
        copies = max(1, -(-L2_FLUSH_BYTES // (n * k * 2)))
        ws = [torch.randn(n, k, device=device, dtype=bf) / k**0.5 for _ in range(copies)]
        x = torch.randn(k, device=device, dtype=bf)
        g = (1 + torch.randn(k, device=device) / 8).to(bf)
        bias = torch.randn(n, device=device, dtype=bf) if role == "qkv" else None
        read = n * k * 2 + (n * 2 if bias is not None else 0) + (k * 2 if role in ("qkv", "gate_up", "lm_head") else 0) + k * 2
        cos = torch.randn(64, d // 2, device=device).to(bf)
        sin = torch.randn(64, d // 2, device=device).to(bf)
        pos = torch.tensor([5], device=device)
        q = torch.empty(hq * d, device=device, dtype=bf)
        kc, vc = torch.empty(hkv, 64, d, device=device, dtype=bf), torch.empty(hkv, 64, d, device=device, dtype=bf)
        y = torch.empty(n // 2 if role == "gate_up" else n, device=device, dtype=bf)
        res = torch.randn(n, device=device, dtype=bf)

        def launch(cfg, i):
            if role == "qkv":
                fk.qkv_rope(x, ws[i], bias, g, eps, cos, sin, pos, q, kc, vc, hq, hkv, d, cfg)
            elif role == "gate_up":
                fk.gate_up(x, ws[i], g, eps, y, n // 2, cfg)
            elif role == "lm_head":
                fk.linear(x, ws[i], y, cfg, g=g, eps=eps)
            else:
                fk.linear(x, ws[i], y, cfg, residual=res)

        # the check, at the default shape: float32 torch on the same inputs
        cfg0 = fk.GEMV_CONFIGS[role]
        xn = (g.float() * (x.float() * torch.rsqrt(x.float().pow(2).mean() + eps)).to(bf).float()).to(bf).float()
        for t in (q, kc, vc, y):
            t.fill_(float("nan"))
        launch(cfg0, 0)
        if role == "qkv":
            ref = (ws[0].float() @ xn + bias.float()).to(bf).float()
            half = d // 2
            qr = ref[: hq * d].view(hq, d)
            c, s = cos[5].float().repeat(2), sin[5].float().repeat(2)
            err = rel(q, (qr * c + torch.cat((-qr[:, half:], qr[:, :half]), -1) * s).reshape(-1))
            kr = ref[hq * d:(hq + hkv) * d].view(hkv, d)
            err = max(err, rel(kc[:, 5], (kr * c + torch.cat((-kr[:, half:], kr[:, :half]), -1) * s)))
            err = max(err, rel(vc[:, 5], ref[(hq + hkv) * d:].view(hkv, d)))
        elif role == "gate_up":
            ref = ws[0].float() @ xn
            err = rel(y, F.silu(ref[: n // 2]) * ref[n // 2:])
        elif role == "lm_head":
            err = rel(y, ws[0].float() @ xn)
        else:
            err = rel(y, res.float() + ws[0].float() @ x.float())
        cublas = graph_us(lambda i: F.linear(x.view(1, k), ws[i]), copies)
        rows = []
        for rows_, bk, warps in candidates[role]:
            cfg = fk.GemvConfig(rows_, bk, warps)
            try:
                us = graph_us(lambda i: launch(cfg, i), copies)
            except Exception as exc:  # noqa: BLE001 - a shape the compiler refuses is a line, not the end
                print(f"  {role} {cfg}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                continue
            rows.append((us, (rows_, bk, warps)))
            out.setdefault(role, {}).setdefault((rows_, bk, warps), {})[key] = us
        rows.sort()
        best_us, best = rows[0]
        print(f"{key:16s} {role:8s} {n:>6d} x {k:<6d} check {err:.1e}  cuBLAS {cublas:8.2f} us {read / cublas / 1e3:6.0f} GB/s  "
              f"best {best} {best_us:8.2f} us {read / best_us / 1e3:6.0f} GB/s  ({best_us / cublas:.2f}x cuBLAS; "
              f"worst {rows[-1][0]:.1f} us)", flush=True)
        out.setdefault("_checks", {})[f"{key}/{role}"] = err
        del ws


def bench_attention(key: str, arch: dict, ctxs, device) -> None:
    import torch
    import torch.nn.functional as F

    from decodegap.measure import fused_kernels as fk

    hq, hkv = arch["num_attention_heads"], arch["num_key_value_heads"]
    d = arch.get("head_dim") or arch["hidden_size"] // hq
    layers = arch["num_hidden_layers"]
    bf = torch.bfloat16
    for ctx in ctxs:
        length = ctx + 256
        plan = fk.AttentionPlan.for_cache(length, hkv)
        caches = [(torch.randn(hkv, length, d, device=device, dtype=bf), torch.randn(hkv, length, d, device=device, dtype=bf))
                  for _ in range(layers)]
        q = torch.randn(hq * d, device=device, dtype=bf)
        pos = torch.tensor([ctx], device=device)
        scratch = fk.attention_scratch(plan, hq, hkv, d, device)
        o = torch.full((hq * d,), float("nan"), device=device, dtype=bf)
        fk.attention(q, *caches[0], pos, plan, scratch, o, hq, hkv, d, d**-0.5)
        kk, vv = caches[0][0][:, : ctx + 1].float(), caches[0][1][:, : ctx + 1].float()
        ref = ((q.float().view(hkv, hq // hkv, d) @ kk.transpose(1, 2) * d**-0.5).softmax(-1) @ vv).reshape(-1)
        err = rel(o, ref)
        ours = graph_us(lambda i: fk.attention(q, *caches[i], pos, plan, scratch, o, hq, hkv, d, d**-0.5), layers)
        qs = q.view(1, hq, 1, d)
        sdpa = graph_us(lambda i: F.scaled_dot_product_attention(qs, caches[i][0][None, :, : ctx + 1], caches[i][1][None, :, : ctx + 1],
                                                                  enable_gqa=True), layers)
        kv = 2 * hkv * (ctx + 1) * d * 2
        print(f"{key:16s} attention ctx {ctx:>5d}: check {err:.1e}  ours {ours:7.2f} us ({kv / ours / 1e3:5.0f} GB/s, "
              f"{plan.n_splits} splits of {plan.split})  SDPA {sdpa:7.2f} us ({kv / sdpa / 1e3:5.0f} GB/s)", flush=True)
        del caches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "llama-3.1-8b"])
    ap.add_argument("--ctx", nargs="+", type=int, default=[2048, 16384])
    ap.add_argument("--top", type=int, default=3, help="launch shapes per role the later cards time (the first card's fastest)")
    ap.add_argument("--json", help="write each role's fastest launch shape here")
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("fused_kernels: needs a CUDA GPU (it times on the device); nothing measured", file=sys.stderr)
        return 2
    from decodegap.measure.bandwidth import copy_bandwidth_Bps

    print(f"on {torch.cuda.get_device_name()} (torch {torch.__version__}); device copy "
          f"{copy_bandwidth_Bps('cuda') / 1e9:.0f} GB/s", flush=True)
    cards = load_models()
    out: dict = {}
    with torch.inference_mode():
        for n, key in enumerate(a.models):
            arch = cards[key].architecture
            if n == 0:
                cands = {role: CANDIDATES for role in roles(arch)}
            else:  # the first card's fastest few per role
                first = a.models[0]
                cands = {role: sorted((c for c in out[role] if first in out[role][c]), key=lambda c: out[role][c][first])[: a.top]
                         for role in roles(arch)}
            bench_card(key, arch, cands, "cuda", out)
            bench_attention(key, arch, a.ctx, "cuda")
            torch.cuda.empty_cache()
    best = {}
    for role in roles(cards[a.models[0]].architecture):
        timed_everywhere = {c: sum(t.values()) for c, t in out[role].items() if len(t) == len(a.models)}
        rows_, bk, warps = min(timed_everywhere, key=timed_everywhere.get)
        best[role] = {"rows": rows_, "block_k": bk, "warps": warps}
    print("fastest over all cards:", json.dumps(best))
    bad = {k: v for k, v in out["_checks"].items() if not v < 3e-2}
    if bad:
        print(f"CHECK FAILED (relative L2 >= 3e-2 or unwritten): {bad}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(best, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
