"""llama.cpp as a decode engine, through llama-cpp-python's bindings of its C API.

The step is llama.cpp's own decode loop as its examples run it (examples/simple): `llama_decode` of
the one new token (the CUDA backend replays the step from a CUDA graph where its build has them),
then the greedy sampler picks the next token from the logits on the host, which waits for the
device. So it fits the session's Decoder as it is: `launch` is llama_decode, `read_token` the
sampler. The model is a GGUF file (decodegap.measure.engines.gguf_file writes one from a card;
`quantize` makes the 8- and 4-bit formats with llama.cpp's own quantizer); the record keeps the
bindings' version, the build's system info (its CUDA architectures and whether it uses CUDA graphs)
and the file's stored bytes.

llama-cpp-python is built from its source distribution, which carries llama.cpp
(envs/README.md: with CUDA for sm_90 on the lent GPU; here, the CPU build the tests use).

llama.cpp runs in a process of its own, without torch (`python -m decodegap.measure.engines.llamacpp
--serve`, one JSON command a line): its CUDA build and torch's in one process crash (seen on the
H200, 2026-12-01: a segmentation fault loading the model after torch had started CUDA, and importing
torch after llama.cpp had). So that process runs the decode loop too, timing each step as the
session's own timer does, and the session's LlamaCppDecoder hands it the prompt and reads the samples.
`LlamaCppEngine` is the model and context inside it (the tests also use it directly on the CPU).
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import math
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

from decodegap.core.errors import CellNotPossible
from decodegap.measure.modes import Decoder
from decodegap.measure.probe import PROBE_ITERATIONS, cpu_probe_ms

# llama.cpp's file types (llama.h, enum llama_ftype) by the name decodegap gives the format
FORMATS = {"f16": 1, "q8_0": 7, "q4_0": 2, "q4_k_m": 15}
QUANTIZED = ("q8_0", "q4_0", "q4_k_m")
# bytes per weight of a format's matrices, for sizing the cache before writing (q4_k_m mixes q4_K and q6_K)
APPROX_BYTES_PER_WEIGHT = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_k_m": 0.61}
GGUF_DIR_VARIABLE = "DECODEGAP_GGUF_DIR"  # where a machine keeps the cards' GGUF files (a cache: remade on demand)
GGUF_SEED = 0  # the random weights of every GGUF file (step time depends on shapes and format, not values)
INSTALL = "llama-cpp-python==0.3.36 built from its source distribution (envs/README.md: llama.cpp)"


class EngineError(RuntimeError):
    """llama.cpp itself could not: load a file, make a context, decode, quantize."""


def _lib():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError("llama.cpp's engine needs llama-cpp-python built from source (envs/README.md: llama.cpp)") from exc
    return llama_cpp


def build_info() -> dict:
    """build_info_here() in llama.cpp's own process (see the module's docstring)."""
    with Worker() as w:
        return w.call("info")["info"]


def build_info_here() -> dict:
    """What the record keeps of the engine: the bindings' version, llama.cpp's system info (the
    backends it was built with, their features), whether it offloads to a GPU, and whether its CUDA
    backend uses CUDA graphs (built with them, and not switched off by GGML_CUDA_DISABLE_GRAPHS)."""
    L = _lib()
    L.llama_backend_init()
    info = (L.llama_print_system_info() or b"").decode(errors="replace")
    built = re.search(r"USE_GRAPHS\s*=\s*1", info) is not None
    return {"engine": "llama.cpp", "llama_cpp_python": getattr(L, "__version__", None), "system_info": info.strip(),
            "gpu_offload": bool(L.llama_supports_gpu_offload()), "cuda_graphs_built": built,
            "cuda_graphs": built and not os.environ.get("GGML_CUDA_DISABLE_GRAPHS")}


def gguf_dir() -> Path:
    return Path(os.environ.get(GGUF_DIR_VARIABLE) or Path.home() / ".cache" / "decodegap" / "gguf")


CACHE_NAME = re.compile(r"^[\w.]+(?:-[\w.]+)*-(" + "|".join(FORMATS) + r")\.gguf$")  # <card key>-<format>.gguf, nothing else
SPARE_BYTES = 2e9


def _in_use(path: Path) -> bool:
    """Whether a session holds the file (a shared lock on it, hold()): never evicted then."""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def _make_room(directory: Path, keep: set[str], need_bytes: float, log) -> None:
    """Delete the cache's other GGUF files (named <card>-<format>.gguf; anything else is never
    touched), least recently used first and none a session holds, until `need_bytes` fit with 2 GB
    to spare: a 7-8B card's three formats are about 30 GB, and a lent GPU's disk holds two cards' at
    most. If they could not fit even with every such file gone, nothing is deleted: CellNotPossible."""
    for stale in directory.glob("*.gguf.partial"):  # under the cache's lock, nobody is writing one
        log(f"gguf cache: removing {stale.name}, left by a write that did not finish")
        stale.unlink()
    free = shutil.disk_usage(directory).free
    if free >= need_bytes + SPARE_BYTES:
        return
    others = sorted((p for p in directory.glob("*.gguf") if p.name not in keep and CACHE_NAME.match(p.name) and not _in_use(p)),
                    key=lambda p: p.stat().st_mtime)
    if free + sum(p.stat().st_size for p in others) < need_bytes + SPARE_BYTES:
        raise CellNotPossible(f"the GGUF files need {need_bytes / 1e9:.1f} GB and {directory} has {free / 1e9:.1f} GB free, "
                              f"{sum(p.stat().st_size for p in others) / 1e9:.1f} GB more with every cached file no session holds removed")
    while shutil.disk_usage(directory).free < need_bytes + SPARE_BYTES and others:
        victim = others.pop(0)
        log(f"gguf cache: removing {victim.name} ({victim.stat().st_size / 1e9:.1f} GB) to make room")
        victim.unlink()


def hold(path):
    """A shared lock on a cached GGUF file while a session uses it (close the returned file to let
    go): the cache never evicts it meanwhile."""
    f = open(path, "rb")
    fcntl.flock(f, fcntl.LOCK_SH)
    return f


def gguf_for(card, fmt: str, device: str = "cpu", log=None) -> tuple[dict, object]:
    """The card's GGUF file in format `fmt` from this machine's cache (gguf_dir()), made if absent:
    the f16 file written from the card with random weights (seed GGUF_SEED, drawn on `device`), the
    other formats quantized from it by llama.cpp's own quantizer. One process makes a file at a time
    (the cache's lock file). A cached file that is not the card's as this writer makes it
    (gguf_file.identity_problem: another card's, an older writer's, cut short, put there by hand) is
    removed and made again, and the record says why; one that a session holds meanwhile makes the
    cell invalid instead. Returns the path, how it was had and its bytes as the file holds them,
    and the file held (hold()): close it when done with the file."""
    from decodegap.measure.engines.gguf_file import identity, identity_problem, stored_bytes, tensor_specs, write_gguf

    say = log or (lambda msg: None)
    if fmt not in FORMATS:
        raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(FORMATS)}")
    directory = gguf_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path, f16 = directory / f"{card.key}-{fmt}.gguf", directory / f"{card.key}-f16.gguf"
    made: dict = {}
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        def drop_if_foreign(p: Path, ftype: int) -> None:
            problem = identity_problem(p, card, ftype, GGUF_SEED) if p.exists() else None
            if problem is None:
                return
            if _in_use(p):
                raise CellNotPossible(f"{p}: not {card.key}'s {p.name.rsplit('-', 1)[-1]} file as decodegap writes it "
                                      f"({problem}), and a session holds it, so it cannot be made again now")
            say(f"gguf cache: {p.name} is not {card.key}'s file as decodegap writes it ({problem}): making it again")
            p.unlink()
            made.setdefault("replaced", {})[p.name] = problem

        drop_if_foreign(path, FORMATS[fmt])
        if not path.exists() and fmt != "f16":  # the f16 file matters only when the format is to be made from it
            drop_if_foreign(f16, FORMATS["f16"])
        if not path.exists():
            params = sum(math.prod(shape) for _, shape, _ in tensor_specs(card))
            need = (0 if f16.exists() else 2 * params) + (0 if fmt == "f16" else APPROX_BYTES_PER_WEIGHT[fmt] * params)
            _make_room(directory, {path.name, f16.name}, need, say)
            if not f16.exists():
                made["write"] = write_gguf(card, f16, seed=GGUF_SEED, device=device, log=say)
            if fmt != "f16":
                t = time.perf_counter()
                quantize(f16, path, fmt)
                made["quantize_s"] = round(time.perf_counter() - t, 2)
                say(f"gguf: quantized {f16.name} to {fmt} in {made['quantize_s']:.1f} s")
                os.utime(f16)  # used: the least recently used go first
        os.utime(path)
        held = hold(path)  # before the cache's lock is let go: no eviction in between
    return {"path": path.as_posix(), "format": fmt, "seed": GGUF_SEED, "made_in_session": made or None,
            "identity": identity(card, GGUF_SEED), **stored_bytes(path)}, held  # identity: what the file was checked to be


def quantize(src, dst, fmt: str, threads: int | None = None) -> None:
    """Write `dst`, the GGUF file `src` in format `fmt` (q8_0, q4_0, q4_k_m), with llama.cpp's own
    quantizer, in llama.cpp's own process."""
    if fmt not in QUANTIZED:
        raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(QUANTIZED)} (f16 is written directly)")
    if Path(dst).exists():
        raise FileExistsError(f"{dst}: exists; a GGUF file is written once")
    with Worker() as w:
        w.call("quantize", src=str(src), dst=str(dst), fmt=fmt, threads=threads)


