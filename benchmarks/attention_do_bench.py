"""Cross-check of the attention microbenchmark against Triton's own graph timer, on the GPU.

    python benchmarks/attention_do_bench.py [--attn sdpa-flash] [--model qwen2.5-7b] [--ctx 2048] [--sessions results/raw/h200]

Builds the layer session's exact call (decodegap.measure.layer: one decode-shaped call per layer,
each layer its own K/V, the card's head layout) and times it with
`triton.testing.do_bench_cudagraph`, which captures the calls in a CUDA graph and replays them.
Prints us/layer from it beside the graphed us/layer of the recorded sessions of the same cell
(their median host time per step / layers), and the ratio. Target: they agree within 20 %.
Run it in the same device call as sessions of the cell, so both see the same machine.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from decodegap.core import paths
from decodegap.core.config import load_models


def recorded_us_per_layer(root: str, cell: dict) -> tuple[float | None, int]:
    """Median over the cell's recorded sessions of each session's graphed-arm median us/layer."""
    folder = Path(root) / Path(paths.CELL.format(**cell)).relative_to(cell["gpu"])
    values = []
    for f in sorted(folder.glob("s*.json")):
        rec = json.loads(f.read_text())
        for arm in rec["arms"]:
            if arm["mode"] == "layer-graphed":
                values.append(statistics.median(arm["timed"]["host_ms"]) * 1e3 / arm["layers_per_step"])
    return (statistics.median(values) if values else None), len(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attn", default="sdpa-flash")
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sessions", default="results/raw/h200", help="the GPU type's recorded sessions")
    ap.add_argument("--rep-ms", type=int, default=500, help="do_bench_cudagraph's timing budget")
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("attention_do_bench: needs a CUDA GPU (it times on the device); nothing measured", file=sys.stderr)
        return 2
    import triton.testing

    from decodegap.measure.attention import get_attention_path
    from decodegap.measure.layer import LayerDecoder

    path = get_attention_path(a.attn)
    why = path.unavailable("cuda")
    if why:
        print(f"attention_do_bench: {a.attn} cannot run here: {why}", file=sys.stderr)
        return 2
    card = load_models()[a.model]
    dec = LayerDecoder(card, path, a.ctx, "cuda", torch.bfloat16, seed=0)
    with torch.inference_mode(), path.context():
        dec.prefill()
        ms = triton.testing.do_bench_cudagraph(dec._step, rep=a.rep_ms, return_mode="median")
    bench_us = ms * 1e3 / dec.layers
    cell = {"gpu": a.gpu, "model": a.model, "ctx": a.ctx, "attn": a.attn, "quant": "bf16", "mode": "layer"}
    recorded, n = recorded_us_per_layer(a.sessions, cell)
    print(f"{a.attn} {a.model} ctx {a.ctx} on {torch.cuda.get_device_name()}: do_bench_cudagraph {bench_us:.2f} us/layer "
          f"({dec.layers} layers, median of replays)")
    if recorded is None:
        print(f"no recorded layer-graphed sessions under {a.sessions} for {paths.CELL.format(**cell)}")
        return 1
    ratio = recorded / bench_us
    verdict = "PASS" if abs(ratio - 1) <= 0.20 else "FAIL"
    print(f"recorded sessions (graphed arm, median of {n} session medians): {recorded:.2f} us/layer; "
          f"recorded / do_bench = {ratio:.3f} ({verdict}: target within 20 %)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
