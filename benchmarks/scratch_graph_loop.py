"""A from-scratch StaticCache + CUDA graph decode loop, sharing no code with decodegap.

It is the yardstick for the harness's `graphed` mode: on the same GPU, in the same call, decodegap's
median ms/step for Qwen-2.5-7B at ctx 2048 should land within a few ms of this loop's.

    python benchmarks/scratch_graph_loop.py [--ctx 2048] [--steps 200]
"""

import argparse
import inspect
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

# Qwen2.5-7B's published config, written out here on purpose (not read from config/models.yaml).
QWEN25_7B = dict(
    vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
    num_attention_heads=28, num_key_value_heads=4, head_dim=128, max_position_embeddings=131072,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen2", **QWEN25_7B), dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = StaticCache(config=model.config, max_cache_len=args.ctx + args.steps + 64)
    with torch.inference_mode():
        prompt = torch.randint(0, QWEN25_7B["vocab_size"], (1, args.ctx), device="cuda")
        out = model(input_ids=prompt, position_ids=torch.arange(args.ctx, device="cuda")[None], use_cache=True, logits_to_keep=1, **{kw: cache})
        tok = out.logits[:, -1:].argmax(-1)
        pos = torch.full((1, 1), args.ctx, device="cuda", dtype=torch.long)

        def step():
            o = model(input_ids=tok, position_ids=pos, use_cache=True, **{kw: cache})
            tok.copy_(o.logits[:, -1:].argmax(-1))
            pos.add_(1)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        for _ in range(10):
            g.replay()
            tok.item()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            g.replay()
            tok.item()  # the token on the host, as a streaming consumer reads it
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"scratch graph loop: {torch.cuda.get_device_name()} qwen2.5-7b ctx {args.ctx}: "
          f"median {times[len(times) // 2]:.3f} ms/step over {args.steps} steps (min {times[0]:.3f}, max {times[-1]:.3f})")


if __name__ == "__main__":
    main()