def quantize_here(src, dst, fmt: str, threads: int | None = None) -> None:
    """quantize() inside llama.cpp's process, which checked its arguments."""
    L = _lib()
    params = L.llama_model_quantize_default_params()
    params.ftype = FORMATS[fmt]
    params.nthread = threads or os.cpu_count() or 1
    partial = Path(str(dst) + ".partial")
    rc = L.llama_model_quantize(str(src).encode(), str(partial).encode(), ctypes.byref(params))  # a crash leaves the partial: the cache removes it
    if rc != 0:
        partial.unlink(missing_ok=True)
        raise EngineError(f"llama.cpp could not quantize {src} to {fmt} (llama_model_quantize returned {rc})")
    partial.rename(dst)


class LlamaCppEngine:
    """One llama.cpp model and context on a GGUF file: all layers on the GPU where there is one
    (n_gpu_layers -1), flash attention as llama.cpp decides (auto), the prefill in batches of 2048."""

    def __init__(self, gguf_path, max_cache_len: int, n_gpu_layers: int = -1, flash_attn: int = -1, threads: int | None = None):
        L = self.L = _lib()
        self.n_gpu_layers, self.flash_attn, self.max_cache_len = n_gpu_layers, flash_attn, max_cache_len
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = n_gpu_layers
        self.model = L.llama_model_load_from_file(str(gguf_path).encode(), mp)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {gguf_path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = max_cache_len
        cp.n_batch, cp.n_ubatch = 2048, 512
        cp.flash_attn_type = flash_attn
        cp.no_perf = False
        if threads:
            cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise EngineError(f"llama.cpp could not make a context of {max_cache_len} positions for {gguf_path}")
        self.sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.sampler, L.llama_sampler_init_greedy())
        self.one = (L.llama_token * 1)()
        self.token = None
        self.n_batch = 2048

    def _decode(self, tokens) -> None:
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(tokens, len(tokens)))
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc} (1: no room in the KV cache; <0: an error)")

    def prefill(self, input_ids) -> None:
        ids = input_ids.reshape(-1).tolist() if hasattr(input_ids, "reshape") else list(input_ids)
        for i in range(0, len(ids), self.n_batch):
            chunk = ids[i:i + self.n_batch]
            self._decode((self.L.llama_token * len(chunk))(*chunk))
        self.token = self.L.llama_sampler_sample(self.sampler, self.ctx, -1)

    def launch(self) -> None:
        self.one[0] = self.token
        self._decode(self.one)

    def read_token(self) -> int:
        self.token = self.L.llama_sampler_sample(self.sampler, self.ctx, -1)
        return int(self.token)

    def last_logits(self):
        """The logits of the last decoded position, as a float32 numpy array of the vocabulary's size."""
        import numpy as np

        n_vocab = self.L.llama_vocab_n_tokens(self.L.llama_model_get_vocab(self.model))
        return np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, -1), shape=(n_vocab,)).copy()

    def final_position(self) -> int:
        return int(self.L.llama_memory_seq_pos_max(self.L.llama_get_memory(self.ctx), 0)) + 1

    def close(self) -> None:
        if getattr(self, "sampler", None):
            self.L.llama_sampler_free(self.sampler)
            self.sampler = None
        if getattr(self, "ctx", None):
            self.L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            self.L.llama_model_free(self.model)
            self.model = None

    def run_loop(self, n_warm: int, n_timed: int, block_steps: int, probe_iterations: int) -> dict:
        """The warm-up and timed steps as the session's StepTimer takes them: per step its host and
        thread-CPU nanoseconds, its token, the host probes just before and after (untimed), and a
        reading of the host core before each block of timed steps."""
        steps, block_probe_ms = [], []
        gc.collect()
        gc.disable()  # a collection inside the loop would be timed as a slow step
        try:
            for i in range(n_warm + n_timed):
                k = i - n_warm
                if k >= 0 and k % block_steps == 0:
                    block_probe_ms.append(cpu_probe_ms())
                before = cpu_probe_ms(probe_iterations) if probe_iterations else None
                c0 = time.thread_time_ns()
                t0 = time.perf_counter_ns()
                self.launch()
                token = self.read_token()
                host_ns = time.perf_counter_ns() - t0
                cpu_ns = time.thread_time_ns() - c0
                after = cpu_probe_ms(probe_iterations) if probe_iterations else None
                steps.append([host_ns, cpu_ns, token, before, after])
        finally:
            gc.enable()
        return {"steps": steps, "block_probe_ms": block_probe_ms}


