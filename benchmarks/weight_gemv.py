"""Batch-1 GEMV bandwidth of each weight path, per linear layer of a card, on the GPU.

    python benchmarks/weight_gemv.py [--model qwen2.5-7b] [--quant bf16 int4-tinygemm]

For each distinct linear shape of the card's decoder blocks (q, k, v, o, gate, up, down), builds
the layer, packs it through the weight path (decodegap.measure.weights: the same packing the
sessions use), and times one batch-1 matmul replayed from a CUDA graph
(`triton.testing.do_bench_cudagraph`, median). Prints us per call, the bytes the path stores for
the layer (scales included), the bandwidth that implies, and the speedup over bf16 beside the ideal
one (bf16 bytes / stored bytes): which kernel realises its savings at batch 1.
"""

import argparse
import sys

from decodegap.core.config import load_models


def linear_shapes(card) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of each linear of one decoder block."""
    a = card.architecture
    h, hq, hkv = a["hidden_size"], a["num_attention_heads"], a["num_key_value_heads"]
    d = a.get("head_dim") or h // hq
    return {"q": (hq * d, h), "k": (hkv * d, h), "v": (hkv * d, h), "o": (h, hq * d),
            "gate": (a["intermediate_size"], h), "up": (a["intermediate_size"], h), "down": (h, a["intermediate_size"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--quant", nargs="+", default=["bf16", "int4-tinygemm", "bnb-nf4"])
    ap.add_argument("--rep-ms", type=int, default=200)
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("weight_gemv: needs a CUDA GPU (it times on the device); nothing measured", file=sys.stderr)
        return 2
    import triton.testing

    from decodegap.measure.weights import get_weight_path, module_bytes

    for quant in list(a.quant):
        why = get_weight_path(quant).unavailable("cuda") if quant != "bf16" else None
        if why:
            print(f"{quant}: cannot run here: {why}")
            a.quant.remove(quant)
    card = load_models()[a.model]
    print(f"{card.display_name} on {torch.cuda.get_device_name()}: batch-1 GEMV per linear, median of CUDA-graph replays")
    print(f"{'layer':6s} {'out x in':>13s} {'path':14s} {'us':>8s} {'MB stored':>10s} {'GB/s':>8s} {'speedup':>8s} {'ideal':>6s}")
    for name, (n, k) in linear_shapes(card).items():
        base_us = base_bytes = None
        for quant in a.quant:
            path = get_weight_path(quant)
            lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
            torch.nn.init.normal_(lin.weight, std=k ** -0.5)
            module = lin if quant == "bf16" else path.pack(lin)  # the packing the sessions use
            x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
            with torch.inference_mode():
                us = triton.testing.do_bench_cudagraph(lambda: module(x), rep=a.rep_ms, return_mode="median") * 1e3
            nbytes = module_bytes(module)  # what the path stores for the layer, scales included
            if quant == "bf16":
                base_us, base_bytes = us, nbytes
            speedup = f"{base_us / us:8.2f}" if base_us else f"{'--':>8s}"
            ideal = f"{base_bytes / nbytes:6.2f}" if base_bytes else f"{'--':>6s}"
            print(f"{name:6s} {n:6d} x {k:5d} {quant:14s} {us:8.2f} {nbytes / 1e6:10.2f} {nbytes / us / 1e3:8.0f} {speedup} {ideal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
