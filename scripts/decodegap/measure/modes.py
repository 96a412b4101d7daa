"""Decode modes: how one batch-1 decode step reaches the GPU.

Every mode is a Decoder (below), so the session times them all alike:
    prefill(input_ids)  fill the KV cache with the prompt and pick the first token
    prepare()           mode-specific set-up after prefill (a graph capture); real steps, returned
                        as a count so the harness labels them as warm-up
    launch()            enqueue one decode step; it feeds the previous token and leaves the new one
                        on the device
    read_token()        copy the new token to the host, as a streaming consumer would (this syncs)
    final_position()    where the next token goes: the session checks one token per step with it
and the optional parts a mode may add to its arm of the record (`arm_record`).

eager    transformers' DynamicCache, one host launch per op: what `generate` does by default.
static   StaticCache, still one host launch per op: separates the cache's cost from the graph's.
graphed  StaticCache, the whole step captured once as a CUDA graph and replayed.
compiled StaticCache, the step under torch.compile (Inductor fuses the small ops), captured as one
         CUDA graph; the compile's seconds are recorded (`compile_s`), never timed as steps.
generate transformers' own `generate` loop with a static cache: its documented fast path (on CUDA
         it compiles the decoding forward itself). The engine owns the loop, so the step is timed
         inside it: from one token reaching the host (the streamer's put) to the next.
fused    our own compact step (decodegap.measure.fused) on the same weights: on CUDA six Triton
         kernels a layer (decodegap.measure.fused_kernels), captured as one CUDA graph; before
         that its logits on the session's own prompt are checked against a float32 reference,
         beside the transformers model's own (decodegap.measure.fused.logit_check).

Where CUDA has no graphs (the CPU), compiled and fused run their step op by op (fused: its plain-op
backend under torch.compile, or its kernels under Triton's interpreter), so the tests can check
what they compute.
"""

from __future__ import annotations

import inspect
import time

from decodegap.core.cells import MODE_NAMES
from decodegap.core.errors import CellNotPossible

# torch is imported inside the decoders, so the measure command can check its arguments fast.


class Decoder:
    """What the session asks of a decode mode. The optional parts default to "none": a mode that
    compiles sets compile_s and compile_cache, the fused step its step_info and logit_check, a mode
    with its own decode attention own_attention (its steps run no kernel of the cell's attention
    path). A mode that needs the dense (unpacked) weights builds what it needs from them in
    `from_dense`, which the session calls before the weight path packs the model."""

    mode = ""
    own_attention = False
    owns_loop = False  # an engine that runs warm-up and timed steps in one call of its own (run())
    device_clock = True  # CUDA events around each step on torch's stream (False: an engine on a stream of its own, or its own loop)
    profiled = True  # a torch step the profiler pass can take apart (False: an engine's own loop or kernels)
    compile_s: float | None = None
    compile_cache: dict | None = None
    step_info: dict | None = None
    logit_check: dict | None = None
    layers: int | None = None  # the attention microbenchmark: calls per step

    @classmethod
    def from_dense(cls, model, weights, max_cache_len: int, launch_shapes=None):
        """What this mode builds from the dense model before the weight path packs it (None: nothing);
        `launch_shapes`: the fused kernels' shapes, for a mode that runs them (None: its GPU's table)."""
        return None

    def prefill(self, input_ids) -> None:
        raise NotImplementedError

    def prepare(self) -> int:
        return 0

    def launch(self) -> None:
        raise NotImplementedError

    def read_token(self) -> int:
        raise NotImplementedError

    def final_position(self) -> int:
        """Where the decoder's state says the next token goes: the position buffer (a graph that did
        not advance would show here), or the cache length for the dynamic cache."""
        return int(self.position.item())

    def close(self) -> None:
        """Let go of what outlives the process's own memory (an engine's process): nothing by default."""

    def arm_record(self) -> dict:
        """The optional parts, as the arm's record names them."""
        out = {}
        if self.layers is not None:
            out["layers_per_step"] = self.layers
        if self.compile_s is not None:  # compiled, fused: the compile, outside every sample
            out.update(compile_s=self.compile_s, compile_cache=self.compile_cache)
        if self.step_info is not None:  # fused: its backend and kernels' launch shapes
            out["fused_step"] = self.step_info
        if self.logit_check is not None:
            out["logit_check"] = self.logit_check
        return out