class Worker:
    """llama.cpp's own process (no torch in it), driven one JSON command a line; its log goes to
    this process's stderr. A command llama.cpp could not do there, or the process dying, raises
    CellNotPossible here with its message (an invalid cell); a bug in our worker, RuntimeError."""

    def __init__(self):
        # the same interpreter, environment and working directory: it finds the package as this process did
        self.proc = subprocess.Popen([sys.executable, "-m", "decodegap.measure.engines.llamacpp", "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    TIMEOUT_S = 1800.0  # one command (a 16k-token prefill, the loop, a quantization) takes seconds to minutes

    def call(self, op: str, **args) -> dict:
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.TIMEOUT_S)
            if not ready:  # one reply line per command: nothing waits in the pipe's buffer before it
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"llama.cpp's process gave no answer to '{op}' in {self.TIMEOUT_S:.0f} s; it was stopped")
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:  # the engine died (a crash inside llama.cpp): this cell cannot run here, which is data
            rc = self.proc.wait()
            raise CellNotPossible(f"llama.cpp's process ended (exit status {rc}{', a crash' if rc < 0 else ''}) during '{op}'")
        reply = json.loads(line)
        if not reply.get("ok"):
            message = reply.get("error", f"llama.cpp's process failed '{op}'")
            # llama.cpp said it could not (load, make a context, decode, quantize): data; anything else is a bug here
            raise (CellNotPossible if reply.get("engine") else RuntimeError)(message)
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The worker's side: one engine at most, a reply line per command line, until stdin closes."""
    if stdout is sys.stdout:  # the replies get the real stdout; anything else printed goes to stderr
        stdout = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    engine = None
    for line in stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "info":
                out = {"info": build_info_here()}
            elif op == "quantize":
                quantize_here(cmd["src"], cmd["dst"], cmd["fmt"], cmd.get("threads"))
                out = {}
            elif op == "load":
                engine = LlamaCppEngine(cmd["path"], cmd["n_ctx"], threads=cmd.get("threads"))
                out = {"info": build_info_here()}
            elif op == "prefill":
                engine.prefill(cmd["tokens"])
                out = {}
            elif op == "run":
                out = engine.run_loop(cmd["n_warm"], cmd["n_timed"], cmd["block_steps"], cmd["probe_iterations"])
            elif op == "logits":
                out = {"logits": engine.last_logits().tolist()}
            elif op == "position":
                out = {"position": engine.final_position()}
            else:
                raise ValueError(f"unknown command {op!r}")
            reply = {"ok": True, **out}
        except Exception as exc:  # noqa: BLE001 - said to the session, which raises it
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "engine": isinstance(exc, EngineError)}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()
    if engine is not None:
        engine.close()


