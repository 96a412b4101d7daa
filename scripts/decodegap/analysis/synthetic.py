"""Synthetic session records for tests and benchmarks of the analysis half. Never measurements:
each carries environment.synthetic = true, gpu name "synthetic", and code commit "synthetic", so no
table or lineage can mistake one for a real session.

    python -m decodegap.analysis.synthetic --root /tmp/store --cells 50 --sessions 10 --steps 256
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from decodegap.core import manifest, paths
from decodegap.core.config import load_gpus, load_models
from decodegap.core.floor import MemoryFloor, kv_bytes
from decodegap.core.cells import OWN_MODEL, arms_of, gguf_format
from decodegap.core.record import build_record, floor_record, write_session
from decodegap.core.protocol import Protocol


def record(cell: dict, session: int, n_steps: int, rng: np.random.Generator, base_ms: float = 10.0,
           spread: float = 0.01, reasons: list[str] | None = None, weight_bytes: int | None = None) -> dict:
    """weight_bytes: W as a packed weight path stores it (default: the card in bf16)."""
    card = load_models()[cell["model"]]
    gpu = load_gpus()[cell["gpu"]]
    w = 0 if cell["mode"] == "layer" else card.param_count() * 2  # the attention microbenchmark reads only KV
    w_noemb = w - (0 if card.tied_embeddings or not w else card.embedding_params() * 2)
    if weight_bytes is not None:
        w_noemb, w = w_noemb - (w - weight_bytes), weight_bytes
    floor = MemoryFloor(w, w_noemb, kv_bytes(card.kv_bytes_per_token(), cell["ctx"]), gpu.b_peak_Bps, 0.85 * gpu.b_peak_Bps)
    arms_modes = arms_of(cell["mode"])
    # a protocol the synthetic samples satisfy, so that a record without reasons is valid by its own data
    protocol = Protocol(timed_steps=n_steps, ab_blocks=max(1, n_steps // 16), ab_block_steps=16, min_samples=min(n_steps, 64), min_duration_s=0.0)
    arms = []
    for i, mode in enumerate(arms_modes):
        factor = {"graphed": 1.0, "layer-graphed": 1.0, "compiled": 0.7, "fused": 0.6}.get(mode, 1.3)  # op by op: slower
        level = base_ms * factor * (1 + 0.02 * rng.standard_normal())
        host = (level * (1 + spread * rng.standard_normal(n_steps))).clip(min=0.001)
        device = host * 0.99
        probe_ms = lambda n: (protocol.step_probe_iterations * 33e-6 * (1 + 0.02 * rng.random(n))).tolist()  # noqa: E731
        timed = {"host_ms": host.tolist(), "device_ms": device.tolist(), "host_cpu_ms": host.tolist(),
                 "cpu_probe_before_ms": probe_ms(n_steps), "cpu_probe_after_ms": probe_ms(n_steps),
                 "tokens": rng.integers(0, 100, n_steps).tolist()}
        timed["block"] = [i + 2 * (j // 16) for j in range(n_steps)] if len(arms_modes) == 2 else [j // 16 for j in range(n_steps)]
        arms.append({
            "mode": mode, "prefill": {"host_ms": 100.0, "device_ms": 99.0}, "prepare_steps": 0,
            "warmup": {"host_ms": host[:4].tolist(), "device_ms": device[:4].tolist(), "tokens": [1, 2, 3, 4]},
            "timed": timed, "final_position": cell["ctx"] + n_steps, "expected_position": cell["ctx"] + n_steps,
            "anatomy": {  # the profiler pass: the same kernels in every mode, busy for most of a graphed step
                "steps": 3, "kernels_per_step": 1313.0 if mode == "eager" else 1544.0, "gpu_busy_ms_per_step": 0.93 * base_ms,
                "host_ops": [{"name": "aten::scaled_dot_product_attention", "calls_per_step": 28.0,
                              "cpu_total_ms_per_step": (39.0 if mode == "eager" else 2.1) * base_ms / 10, "cpu_self_ms_per_step": 0.1}],
                "kernels": [{"name": "flash_fwd_kernel", "calls_per_step": 28.0, "ms_per_step": 0.05 * base_ms}],
            },
            "attention_kernels": {"flash": ["flash_fwd_kernel"]},
        })
        if mode.startswith("layer-"):  # the attention microbenchmark: one call per layer per step
            arms[-1]["layers_per_step"] = card.architecture["num_hidden_layers"]
        if mode in OWN_MODEL:  # an engine on its own file: the floor's bytes are the file's, as a session takes them
            arms[-1]["engine"] = {"loop": "synthetic", "build": {"engine": "synthetic"}, "gguf": {
                "format": gguf_format(cell["quant"]), "tensor_bytes": w,
                "embedding_bytes": w - w_noemb, "tied_embeddings": card.tied_embeddings, "file": "synthetic"}}
    return build_record(
        cell=cell, session=session, seed=session, reasons=list(reasons or []), warnings=[], protocol=protocol,
        arms=arms, block_order=[],
        cpu_probe={"iterations": 20000, "ms_before_block": [0.66] * (1 + max(b for a in arms for b in a["timed"]["block"]))},
        floor=floor_record(floor, card.kv_bytes_per_token(), card.param_count()), card=card, gpu=gpu,
        environment={
            "synthetic": True, "python": "synthetic", "cpu_model": "synthetic", "libraries": {"torch": "synthetic", "transformers": "synthetic"},
            "device_type": "cuda" if gpu.device == "cuda" else "cpu", "gpu": {"name": "synthetic", "driver": "synthetic", "uuid": f"synthetic-{session % 3}"},
            "gpu_start": None, "gpu_before_timed": None, "gpu_end": None, "gpu_processes": [],
            "environment_record": {"path": "synthetic", "sha256": "0" * 64, "definition_sha256": "0" * 64},
        },
        code={"commit": "synthetic", "dirty": False, "commit_origin": "synthetic", "sources_sha256": "0" * 64, "files": {}},
        time={"started_utc": "2026-01-01T00:00:00+00:00", "finished_utc": "2026-01-01T00:00:01+00:00", "duration_s": 1.0, "phases_s": {}},
        error=None,
    )


def not_possible_record(cell: dict, session: int, reason: str) -> dict:
    """A session of a cell that cannot run (a missing package, a missing kernel): no arm, its reason."""
    rec = record(cell, session, 64, np.random.default_rng(session))
    rec.update(status="invalid", reasons=[f"not possible: {reason}"], arms=[], block_order=[], cpu_probe=None,
               error={"kind": "not possible", "message": reason})
    return rec


def write_store(root, cells: list[dict], sessions: int, n_steps: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for cell in cells:
        base = 5.0 + cell["ctx"] / 1024
        for s in range(sessions):
            path = paths.session_path(root=root, session=s, **cell)
            write_session(record(cell, s, n_steps, rng, base_ms=base), path)
            out.append(path.as_posix())
    manifest.add(out, root)  # like every command that adds sessions
    return out


def hierarchical_cell(rng: np.random.Generator, machines: int, sessions_per_machine: int, steps: int, sd_machine: float,
                      sd_session: float, sd_step: float, truth_ms: float = 10.0) -> tuple[list[np.ndarray], list[int]]:
    """Step times of one simulated cell whose true median is truth_ms: each step is truth x (1 +
    machine effect + session effect + step noise), the three normal with the given relative SDs
    (symmetric, so the pooled population's median is truth_ms). Returns steps per session and each
    session's machine."""
    sessions, labels = [], []
    for m in range(machines):
        machine = sd_machine * rng.standard_normal()
        for _ in range(sessions_per_machine):
            session = sd_session * rng.standard_normal()
            sessions.append(truth_ms * (1 + machine + session + sd_step * rng.standard_normal(steps)))
            labels.append(m)
    return sessions, labels


def coverage(cfg, machines: int, sessions_per_machine: int, steps: int, sd_machine: float, sd_session: float, sd_step: float,
             draws: int, seed: int = 0) -> dict:
    """How often the interval of decodegap.analysis.stats.median_with_ci covers the true median over
    simulated cells (hierarchical_cell), and its mean relative width."""
    from decodegap.analysis.stats import median_with_ci

    covered, widths = 0, []
    for d in range(draws):
        sessions, labels = hierarchical_cell(np.random.default_rng([seed, d]), machines, sessions_per_machine, steps,
                                             sd_machine, sd_session, sd_step)
        r = median_with_ci(sessions, cfg, np.random.default_rng([seed, d, 1]), labels)
        covered += r["ci_low_ms"] <= 10.0 <= r["ci_high_ms"]
        widths.append((r["ci_high_ms"] - r["ci_low_ms"]) / 10.0)
    return {"coverage": covered / draws, "mean_rel_width": float(np.mean(widths)), "draws": draws}


def benchmark_cells(n_cells: int, gpus=("h200", "h100-sxm5", "a100-80gb-sxm4", "l40s", "l4")) -> list[dict]:
    models = ("qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b")
    combos = itertools.product(gpus, models, (2048, 4096, 8192, 16384), ("eager", "graphed"))
    return [dict(gpu=g, model=m, ctx=c, attn="sdpa", quant="bf16", mode=md) for g, m, c, md in itertools.islice(combos, n_cells)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m decodegap.analysis.synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--cells", type=int, default=50)
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--steps", type=int, default=256)
    args = p.parse_args(argv)
    files = write_store(args.root, benchmark_cells(args.cells), args.sessions, args.steps)
    print(f"{len(files)} synthetic sessions under {args.root}")


if __name__ == "__main__":
    main()
