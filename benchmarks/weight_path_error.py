"""What each weight path does to the logits, against the bf16 weights it was made from.

    python benchmarks/weight_path_error.py [--models qwen2.5-7b llama-3.1-8b mistral-7b-v0.3]
                                           [--quant bf16 fp8 int4-triton] [--ctx 2048] [--steps 4]
                                           [--json out.json] [--deadline-s 0]

A session's logit check compares the fused step with a float32 reference holding the weights the step
multiplies by (for fp8 and int4, the dequantized ones): it catches a wrong kernel, not what the format
costs. Here, per card (random bf16 weights, the sessions' cards.build_model with seed 0), the reference
is the bf16 weights in float32: it prefills a random ctx-token prompt and decodes --steps tokens
greedily. For each path, on the same tokens: the fused step built from those bf16 weights (`fused`:
the error a session of that path carries against bf16), and the transformers model holding the path's
dequantized weights in float32 (`format`: the format's own share, no kernel), each as the worst
relative L2 of the logits over the steps and the steps whose top-1 token agrees.
(decodegap.measure.fused.weight_path_errors.) Runs on a GPU, or on the CPU for a small card
(`--models tiny-qwen --ctx 64`). The cards' weights are random, so the tokens mean nothing; the
errors are those of the formats' rounding on weights of the card's shapes and scale.
"""

import argparse
import json
import sys
import time

from decodegap.core.config import load_models


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-7b", "llama-3.1-8b", "mistral-7b-v0.3"])
    ap.add_argument("--quant", nargs="+", default=["bf16", "fp8", "int4-triton"])
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json", help="write the rows here as well")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no further card after this many seconds (0: none)")
    a = ap.parse_args(argv)

    import torch

    from decodegap.measure.cards import build_model
    from decodegap.measure.fused import weight_path_errors
    from decodegap.measure.weights import get_weight_path

    cards = load_models()
    unknown = [m for m in a.models if m not in cards]
    if unknown:
        print(f"weight_path_error: unknown model {', '.join(unknown)} (config/models.yaml has {', '.join(sorted(cards))})", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    paths = [get_weight_path(q) for q in a.quant]
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"weight_path_error: {', '.join(a.quant)} against bf16 weights at ctx {a.ctx}, {a.steps} decode steps, on {where} "
          f"(torch {torch.__version__})", flush=True)
    rows, start = [], time.perf_counter()
    for key in a.models:
        if a.deadline_s and time.perf_counter() - start > a.deadline_s:
            print(f"deadline: {key} and the cards after it left out", flush=True)
            break
        card = cards[key]
        runnable = [p for p in paths if p.name == "bf16" or not p.unavailable(device)]
        for p in paths:
            if p not in runnable:
                print(f"  {p.name}: cannot run on {device}: {p.unavailable(device)}", flush=True)
        print(f"{card.display_name}:", flush=True)
        prompt = torch.randint(0, card.architecture["vocab_size"], (1, a.ctx), generator=torch.Generator().manual_seed(0)).to(device)
        for row in weight_path_errors(lambda: build_model(card, device, "sdpa", 0), runnable, prompt, steps=a.steps,
                                      log=lambda s: print(s, flush=True)):
            rows.append({"model": key, "device": where, **row})
        if a.json:  # after every card: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    print(f"{'model':<18} {'path':<12} {'fused rel L2':>12} {'top-1':>6} {'format rel L2':>13} {'top-1':>6}")
    for r in rows:
        if "reason" in r:
            print(f"{r['model']:<18} {r['path']:<12} cannot run: {r['reason']}")
            continue
        print(f"{r['model']:<18} {r['path']:<12} {r['fused']['rel_l2_max']:12.3e} {r['fused']['top1_agree']:>4}/{r['decode_steps']}"
              f" {r['format']['rel_l2_max']:13.3e} {r['format']['top1_agree']:>4}/{r['decode_steps']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
