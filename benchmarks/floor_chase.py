"""How close to the memory floor batch-1 decode gets: graphed, compiled and fused side by side in one
process, with transformers' own fast path beside them as the peer.

    python benchmarks/floor_chase.py [--model qwen2.5-7b] [--ctx 2048] [--quant bf16 int4-tinygemm]
                                     [--gpu h200] [--steps 64] [--rounds 5] [--modes graphed compiled fused]
                                     [--gemv-configs best.json] [--no-peer]

For each weight path: builds the card once (random bf16 weights, the sessions' cards.build_model),
the fused model from the dense weights, then packs the transformers model with the path. Modes:

  graphed   transformers' step on a StaticCache, one CUDA graph (the paper's best)
  compiled  the same step under torch.compile, captured as one CUDA graph
  fused     decodegap's own compact step (decodegap.measure.fused): its Triton kernels, one CUDA graph
            (--gemv-configs: their launch shapes, from benchmarks/fused_kernels.py --json or floor_limit.py's
            tuned_launch_shapes.json)
  peer      transformers' documented fast path: `generate` with a static cache, which compiles the
            decode step itself (reduce-overhead CUDA graphs); ms/token from two generation lengths,
            (t(n2) - t(n1)) / (n2 - n1), so the prefill cancels

Each mode prefills the same ctx-token prompt; the rounds interleave the modes (a block of --steps
steps each, host-timed with the token read back, as the sessions time a step), and the printed
ms/step is the median over rounds of each block's median. R_floor = t_floor / step, t_floor = (W + K)
/ the datasheet bandwidth (W as stored, scales included); kernels and GPU busy ms per step from a
profiler pass of 3 steps. Compile seconds are printed apart and never timed as steps. Needs CUDA.
"""

import argparse
import json
import statistics
import sys
import time

from decodegap.core.config import load_gpu, load_models


