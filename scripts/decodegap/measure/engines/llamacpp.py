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
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from pathlib import Path

from decodegap.measure.modes import Decoder
from decodegap.measure.weights.base import WeightPath

# llama.cpp's file types (llama.h, enum llama_ftype) by the name decodegap gives the format
FORMATS = {"f16": 1, "q8_0": 7, "q4_0": 2, "q4_k_m": 15}
QUANTIZED = ("q8_0", "q4_0", "q4_k_m")
# bytes per weight of a format's matrices, for sizing the cache before writing (q4_k_m mixes q4_K and q6_K)
APPROX_BYTES_PER_WEIGHT = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_k_m": 0.61}
GGUF_DIR_VARIABLE = "DECODEGAP_GGUF_DIR"  # where a machine keeps the cards' GGUF files (a cache: remade on demand)
GGUF_SEED = 0  # the random weights of every GGUF file (step time depends on shapes and format, not values)
INSTALL = "llama-cpp-python==0.3.36 built from its source distribution (envs/README.md: llama.cpp)"


def _lib():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError("llama.cpp's engine needs llama-cpp-python built from source (envs/README.md: llama.cpp)") from exc
    return llama_cpp


def build_info() -> dict:
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


def _make_room(directory: Path, keep: set[str], need_bytes: float, log) -> None:
    """Delete the cache's other GGUF files, oldest first, until `need_bytes` fit with 2 GB to spare:
    a 7-8B card's three formats are about 30 GB, and a lent GPU's disk holds two cards' at most."""
    import shutil

    others = sorted((p for p in directory.glob("*.gguf") if p.name not in keep), key=lambda p: p.stat().st_mtime)
    while shutil.disk_usage(directory).free < need_bytes + 2e9 and others:
        victim = others.pop(0)
        log(f"gguf cache: removing {victim.name} ({victim.stat().st_size / 1e9:.1f} GB) to make room")
        victim.unlink()


def gguf_for(card, fmt: str, device: str = "cpu", log=None) -> dict:
    """The card's GGUF file in format `fmt` from this machine's cache (gguf_dir()), made if absent:
    the f16 file written from the card with random weights (seed GGUF_SEED, drawn on `device`), the
    other formats quantized from it by llama.cpp's own quantizer. One process makes a file at a time
    (a lock file); returns the path, how it was had and its bytes as the file holds them."""
    import fcntl

    from decodegap.measure.engines.gguf_file import stored_bytes, tensor_specs, write_gguf

    say = log or (lambda msg: None)
    if fmt not in FORMATS:
        raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(FORMATS)}")
    directory = gguf_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path, f16 = directory / f"{card.key}-{fmt}.gguf", directory / f"{card.key}-f16.gguf"
    made: dict = {}
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            params = sum(int(__import__("math").prod(shape)) for _, shape, _ in tensor_specs(card))
            need = (0 if f16.exists() else 2 * params) + (0 if fmt == "f16" else APPROX_BYTES_PER_WEIGHT[fmt] * params)
            _make_room(directory, {path.name, f16.name}, need, say)
            if not f16.exists():
                made["write"] = write_gguf(card, f16, seed=GGUF_SEED, device=device, log=say)
            if fmt != "f16":
                t = time.perf_counter()
                quantize(f16, path, fmt)
                made["quantize_s"] = round(time.perf_counter() - t, 2)
                say(f"gguf: quantized {f16.name} to {fmt} in {made['quantize_s']:.1f} s")
            os.utime(path)
    return {"path": path.as_posix(), "format": fmt, "seed": GGUF_SEED, "made_in_session": made or None, **stored_bytes(path)}