def cache_kwarg(model) -> str:
    """transformers renamed `past_key_values` to `cache` (5.2x); pass whichever forward takes."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class EagerDecoder(Decoder):
    mode = "eager"

    def __init__(self, model, max_cache_len: int):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.kw = cache_kwarg(model)
        self.next_token = None

    def _forward(self, input_ids, **extra):
        out = self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **{self.kw: self.cache}, **extra)
        return out.logits[:, -1:].argmax(-1)

    def prefill(self, input_ids) -> None:
        self.next_token = self._forward(input_ids)

    def prepare(self) -> int:
        return 0

    def launch(self) -> None:
        self.next_token = self._forward(self.next_token)

    def read_token(self) -> int:
        return int(self.next_token.item())

    def final_position(self) -> int:
        return int(self.cache.get_seq_length())


class StaticDecoder(Decoder):
    """StaticCache with fixed input buffers; the step mutates them in place so that it can be
    captured as a CUDA graph (GraphedDecoder) or launched op by op (this class)."""

    mode = "static"

    def __init__(self, model, max_cache_len: int):
        import torch
        from transformers import StaticCache

        self.model = model
        self.max_cache_len = max_cache_len
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
        self.kw = cache_kwarg(model)
        device = model.device
        self.token = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=device)

    def prefill(self, input_ids) -> None:
        import torch

        ctx = input_ids.shape[1]
        if ctx >= self.max_cache_len:
            raise ValueError(f"prefill of {ctx} tokens does not fit a static cache of {self.max_cache_len}")
        positions = torch.arange(ctx, device=input_ids.device).unsqueeze(0)
        out = self.model(
            input_ids=input_ids, position_ids=positions, use_cache=True, logits_to_keep=1, **{self.kw: self.cache}
        )
        self.token.copy_(out.logits[:, -1:].argmax(-1))
        self.position.fill_(ctx)

    def _step(self) -> None:
        # Everything on the device and in place: the new token becomes the next step's input and
        # the position advances, so a captured graph replays a whole streaming step.
        out = self.model(
            input_ids=self.token, position_ids=self.position, use_cache=True, logits_to_keep=1, **{self.kw: self.cache}
        )
        self.token.copy_(out.logits[:, -1:].argmax(-1))
        self.position.add_(1)

    def prepare(self) -> int:
        return 0

    def launch(self) -> None:
        self._step()

    def read_token(self) -> int:
        return int(self.token.item())


def capture_graph(step, warmup_steps: int):
    """`step` captured as one CUDA graph, after `warmup_steps` real calls of it on a side stream (as
    torch.cuda.graph asks: allocations and lazy initialisation happen outside the capture)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_steps):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    return graph


class GraphedDecoder(StaticDecoder):
    mode = "graphed"
    capture_warmup_steps = 3  # eager steps on a side stream before capture, as torch.cuda.graph asks

    def __init__(self, model, max_cache_len: int):
        if model.device.type != "cuda":
            raise CellNotPossible(f"mode graphed needs CUDA graphs; device {model.device.type} has none")
        super().__init__(model, max_cache_len)
        self.graph = None

    def prepare(self) -> int:
        # The warm-up steps are real decode steps (the cache and position advance), so the state
        # the graph starts from is simply the state after them.
        self.graph = capture_graph(self._step, self.capture_warmup_steps)
        return self.capture_warmup_steps

    def launch(self) -> None:
        self.graph.replay()


def compile_step(fn):
    """`fn` under torch.compile, one whole graph of fixed shapes (a break or a recompile would put host
    work back into the step); an Inductor that cannot trace it makes the cell impossible, with why."""
    import torch

    return torch.compile(fn, fullgraph=True, dynamic=False)