def block_ms(dec, steps: int) -> float:
    """Median host ms of `steps` steps, each launched and its token read back (a streaming step)."""
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        dec.launch()
        dec.read_token()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def peer_ms_per_token(model, prompt, ctx: int, n1: int, n2: int, rounds: int) -> tuple[float, float]:
    """transformers' generate on one reused StaticCache (so every call has the same shapes and the
    compiled step is reused): (ms per token, seconds of the first, compiling, call)."""
    import torch
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=ctx + n2 + 16)

    def gen(n):
        cache.reset()
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(prompt, past_key_values=cache, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       cache_implementation=None, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    t0 = time.perf_counter()
    gen(n1), gen(n2)  # compiles (and re-records graphs) for the shapes of both runs
    compile_s = time.perf_counter() - t0
    per = [(gen(n2) - gen(n1)) / (n2 - n1) * 1e3 for _ in range(rounds)]
    return statistics.median(per), compile_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quant", nargs="+", default=["bf16", "int4-tinygemm"])
    ap.add_argument("--gpu", default="h200", help="key of config/gpus.yaml: its datasheet bandwidth makes the floor")
    ap.add_argument("--steps", type=int, default=64, help="steps per block")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved blocks per mode")
    ap.add_argument("--no-peer", action="store_true", help="leave out transformers' generate")
    ap.add_argument("--modes", nargs="+", default=["graphed", "compiled", "fused"], choices=["graphed", "compiled", "fused"])
    ap.add_argument("--gemv-configs", help="JSON of the fused step's launch shapes: {role: {rows, block_k, warps}} for its bf16 GEMVs, "
                                           "or tune_launch_shapes' dict (default: the GPU's LAUNCH_SHAPES entry)")
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("floor_chase: needs a CUDA GPU (it times on the device); nothing measured", file=sys.stderr)
        return 2
    from decodegap.core.floor import MemoryFloor, kv_bytes
    from decodegap.measure.anatomy import profile_steps
    from decodegap.measure.cards import build_model
    from decodegap.measure.fused import FusedModel
    from decodegap.measure.modes import make_decoder
    from decodegap.measure.weights import get_weight_path

    card, gpu = load_models()[a.model], load_gpu(a.gpu)
    gemv = None
    if a.gemv_configs:  # either form: {role: shape} (fused_kernels.py --json) or tune_launch_shapes' dict (floor_limit.py)
        with open(a.gemv_configs) as f:
            gemv = json.load(f)
    max_len = a.ctx + 16 + (a.rounds + 2) * a.steps + 64
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, a.ctx), generator=torch.Generator().manual_seed(0)).cuda()
    print(f"{card.display_name}, ctx {a.ctx}, on {torch.cuda.get_device_name()} (torch {torch.__version__}); "
          f"{a.rounds} rounds x {a.steps} steps per mode", flush=True)
    base = None
    rows = []
    for quant in a.quant:
        path = get_weight_path(quant)
        why = path.unavailable("cuda") if quant != "bf16" else None
        if why:
            print(f"{quant}: cannot run here: {why}")
            continue
        torch.cuda.empty_cache()
        model = build_model(card, "cuda", "sdpa", 0)
        net = FusedModel(model, path, max_len, gemv_configs=gemv) if "fused" in a.modes else None
        model = path.prepare(model)
        stored = path.stored(model)
        floor = MemoryFloor(stored.weight_bytes, stored.weight_bytes_no_embedding, kv_bytes(card.kv_bytes_per_token(), a.ctx), gpu.b_peak_Bps)
        t_floor_ms = floor.t_floor_s * 1e3
        print(f"[{quant}] W {stored.weight_bytes / 1e9:.2f} GB, K {floor.kv_bytes / 1e9:.3f} GB, t_floor {t_floor_ms:.3f} ms", flush=True)
        decs, compile_s = {}, {}
        with torch.inference_mode():
            for mode in a.modes:
                t = time.perf_counter()
                try:
                    dec = make_decoder(mode, model, max_len, net if mode == "fused" else None)
                    dec.prefill(prompt)
                    dec.prepare()
                except Exception as exc:  # noqa: BLE001 - a mode that cannot run is a line of the output, not the end
                    print(f"  {mode}: cannot run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
                    continue
                decs[mode], compile_s[mode] = dec, getattr(dec, "compile_s", None)
                extra = f" (compile {compile_s[mode]:.1f} s)" if compile_s[mode] is not None else ""
                print(f"  {mode}: ready in {time.perf_counter() - t:.1f} s{extra}"
                      + (f"; logit check relative L2 {dec.logit_check['rel_l2_max']:.2e}, top-1 {dec.logit_check['top1_agree']}/"
                         f"{dec.logit_check['compared']}; {json.dumps(dec.step_info)}" if mode == "fused" else ""), flush=True)
            blocks = {m: [] for m in decs}
            for _ in range(a.rounds):
                for mode, dec in decs.items():
                    blocks[mode].append(block_ms(dec, a.steps))
            prof = {m: profile_steps(dec, 3, "cuda") for m, dec in decs.items()}
            del decs
            peer = None
            if not a.no_peer:
                try:
                    peer = peer_ms_per_token(model, prompt, a.ctx, a.steps, 3 * a.steps, a.rounds)
                except Exception as exc:  # noqa: BLE001
                    print(f"  peer: cannot run: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
        for mode, b in blocks.items():
            ms = statistics.median(b)
            rows.append((quant, mode, ms, t_floor_ms / ms, prof[mode]["kernels_per_step"], prof[mode]["gpu_busy_ms_per_step"], compile_s[mode]))
        if peer:
            rows.append((quant, "peer (generate, static cache, compiled)", peer[0], t_floor_ms / peer[0], None, None, peer[1]))
        if quant == "bf16":
            base = next((r[2] for r in rows if r[:2] == ("bf16", "graphed")), None)
        del model, net
    print(f"\n{'path':14s} {'mode':42s} {'ms/step':>8s} {'R_floor':>8s} {'kernels':>8s} {'busy ms':>8s} {'compile s':>9s} {'x bf16 graphed':>14s}")
    for quant, mode, ms, r, k, busy, cs in rows:
        fmt = lambda v, f: format(v, f) if v is not None else "--"  # noqa: E731
        print(f"{quant:14s} {mode:42s} {ms:8.3f} {r:8.3f} {fmt(k, '8.0f'):>8s} {fmt(busy, '8.3f'):>8s} {fmt(cs, '9.1f'):>9s} "
              f"{fmt(base / ms if base else None, '14.2f'):>14s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