class LlamaCppDecoder(Decoder):
    """The session's decoder of mode llamacpp: llama.cpp's process with the model loaded, which runs
    the decode loop (llama_decode of one token, then the greedy sampler: the step as llama.cpp's
    examples run it) and times each step there (see the module's docstring)."""

    mode = "llamacpp"
    owns_loop = True  # the steps run (and are timed) in llama.cpp's process
    own_attention = True  # its attention kernels are llama.cpp's, never the cell's attention path
    device_clock = False  # its kernels run on llama.cpp's own CUDA stream: host times (each step read back) only
    profiled = False  # no torch step to profile

    def __init__(self, gguf_path, max_cache_len: int, threads: int | None = None, gguf: dict | None = None):
        self.max_cache_len, self.gguf = max_cache_len, gguf  # gguf: what the record keeps of the file (gguf_for)
        self.worker = Worker()
        try:
            self.info = self.worker.call("load", path=str(gguf_path), n_ctx=max_cache_len, threads=threads)["info"]
        except Exception:
            self.worker.close()
            raise

    def prefill(self, input_ids) -> None:
        ids = input_ids.reshape(-1).tolist() if hasattr(input_ids, "reshape") else list(input_ids)
        self.worker.call("prefill", tokens=[int(t) for t in ids])

    def run(self, warm, timed, block_steps: int, block_probe=None) -> tuple[list[float], list[int]]:
        """The warm-up steps into `warm` and the timed ones into `timed` (StepTimer.add), as llama.cpp's
        process timed them; returns its reading of the host core before each block and each step's block."""
        out = self.worker.call("run", n_warm=warm.capacity, n_timed=timed.capacity, block_steps=block_steps,
                               probe_iterations=timed.probe_iterations)
        for i, (host_ns, cpu_ns, token, before, after) in enumerate(out["steps"]):
            (warm if i < warm.capacity else timed).add(host_ns, cpu_ns, token, before, after)
        return out["block_probe_ms"], [i // block_steps for i in range(timed.capacity)]

    def last_logits(self):
        import numpy as np

        return np.asarray(self.worker.call("logits")["logits"], dtype=np.float32)

    def final_position(self) -> int:
        return int(self.worker.call("position")["position"])

    def arm_record(self) -> dict:
        return {**super().arm_record(), "engine": {"loop": "llama.cpp: llama_decode of one token, then its greedy sampler (llama-cpp-python)",
                                                  "process": "its own, without torch", "build": self.info, "gguf": self.gguf,
                                                  "context": {"n_gpu_layers": -1, "flash_attn": "auto", "n_ctx": self.max_cache_len,
                                                              "n_batch": 2048, "n_ubatch": 512}}}

    def close(self) -> None:
        self.worker.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m decodegap.measure.engines.llamacpp --serve (llama.cpp's process, driven by a session)")
    serve()