class GgufFormat(WeightPath):
    """A weight path that is one of llama.cpp's own file formats: the mode llamacpp reads the card's
    GGUF file in it (gguf_for), and no transformers model runs it. A unit file per format
    (decodegap/measure/weights/gguf_*.py) holds one, with `ENGINE = "llamacpp"` for the config."""

    package = "llama-cpp-python"
    module = "llama_cpp"
    install = INSTALL
    engine = "llamacpp"

    def __init__(self, fmt: str):
        if fmt not in FORMATS:
            raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(FORMATS)}")
        self.format, self.name = fmt, "gguf-" + fmt.replace("_", "-")

    def check(self, device: str) -> str | None:
        """The environment stage's check: llama.cpp here loads a tiny card's file in this format
        (on the GPU, every layer offloaded), and greedy decode runs with finite logits, one position a step."""
        import math
        import tempfile

        why = self.unavailable(device)
        if why:
            return why
        info = build_info()
        if device == "cuda" and not info["gpu_offload"]:
            return f"llama.cpp here has no GPU backend (built without CUDA; system info: {info['system_info'][:160]}); {INSTALL}"
        from decodegap.core.config import load_models
        from decodegap.measure.engines.gguf_file import write_gguf

        card = load_models()["tiny-llama"]
        with tempfile.TemporaryDirectory() as tmp:
            src = write_gguf(card, Path(tmp) / "f16.gguf", seed=0)["path"]
            path = src
            if self.format != "f16":
                path = Path(tmp) / f"{self.format}.gguf"
                quantize(src, path, self.format)
            dec = LlamaCppDecoder(path, 64)
            try:
                dec.prefill(list(range(3, 19)))
                for _ in range(4):
                    dec.launch()
                    dec.read_token()
                logits = dec.last_logits()
                if not all(math.isfinite(float(v)) for v in logits):
                    return "llama.cpp's logits are not finite on a tiny card"
                if dec.final_position() != 16 + 4:
                    return f"llama.cpp's cache holds {dec.final_position()} positions after 16 + 4 tokens"
            finally:
                dec.close()
        return None

    def prepare(self, model):
        raise ValueError(f"{self.name} is a file format of llama.cpp: only mode llamacpp runs it")

    def bytes_per_layer(self, n: int, k: int) -> int:
        if self.format == "q4_k_m":
            raise ValueError("q4_k_m mixes q4_K and q6_K by tensor: its bytes come from the file")
        return int(n * k * APPROX_BYTES_PER_WEIGHT[self.format])


def quantize(src, dst, fmt: str, threads: int | None = None) -> None:
    """Write `dst`, the GGUF file `src` in format `fmt` (q8_0, q4_0, q4_k_m), with llama.cpp's own quantizer."""
    L = _lib()
    if fmt not in QUANTIZED:
        raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(QUANTIZED)} (f16 is written directly)")
    if Path(dst).exists():
        raise FileExistsError(f"{dst}: exists; a GGUF file is written once")
    params = L.llama_model_quantize_default_params()
    params.ftype = FORMATS[fmt]
    params.nthread = threads or os.cpu_count() or 1
    partial = Path(str(dst) + ".partial")
    rc = L.llama_model_quantize(str(src).encode(), str(partial).encode(), ctypes.byref(params))
    if rc != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp could not quantize {src} to {fmt} (llama_model_quantize returned {rc})")
    partial.rename(dst)


class LlamaCppDecoder(Decoder):
    """One llama.cpp model and context on a GGUF file: all layers on the GPU where there is one
    (n_gpu_layers -1), flash attention as llama.cpp decides (auto), the prefill in batches of 2048."""

    mode = "llamacpp"
    own_attention = True  # its attention kernels are llama.cpp's, never the cell's attention path
    device_clock = False  # its kernels run on llama.cpp's own CUDA stream: host times (each step read back) only
    profiled = False  # no torch step to profile

    def __init__(self, gguf_path, max_cache_len: int, n_gpu_layers: int = -1, flash_attn: int = -1, threads: int | None = None):
        L = self.L = _lib()
        self.n_gpu_layers, self.flash_attn, self.max_cache_len = n_gpu_layers, flash_attn, max_cache_len
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = n_gpu_layers
        self.model = L.llama_model_load_from_file(str(gguf_path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf_path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = max_cache_len
        cp.n_batch, cp.n_ubatch = 2048, 512
        cp.flash_attn_type = flash_attn
        cp.no_perf = False
        if threads:
            cp.n_threads = cp.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {max_cache_len} positions for {gguf_path}")
        self.sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.sampler, L.llama_sampler_init_greedy())
        self.one = (L.llama_token * 1)()
        self.token = None
        self.n_batch = 2048

    def _decode(self, tokens) -> None:
        rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(tokens, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} (1: no room in the KV cache; <0: an error)")

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

    def arm_record(self) -> dict:
        return {**super().arm_record(), "engine": {"loop": "llama.cpp: llama_decode of one token, then its greedy sampler (llama-cpp-python)",
                                                  "build": build_info(), "gguf": getattr(self, "gguf", None),
                                                  "context": {"n_gpu_layers": self.n_gpu_layers, "flash_attn": self.flash_attn,
                                                              "n_ctx": self.max_cache_len, "n_batch": self.n_batch}}}

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