class _CompiledCapture(Decoder):
    """Compile a step function, run it once to compile (timed as `compile_s`), then capture it as
    one CUDA graph (on CUDA) after warm-up steps; prepare() returns every real step it took."""

    capture_warmup_steps = 2
    jit_s = 0.0  # compile seconds spent before prepare's first call (the fused kernels' JIT), added to compile_s

    def prepare(self) -> int:
        return self._compile_and_capture(self._compiled)

    def _compile_and_capture(self, step) -> int:
        import torch

        from torch._dynamo.utils import counters  # Inductor's own cache counters: was the compile a cache hit

        before = dict(counters["inductor"])
        t = time.perf_counter()
        try:
            step()  # the first call traces and compiles
        except Exception as exc:  # noqa: BLE001 - Dynamo's and Inductor's errors: the cell is not possible
            if type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
                raise CellNotPossible(f"torch.compile cannot compile the {self.mode} step: {type(exc).__name__}: "
                                      f"{str(exc).splitlines()[0][:300] if str(exc) else ''}") from exc
            raise
        if self.device_type == "cuda":
            torch.cuda.synchronize()
        self.compile_s = self.jit_s + time.perf_counter() - t
        # how much of the compile the machine's caches spared (compile_s differs tenfold between a cold
        # and a warm cache): Inductor's FX-graph cache lookups during this first call
        self.compile_cache = {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
        if self.device_type != "cuda":
            return 1
        self.graph = capture_graph(step, self.capture_warmup_steps)
        return 1 + self.capture_warmup_steps

    def launch(self) -> None:
        if self.graph is None:
            self._compiled()
        else:
            self.graph.replay()


class CompiledDecoder(_CompiledCapture, StaticDecoder):
    mode = "compiled"

    def __init__(self, model, max_cache_len: int):
        super().__init__(model, max_cache_len)
        self.device_type = model.device.type
        self.graph, self.compile_s, self.compile_cache = None, None, None
        self._compiled = compile_step(self._step)


class FusedDecoder(_CompiledCapture):
    """The fused step (decodegap.measure.fused.FusedModel, built from the dense model before the
    weight path packed it) with the same buffers as the static modes: token and position on the
    device, advanced in place by each step. Backend triton's step is already its kernels: it is
    captured as it is, and `compile_s` is its kernels' Triton JIT (their first launch, timed in the
    constructor) plus prepare's first call; backend torch's step goes through torch.compile first.

    prepare() first checks the step's logits on the session's own prompt (decodegap.measure.fused.
    logit_check: its prefill, then a few decode steps, against a float32 reference beside the
    transformers model's own), then prefills that prompt again, so the timed steps start from the
    session's prefill and not from the check's steps."""

    mode = "fused"
    own_attention = True  # its own decode attention: no kernel of the cell's attention path is expected in a step

    @classmethod
    def from_dense(cls, model, weights, max_cache_len: int, launch_shapes=None):
        """The fused model, from the dense weights before the path packs them (it packs its joined
        layers with the same path itself); `launch_shapes` as FusedModel's gemv_configs takes them
        (tune_launch_shapes' dict, as an environment record would keep it)."""
        from decodegap.measure.fused import FusedModel

        return FusedModel(model, weights, max_cache_len, gemv_configs=launch_shapes)

    def __init__(self, model, max_cache_len: int, net=None):
        import torch

        if net is None:
            raise ValueError("mode fused needs the fused model (decodegap.measure.fused.FusedModel) of this model")
        self.model, self.net, self.device_type = model, net, net.device.type
        self.graph, self.compile_s, self.compile_cache = None, None, None
        self.step_info = net.describe()
        self.token = torch.zeros((1,), dtype=torch.long, device=net.device)
        self.position = torch.zeros((1,), dtype=torch.long, device=net.device)
        self._prompt = None
        if net.backend == "triton":  # Triton compiles a kernel at its first launch: time that here, before the check launches them
            t = time.perf_counter()
            net.decode(self.token, self.position)  # token 0 at position 0: the prefill rewrites that slot
            if self.device_type == "cuda":
                torch.cuda.synchronize()
            self.jit_s = time.perf_counter() - t
        self._compiled = self._step if net.backend == "triton" else compile_step(self._step)

    def prefill(self, input_ids) -> None:
        import torch

        ctx = input_ids.shape[1]
        if ctx >= self.net.max_cache_len:
            raise ValueError(f"prefill of {ctx} tokens does not fit a static cache of {self.net.max_cache_len}")
        logits = self.net.forward(input_ids[0], torch.arange(ctx, device=input_ids.device))
        self.token.copy_(logits.argmax(-1))
        self.position.fill_(ctx)
        self._prompt = input_ids

    def prepare(self) -> int:
        from decodegap.measure.fused import logit_check

        if self._prompt is None:
            raise RuntimeError("mode fused: prefill before prepare (the logit check runs on the session's prompt)")
        self.logit_check = logit_check(self.model, self.net, self._prompt)
        check = self.logit_check
        if not check["agrees"]:
            raise CellNotPossible(f"the fused step's logits differ from a float32 reference by {check['rel_l2_max']:.3g} (relative "
                                  f"L2), more than {check['ratio_tolerance']} x the transformers model's own "
                                  f"{check['transformers_rel_l2_max']:.3g} + {check['abs_floor']}")
        self.prefill(self._prompt)  # the check decoded past the prompt: start from the session's own prefill again
        self._prompt = None
        return super().prepare()

    def _step(self) -> None:
        logits = self.net.decode(self.token, self.position)
        self.token.copy_(logits.argmax(-1))
        self.position.add_(1)

    def read_token(self) -> int:
        return int(self.token.item())


class _StepClock:
    """A `generate` streamer that times each step as the loop runs it: from one put (a token on the
    host, generate's own read-back) to the next, the host probes and block probes run between puts
    and outside the times. put #0 is the prompt, put #1 the prefill's token, then one per decode step."""

    def __init__(self, plan: list, probe_iterations: int, block_probe):
        from decodegap.measure.timing import cpu_probe_ms

        self.plan = plan  # per decode step: (timer, block index or None)
        self.probe = (lambda: cpu_probe_ms(probe_iterations)) if probe_iterations else (lambda: None)
        self.block_probe = block_probe
        self.block_probe_ms: list[float] = []
        self.puts = 0
        self.t_ns = self.c_ns = 0
        self.before = None

    def put(self, value) -> None:
        t_ns, c_ns = time.perf_counter_ns(), time.thread_time_ns()
        step = self.puts - 2
        self.puts += 1
        if 0 <= step < len(self.plan):
            timer, block = self.plan[step]
            timer.add(t_ns - self.t_ns, c_ns - self.c_ns, int(value.reshape(-1)[-1]), self.before, self.probe())
        nxt = step + 1
        if 0 <= nxt < len(self.plan):  # untimed: the next block's reading of the host core, the next step's probe
            if self.plan[nxt][1] is not None and (nxt == 0 or self.plan[nxt - 1][1] != self.plan[nxt][1]):
                self.block_probe_ms.append(self.block_probe())
            self.before = self.probe()
        self.t_ns, self.c_ns = time.perf_counter_ns(), time.thread_time_ns()

    def end(self) -> None:
        pass


class GenerateDecoder(Decoder):
    """transformers' `generate` with a static cache, greedy, as its documentation's fast path runs it
    (one StaticCache of the cell's positions, handed to every call).
    The engine owns the decode loop: `run` does the warm-up and timed steps in one generate call
    (prefill, then one step per token, each read back by generate itself), timed by _StepClock.
    Before that, `prepare` makes one call that compiles what generate compiles and measures the
    per-token time from two generation lengths (end to end, as benchmarks/floor_chase.py does)."""

    mode = "generate"
    owns_loop = True
    device_clock = False
    profiled = False
    TWO_LENGTHS = (8, 40)  # new tokens of the short and long call: ms/token = (t_long - t_short) / 32
    REPEATS = 3

    def __init__(self, model, max_cache_len: int):
        self.model = model
        self.max_cache_len = max_cache_len
        self.input_ids = None
        self.two_lengths = None
        self.first_call_s = None
        self.cache = None

    def _generate(self, new_tokens: int, streamer=None) -> None:
        import copy

        import torch

        from transformers import StaticCache

        cfg = copy.deepcopy(self.model.generation_config)
        # greedy, exactly new_tokens tokens: no end-of-sequence stop, no sampling processors
        cfg.update(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=None, eos_token_id=None,
                   pad_token_id=0, temperature=None, top_p=None, top_k=None)
        if self.input_ids.shape[1] + new_tokens > self.max_cache_len:
            raise ValueError(f"{self.input_ids.shape[1]} + {new_tokens} tokens do not fit the cell's {self.max_cache_len} positions")
        # One static cache of the cell's size for every call, emptied before each: with
        # cache_implementation="static" generate would size a cache per call (prompt + new tokens),
        # so each length would compile its own step and attend over a different cache length.
        if self.cache is None:
            self.cache = StaticCache(config=self.model.config, max_cache_len=self.max_cache_len)
        self.cache.reset()
        with torch.inference_mode():
            self.model.generate(self.input_ids, attention_mask=torch.ones_like(self.input_ids), generation_config=cfg,
                                streamer=streamer, **{cache_kwarg(self.model): self.cache})

    def prefill(self, input_ids) -> None:
        """generate prefills in every call; this one call (one new token) is the arm's prefill."""
        self.input_ids = input_ids
        self._generate(1)

    def prepare(self) -> int:
        import statistics

        t = time.perf_counter()
        self._generate(self.TWO_LENGTHS[0])  # the first decoding call: generate compiles here (CUDA)
        self.first_call_s = time.perf_counter() - t
        times = {n: [] for n in self.TWO_LENGTHS}
        for _ in range(self.REPEATS):
            for n in self.TWO_LENGTHS:
                t = time.perf_counter_ns()
                self._generate(n)
                times[n].append((time.perf_counter_ns() - t) / 1e6)
        short, long_ = self.TWO_LENGTHS
        per_token = (statistics.median(times[long_]) - statistics.median(times[short])) / (long_ - short)
        self.two_lengths = {"new_tokens": list(self.TWO_LENGTHS), "call_ms": {str(n): v for n, v in times.items()},
                            "ms_per_token": per_token}
        return 0  # each call starts over from the prompt: no step of these counts towards the timed call's positions

    def run(self, warm, timed, block_steps: int, block_probe) -> tuple[list[float], list[int]]:
        """The warm-up steps into `warm` and the timed ones into `timed`, in blocks of `block_steps`,
        all in one generate call; returns the host probe before each block and each step's block."""
        n_timed = timed.capacity
        plan = [(warm, None)] * warm.capacity + [(timed, i // block_steps) for i in range(n_timed)]
        clock = _StepClock(plan, timed.probe_iterations, block_probe)
        self._generate(len(plan) + 1, streamer=clock)  # +1: the prefill's token
        return clock.block_probe_ms, [i // block_steps for i in range(n_timed)]

    def final_position(self) -> int:
        """Where the next token goes after the last call, as the cache generate filled says: the
        prompt plus every token fed back (a generate that sized a cache of its own leaves ours empty)."""
        return int(self.cache.get_seq_length())

    def arm_record(self) -> dict:
        return {**super().arm_record(), "engine": {"loop": "transformers generate (static cache, greedy)",
                                                  "first_call_s": self.first_call_s, "two_lengths": self.two_lengths}}


MODES = {"eager": EagerDecoder, "static": StaticDecoder, "graphed": GraphedDecoder, "compiled": CompiledDecoder,
         "fused": FusedDecoder, "generate": GenerateDecoder,
         "llamacpp": None}  # built by the session from the card's GGUF file (decodegap.measure.engines.llamacpp), no transformers model
assert tuple(MODES) == MODE_NAMES, "decodegap.core.cells.MODE_NAMES lists the modes the analysis knows"


def pack(model, weights, arm_modes, max_cache_len: int, launch_shapes=None):
    """The model as the weight path stores it, and what each mode built from the dense weights first
    (Decoder.from_dense; `launch_shapes` for the fused kernels, None: the GPU's table), for make_decoder."""
    dense = {mode: MODES[mode].from_dense(model, weights, max_cache_len, launch_shapes) for mode in arm_modes}
    return weights.prepare(model), dense


def make_decoder(mode: str, model, max_cache_len: int, from_dense=None):
    """The decoder of one mode on `model`; `from_dense`: what the mode built before packing (pack())."""
    if from_dense is not None:
        return MODES[mode](model, max_cache_len, from_dense)
    return MODES[mode](model, max_cache_len)
