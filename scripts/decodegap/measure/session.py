"""Measure one session of one cell in this (fresh) process and write its record.

    python -m decodegap.measure --gpu h200 --model qwen2.5-7b --ctx 2048 --attn sdpa \
        --quant bf16 --mode graphed --session 3 [--out PATH]

Protocol: build the card's model on the device; prefill ctx random tokens; labelled warm-up steps;
timed steps, each feeding the previous token and reading the new one back to the host. An A/B mode
(`ab-eager-graphed`) measures both arms in this one process, alternating blocks ABBA so that drift
cancels. One progress line per phase goes to stderr.

Exit status: 0 with a valid or an invalid record (expected failures such as out of memory or a
mode this device cannot run are data); 1 on an unexpected error (traceback, no record); 2 on bad
input (unknown key, wrong device); 3 when the session file already exists (nothing is measured).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from decodegap.core import paths
from decodegap.core.config import GPUS_YAML, MODELS_YAML, load_gpu, load_models, lookup
from decodegap.core.errors import CellNotPossible, ConfigError, DecodegapError, SessionExists
from decodegap.core.cells import LAYER_ARMS, OWN_MODEL
from decodegap.core.protocol import Protocol, layer_block_steps
from decodegap.measure.failures import EXIT_BAD_INPUT, EXIT_EXISTS, EXIT_RECORDED, classify_expected

_T0 = time.perf_counter()
EXTRA_CACHE_SLOTS = 8  # static cache headroom beyond the steps a session takes


def log(msg: str) -> None:
    print(f"[decodegap {time.perf_counter() - _T0:7.2f}s] {msg}", file=sys.stderr, flush=True)


def process_age_s() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included), Linux only."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m decodegap.measure", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", required=True, help="a key of config/gpus.yaml (the device this process runs on)")
    p.add_argument("--model", required=True, help="a key of config/models.yaml")
    p.add_argument("--ctx", required=True, type=int, help="tokens in the KV cache when decode starts")
    p.add_argument("--attn", default="sdpa", help="attention path (default: sdpa)")
    p.add_argument("--quant", default="bf16", help="weight path (default: bf16)")
    p.add_argument("--mode", required=True, help="eager, static, graphed, or an A/B mode such as ab-eager-graphed")
    p.add_argument("--session", required=True, type=int, help="session index within the cell")
    p.add_argument("--seed", type=int, default=None, help="seed for weights and prompt (default: the session index)")
    p.add_argument("--out", default=None, help="record path (default: the path grammar under --root)")
    p.add_argument("--root", default=".", help="repository root the default --out is relative to")
    p.add_argument("--receipt", default=None, help="after the record is written, a small JSON naming it and its sha256 here "
                   "(the workflow's measure rule outputs this receipt, never the session itself)")
    p.add_argument("--gpus", default=str(GPUS_YAML), help="GPU table (default: config/gpus.yaml)")
    p.add_argument("--models", default=str(MODELS_YAML), help="model cards (default: config/models.yaml)")
    p.add_argument("--environment", default=None,
                   help="the GPU type's environment record (python -m decodegap.measure.setup): its compile caches are used, and a "
                        "cell whose path it rules out is recorded invalid with its reason, without touching the GPU")
    p.add_argument("--gpu-spec", default=None, help="JSON object of the GPU's fields, overriding its --gpus entry field by field (the workflow passes the user's merged table)")
    Protocol.add_arguments(p)
    args = p.parse_args(argv)
    if args.ctx < 1:
        p.error(f"--ctx must be positive, got {args.ctx}")
    if args.session < 0:
        p.error(f"--session must be >= 0, got {args.session}")
    try:
        args.protocol = Protocol.from_args(args)
    except ValueError as exc:  # "protocol.max_rel_stdev must be > 0, got -1.0" -> name the flag
        name = str(exc).split()[0].removeprefix("protocol.")
        p.error(f"--{name.replace('_', '-')}: {exc}")
    return args


def ab_block_order(arms: list[str], blocks_per_arm: int) -> list[str]:
    """ABBA ABBA ...: each arm leads as often as it follows, so a linear drift cancels."""
    if len(arms) == 1:
        return []
    pattern = [0, 1, 1, 0]
    return [arms[pattern[i % 4]] for i in range(2 * blocks_per_arm)]


class Session:
    """One fresh-process session of a cell, in named phases:

        build    the device's copy bandwidth, the card's model, what each mode needs from the dense
                 weights, the weight path's packing, and the memory floor
        prepare  per arm: its decoder, the prefill, the mode's own set-up (a capture, a compile)
        time     labelled warm-up steps, then the timed steps in blocks (ABBA for two arms) with the
                 host probe before each block
        profile  a few more steps per arm under the profiler, never timed: kernels and GPU busy time

    and `arms` holds each arm's record as the phases fill it in."""

    def __init__(self, args, gpu, card, protocol: Protocol, arm_modes: list[str], attn, weights):
        self.args, self.gpu, self.card, self.protocol = args, gpu, card, protocol
        self.arm_modes, self.attn, self.weights = arm_modes, attn, weights
        self.device = "cuda" if gpu.device == "cuda" else "cpu"
        self.layer = arm_modes[0] in LAYER_ARMS  # the attention microbenchmark: no model, one call per layer
        self.own_model = arm_modes[0] in OWN_MODEL  # an engine on its own model file (llama.cpp): no transformers model
        self.gguf: dict | None = None
        self.gguf_held = None  # the cached file, held while the session uses it (never evicted meanwhile)
        self.single = len(arm_modes) == 1
        self.phases_s: dict[str, float] = {}
        self.arms: list[dict] = []
        self.decoders: dict = {}
        self.floor: dict | None = None
        self.cpu_probe: dict | None = None
        self.gpu_before_timed: dict | None = None
        self.host_before_timed: dict | None = None
        self.launch_shapes = None  # the fused kernels' shapes the GPU type's environment stage chose (None: its table)
        self.warnings: list[str] = []  # found while measuring; judged ones are added at the end
        self.fallbacks: list[str] = []  # arms whose profiled steps ran another attention kernel than the path's

    def _phase(self, name: str, t0: float) -> float:
        dt = time.perf_counter() - t0
        self.phases_s[name] = self.phases_s.get(name, 0.0) + dt
        return dt

    @property
    def block_steps(self) -> int:
        return self.protocol.layer_block_steps if self.layer else self.protocol.ab_block_steps

    @property
    def timed_per_arm(self) -> int:
        p = self.protocol
        return p.timed_steps if self.single else p.ab_blocks * self.block_steps

    @property
    def max_cache_len(self) -> int:
        p = self.protocol
        timed = p.timed_steps if self.single else p.ab_blocks * p.ab_block_steps
        return self.args.ctx + 8 + p.warmup_steps + timed + p.profile_steps + EXTRA_CACHE_SLOTS

    def run(self) -> None:
        import torch

        self.build()
        try:
            with torch.inference_mode(), self.attn.context():
                self.prepare()
                self.time()
                self.profile()
        finally:  # before the end snapshot: an engine's own process on the GPU would be counted as foreign
            for dec in self.decoders.values():
                dec.close()
            if self.gguf_held is not None:
                self.gguf_held.close()

    def build(self) -> None:
        import torch

        from decodegap.core.floor import MemoryFloor, kv_bytes
        from decodegap.core.record import floor_record
        from decodegap.measure.bandwidth import copy_bandwidth_Bps
        from decodegap.measure.cards import build_model
        from decodegap.measure.modes import pack
        from decodegap.measure.weights import StoredWeights

        t = time.perf_counter()
        copy_Bps = copy_bandwidth_Bps(self.device)
        self._phase("bandwidth", t)
        log(f"bandwidth: device copy {copy_Bps / 1e9:.1f} GB/s (datasheet {self.gpu.b_peak_Bps / 1e9:.0f} GB/s)")
        t = time.perf_counter()
        self.model, self.from_dense = None, {}
        if self.layer:
            stored = StoredWeights(0, 0, 0)
        elif self.own_model:  # llama.cpp: the card's GGUF file in the cell's format, its bytes from the file
            from decodegap.measure.engines.llamacpp import gguf_for

            self.gguf, self.gguf_held = gguf_for(self.card, self.weights.format, self.device, log)
            g = self.gguf
            embedding = 0 if g["tied_embeddings"] else g["embedding_bytes"]  # tied: the output layer reads the table
            stored = StoredWeights(g["tensor_bytes"], g["tensor_bytes"] - embedding, g["param_count"])
            if self.device == "cuda":
                torch.cuda.empty_cache()  # the bandwidth probe's buffers: llama.cpp allocates outside torch
        else:
            model = build_model(self.card, self.device, self.attn.attn_implementation, self.seed)
            self.model, self.from_dense = pack(model, self.weights, self.arm_modes, self.max_cache_len, self.launch_shapes)
            if self.device == "cuda":
                torch.cuda.synchronize()
            stored = self.weights.stored(self.model)
        kv_per_token = self.card.kv_bytes_per_token()
        floor = MemoryFloor(weight_bytes=stored.weight_bytes, weight_bytes_no_embedding=stored.weight_bytes_no_embedding,
                            kv_bytes=kv_bytes(kv_per_token, self.args.ctx), b_peak_Bps=self.gpu.b_peak_Bps, copy_bandwidth_Bps=copy_Bps)
        self.t_floor_s = floor.t_floor_s
        self.floor = floor_record(floor, kv_per_token, stored.param_count)
        what = (f"attention only, {self.card.architecture['num_hidden_layers']} layers" if self.layer
                else f"{stored.param_count / 1e9:.3f} B params, W {stored.weight_bytes / 1e9:.2f} GB")
        log(f"build: {self.card.key} {what}, K {floor.kv_bytes / 1e9:.3f} GB, t_floor {floor.t_floor_s * 1e3:.3f} ms "
            f"in {self._phase('build', t):.1f} s")

    def prepare(self) -> None:
        import torch

        from decodegap.measure.layer import make_layer_decoder
        from decodegap.measure.modes import make_decoder
        from decodegap.measure.timing import StepTimer, timed

        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        prompt = torch.randint(0, self.card.architecture["vocab_size"], (1, self.args.ctx), generator=gen, device=self.device)
        self.timers, self.warm = {}, {}
        for mode in self.arm_modes:
            t = time.perf_counter()
            if self.layer:
                dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
                dec = make_layer_decoder(mode, self.card, self.attn, self.args.ctx, self.device, dtype, self.seed)
            elif self.own_model:
                from decodegap.measure.engines.llamacpp import LlamaCppDecoder

                kept = {k: v for k, v in self.gguf.items() if k != "path"} | {"file": Path(self.gguf["path"]).name}
                dec = LlamaCppDecoder(self.gguf["path"], self.max_cache_len, gguf=kept)
            else:
                dec = make_decoder(mode, self.model, self.max_cache_len, self.from_dense.get(mode))
            # an engine in its own process: torch's events would time nothing of it
            _, host_ms, device_ms = timed(lambda: dec.prefill(prompt), "cpu" if self.own_model else self.device)
            self._phase("prefill", t)
            log(f"prefill [{mode}]: " + ("first call (compiles what compiles)" if self.layer else f"{self.args.ctx} tokens") + f" in {host_ms:.1f} ms")
            t = time.perf_counter()
            prepare_steps = dec.prepare()
            if prepare_steps:
                log(f"prepare [{mode}]: {prepare_steps} capture warm-up steps + capture in {self._phase('prepare', t):.2f} s"
                    + (f" (compile {dec.compile_s:.1f} s)" if dec.compile_s is not None else ""))
            self.decoders[mode] = dec
            clock = dec.device_clock  # an engine's own loop or stream: host times only, no events
            if not self.layer:  # a layer session sizes its timers after the warm-up (layer_block_steps)
                self.timers[mode] = StepTimer(self.device, self.timed_per_arm, self.protocol.step_probe_iterations, device_clock=clock)
            self.warm[mode] = StepTimer(self.device, self.protocol.warmup_steps, device_clock=clock)
            self.arms.append({"mode": mode, "prefill": {"host_ms": host_ms, "device_ms": device_ms}, "prepare_steps": prepare_steps,
                              **dec.arm_record()})
            if dec.logit_check is not None:
                c = dec.logit_check
                theirs = c.get("transformers_rel_l2_max")
                log(f"logit check [{mode}]: relative L2 against float32 {c['rel_l2_max']:.2e}"
                    + (f", transformers' bf16 {theirs:.2e} (ratio {c.get('ratio') or float('nan'):.2f})" if theirs is not None else "")
                    + f" over {c.get('context', '?')} positions, top-1 {c['top1_agree']}/{c['compared']}: "
                    + ("agrees" if c["agrees"] else "DISAGREES"))

    def time(self) -> None:
        from decodegap.measure.environment import host_snapshot
        from decodegap.measure.timing import PROBE_ITERATIONS, StepTimer, cpu_probe_ms

        p, modes = self.protocol, self.arm_modes
        gc.collect()
        gc.disable()  # a collection inside the loop would be timed as a slow step
        try:
            if self.decoders[modes[0]].owns_loop:  # one arm (cells.OWN_LOOP): its own loop runs it all
                self._time_own_loop(modes[0])
                return
            t = time.perf_counter()
            for mode in modes:
                for _ in range(p.warmup_steps):
                    self.warm[mode].step(self.decoders[mode])
            log(f"warm-up: {p.warmup_steps} labelled steps per arm in {self._phase('warmup', t):.2f} s")
            block_steps = self.block_steps
            if self.layer:
                block_steps = layer_block_steps(p, [self.warm[m].host_ms() for m in modes])
                self.timers = {m: StepTimer(self.device, p.ab_blocks * block_steps, p.step_probe_iterations) for m in modes}
                log(f"blocks: {p.ab_blocks} x {block_steps} steps per arm")
            self.gpu_before_timed = self.snapshot()
            self.host_before_timed = host_snapshot()
            t = time.perf_counter()
            # Steps run in blocks (A/B: ABBA arms; plain modes: runs of block_steps). The CPU probe
            # runs before each block, so every block has a reading of the host core's speed.
            blocks: dict[str, list[int]] = {m: [] for m in modes}
            order = [modes[0]] * -(-p.timed_steps // block_steps) if self.single else self.block_order
            probe_ms = []
            for block, mode in enumerate(order):
                probe_ms.append(cpu_probe_ms())
                timer = self.timers[mode]
                for _ in range(min(block_steps, timer.capacity - len(timer))):
                    timer.step(self.decoders[mode])
                    blocks[mode].append(block)
            self._phase("timed", t)
            self.cpu_probe = {"iterations": PROBE_ITERATIONS, "ms_before_block": probe_ms}
        finally:
            gc.enable()
        self._finish_arms(blocks)

    def _time_own_loop(self, mode: str) -> None:
        """An engine that owns its decode loop (transformers' generate): warm-up and timed steps in
        one call of it, each step timed inside the loop, the host probes between steps, untimed."""
        from decodegap.measure.environment import host_snapshot
        from decodegap.measure.timing import PROBE_ITERATIONS, cpu_probe_ms

        self.gpu_before_timed = self.snapshot()
        self.host_before_timed = host_snapshot()
        t = time.perf_counter()
        probe_ms, block_of = self.decoders[mode].run(self.warm[mode], self.timers[mode], self.block_steps, cpu_probe_ms)
        self._phase("timed", t)
        log(f"{mode}: {len(self.warm[mode])} warm-up and {len(self.timers[mode])} timed steps in its own loop")
        self.cpu_probe = {"iterations": PROBE_ITERATIONS, "ms_before_block": probe_ms}
        self._finish_arms({mode: block_of})

    def _finish_arms(self, blocks: dict) -> None:
        p = self.protocol
        for arm in self.arms:
            mode, dec = arm["mode"], self.decoders[arm["mode"]]
            arm["warmup"] = self.warm[mode].samples()
            arm["timed"] = self.timers[mode].samples()
            arm["timed"]["block"] = blocks[mode]
            arm["expected_position"] = self.args.ctx + arm["prepare_steps"] + p.warmup_steps + len(self.timers[mode])
            arm["final_position"] = dec.final_position()
            host = sorted(arm["timed"]["host_ms"])
            median_ms = host[len(host) // 2] if host else float("nan")
            log(f"timed [{mode}]: {len(host)} steps, median {median_ms:.3f} ms/step, R_floor {self.t_floor_s * 1e3 / median_ms:.3f}")

    def profile(self) -> None:
        """After the timed steps and their positions: never in the samples."""
        from decodegap.measure.anatomy import profile_steps
        from decodegap.measure.attention import attention_kernels

        if not self.protocol.profile_steps:
            return
        t = time.perf_counter()
        for arm in self.arms:
            dec = self.decoders[arm["mode"]]
            if not dec.profiled:  # an engine's own loop or kernels: no torch step to take apart (no anatomy)
                if self.attn.families and self.device == "cuda" and not dec.own_attention:
                    self.fallbacks.append(f"{arm['mode']}: attention kernel not verified (an engine's own loop has no profiler pass)")
                continue
            try:
                arm["anatomy"] = profile_steps(dec, self.protocol.profile_steps, self.device)
            except Exception as exc:  # noqa: BLE001 - an untimed extra: its failure is recorded, the session stands
                arm["anatomy"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
                self.warnings.append(f"profiler pass failed for {arm['mode']}: {arm['anatomy']['error']}")
                if self.attn.families and self.device == "cuda":  # a pinned path whose kernel nobody saw is no measurement of it
                    self.fallbacks.append(f"{arm['mode']}: attention kernel not verified (the profiler pass failed)")
                continue
            a = arm["anatomy"]
            busy = f", GPU busy {a['gpu_busy_ms_per_step']:.3f} ms" if a["gpu_busy_ms_per_step"] is not None else ""
            log(f"profile [{arm['mode']}]: {a['kernels_per_step']:.0f} kernels/step{busy}")
            if self.device == "cuda":  # which attention kernel ran: a silent fallback is no measurement of the path
                names = a.get("kernel_names") or {}
                arm["attention_kernels"] = attention_kernels(names)
                # a decoder with its own decode attention runs the cell's path only in its prefill
                fell_back = None if dec.own_attention else self.attn.fallback_reason(names)
                log(f"attention [{arm['mode']}]: " + (", ".join(arm["attention_kernels"]) or "none seen")
                    + (f"; {fell_back}" if fell_back else ""))
                if fell_back:
                    self.fallbacks.append(f"{arm['mode']}: {fell_back}")
        self._phase("profile", t)

    def snapshot(self):
        from decodegap.measure.environment import gpu_snapshot

        return gpu_snapshot(self.uuid) if self.device == "cuda" else None


def misfiled_out(out: Path, args) -> str | None:
    """Why --out may not receive this session: a path under a results/raw/ tree must be the cell's
    own canonical file (a session written into another cell's folder would block every later build)."""
    from decodegap.core import manifest

    if manifest.root_of(out) is None:
        return None  # outside any tree: a scratch record, which ingest checks before it enters one
    filed = paths.parse_session_path(out)
    ours = {"gpu": args.gpu, "model": args.model, "ctx": args.ctx, "attn": args.attn, "quant": args.quant, "mode": args.mode,
            "session": args.session}
    if filed != ours:
        canonical = paths.session_path(root=manifest.root_of(out), **ours).as_posix()
        return f"--out {out}: under a results/raw/ tree a session goes to its own cell's file, {canonical}"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    started_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_main, age_s = time.perf_counter(), process_age_s()
    if args.environment:  # the GPU type's compile caches, set before torch and its compilers load
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError, KeyError):
            args.environment = paths.record_of(args.environment)  # the record, or the stage's receipt naming it
            os.environ.update(json.loads(Path(args.environment).read_text()).get("cache_variables") or {})
    t = time.perf_counter()
    import torch  # timed here: import cost is part of a session's overhead
    import transformers  # noqa: F401

    import_s = time.perf_counter() - t
    try:
        out = Path(args.out) if args.out else paths.session_path(
            gpu=args.gpu, model=args.model, ctx=args.ctx, attn=args.attn, quant=args.quant,
            mode=args.mode, session=args.session, root=args.root,
        )
        if out.exists():
            raise SessionExists(f"{out}: session already recorded; sessions are immutable (pick another --session)")
        gpu, models = load_gpu(args.gpu, args.gpus, args.gpu_spec), load_models(args.models)
        card = lookup(models, args.model, "model", args.models)
        out_problem = misfiled_out(out, args)
        if out_problem:
            raise ConfigError(out_problem)
        from decodegap.measure.attention import get_attention_path
        from decodegap.core.cells import arms_of, mode_quant_problem
        from decodegap.measure.weights import get_weight_path

        attn, weights, arm_modes = get_attention_path(args.attn), get_weight_path(args.quant), arms_of(args.mode)
        mismatch = mode_quant_problem(args.mode, args.quant)
        if mismatch:
            raise ConfigError(f"--mode {args.mode} --quant {args.quant}: {mismatch}")
        env_record = ruled = None
        if args.environment:
            from decodegap.measure.setup import read_record, ruled_out

            env_record = read_record(args.environment)
            if env_record["gpu"] != args.gpu:
                raise ConfigError(f"{args.environment}: the environment record of gpu '{env_record['gpu']}', not '{args.gpu}'")
            ruled = ruled_out(env_record, args.attn, args.quant, args.mode, card.attention_layout)
    except SessionExists as exc:
        log(f"refused: {exc}")
        return EXIT_EXISTS
    except DecodegapError as exc:
        log(f"error: {exc}")
        return EXIT_BAD_INPUT

    protocol = args.protocol
    headroom = 0 if arm_modes[0] in LAYER_ARMS else Session(args, gpu, card, protocol, arm_modes, attn, weights).max_cache_len - args.ctx
    why = card.ctx_problem(args.ctx, headroom)
    if why:
        log(f"error: {why}")
        return EXIT_BAD_INPUT
    log(f"cell gpu={args.gpu} model={args.model} ctx={args.ctx} attn={args.attn} quant={args.quant} mode={args.mode} session={args.session} -> {out}")

    from decodegap.core.record import build_record
    from decodegap.measure.codeversion import code_version
    from decodegap.measure.environment import device_problem, foreign_processes, gpu_processes, gpu_uuid, host_snapshot, static_environment
    from decodegap.core.protocol import judge_session

    session = Session(args, gpu, card, protocol, arm_modes, attn, weights)
    if ruled:  # decided by the environment stage: record it, touch no GPU
        log(f"ruled out by {args.environment}: {ruled}")
        session.device = "cpu"
    if session.device == "cuda":
        if not os.environ.get("SLURM_JOB_ID"):  # SLURM gives a job its own GPU; elsewhere, lock one
            from decodegap.measure.gpulock import acquire

            session.gpu_lock = acquire(log)
        problem = device_problem(gpu)
        if problem:
            log(f"error: {problem}")
            return EXIT_BAD_INPUT
    session.seed = args.session if args.seed is None else args.seed
    if env_record is not None and env_record.get("launch_shapes"):  # chosen on this GPU type by its stage
        session.launch_shapes = env_record["launch_shapes"]
    session.uuid = gpu_uuid(0) if session.device == "cuda" else None
    session.block_order = ab_block_order(arm_modes, protocol.ab_blocks)
    session.gpu_before_timed = None
    env = static_environment(session.device)
    if ruled:
        env["device_type"] = "none: ruled out by the environment record"
        env["gpu"] = env_record.get("gpu_device")  # the GPU type's, as the stage saw it
    if env_record is not None:
        from decodegap.core.sources import sha256_file

        env["environment_record"] = {"path": Path(args.environment).as_posix(), "sha256": sha256_file(args.environment),
                                     "definition_sha256": env_record["definition_sha256"]}
        env["compile_caches"] = {var: os.environ.get(var) for var in env_record.get("cache_variables") or {}}  # shared with the stage
    env["gpu_start"] = session.snapshot()
    env["host_start"] = host_snapshot()
    log(f"environment: {env['gpu']['name'] if env['gpu'] else 'cpu'}, torch {torch.__version__}, transformers {env['libraries']['transformers']} (imports {import_s:.1f} s)")

    error = None
    try:
        if ruled:
            error = {"kind": "ruled out", "message": ruled}
        else:
            from decodegap.measure.setup import forms_needed

            why = attn.unavailable(session.device)
            if why is None and attn.static_cache and "static" in forms_needed(args.mode):
                why = f"{args.attn} cannot run on a static cache: {attn.static_cache}"
            if why:
                raise CellNotPossible(why)
            attn.register()
            session.run()
    except Exception as exc:  # noqa: BLE001 - sorted into expected (data) and unexpected (raised)
        expected = classify_expected(exc)
        if expected is None:
            raise
        error = {"kind": expected[0], "message": expected[1]}
        log(f"invalid cell ({expected[0]}): {expected[1]}")
        session.arms = []

    procs = gpu_processes(session.uuid) if session.device == "cuda" else []
    env["gpu_end"] = session.snapshot()
    env["host_end"] = host_snapshot()
    env["gpu_before_timed"] = session.gpu_before_timed
    env["host_before_timed"] = session.host_before_timed
    env["gpu_processes"] = procs
    foreign, proc_warnings = foreign_processes(procs) if session.device == "cuda" else ([], [])
    throttled = [r for snap in (session.gpu_before_timed, env["gpu_end"]) if snap for r in (snap.get("throttled") or [])]

    if error is None:
        reasons, warnings = judge_session(session.arms, protocol, foreign, throttled)
        reasons += session.fallbacks
    else:
        reasons, warnings = [f"{error['kind']}: {error['message']}"], []
    warnings += proc_warnings + session.warnings
    finished = time.perf_counter()
    record = build_record(
        cell={"gpu": args.gpu, "model": args.model, "ctx": args.ctx, "attn": args.attn, "quant": args.quant, "mode": args.mode},
        session=args.session, seed=session.seed, reasons=reasons, warnings=warnings, protocol=protocol,
        arms=session.arms, block_order=session.block_order, cpu_probe=session.cpu_probe, floor=session.floor,
        card=card, gpu=gpu, environment=env, code=code_version(),
        time={
            "started_utc": started_utc,
            "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "duration_s": (age_s + finished - t_main) if age_s is not None else finished - _T0,
            "phases_s": {"process_start_to_main": age_s, "imports": import_s, **session.phases_s},
        },
        error=error,
    )
    outside = record["time"]["duration_s"] - session.phases_s.get("timed", 0.0)
    record["time"]["phases_s"]["outside_timed_loop"] = outside

    from decodegap.core import manifest
    from decodegap.core.sources import sha256_file
    from decodegap.core.record import schema_errors, write_session

    errors = schema_errors(record)
    if errors:
        raise RuntimeError("record does not match its schema (a bug): " + "; ".join(errors[:5]))
    from decodegap.core.record import analysis_problems

    refused = analysis_problems(record, gpu.device)  # what the analysis would refuse is never written
    if refused:
        raise RuntimeError("the analysis would refuse this record (a bug): " + "; ".join(refused[:5]))
    if errors is None:
        log("schema check skipped: jsonschema not installed here")
    try:
        write_session(record, out)
    except SessionExists as exc:
        log(f"refused: {exc}")
        return EXIT_EXISTS
    root = manifest.root_of(out)
    if root is not None:  # a session of a results/raw/ tree: its line in that tree's manifest
        manifest.add([out], root)
    if args.receipt:
        receipt = {"raw_path": out.as_posix(), "sha256": sha256_file(out), "status": record["status"]}
        Path(args.receipt).parent.mkdir(parents=True, exist_ok=True)
        Path(args.receipt).write_text(json.dumps(receipt, indent=1) + "\n")
    log(f"{record['status']}: {out}" + (f" ({'; '.join(reasons)})" if reasons else "") + f"; {outside:.1f} s outside the timed loop")
    return EXIT_RECORDED

