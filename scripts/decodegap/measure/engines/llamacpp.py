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
from pathlib import Path

from decodegap.measure.modes import Decoder

# llama.cpp's file types (llama.h, enum llama_ftype) by the name decodegap gives the format
FORMATS = {"f16": 1, "q8_0": 7, "q4_0": 2, "q4_k_m": 15}
QUANTIZED = ("q8_0", "q4_0", "q4_k_m")


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

    def __init__(self, gguf_path, max_cache_len: int, n_gpu_layers: int = -1, flash_attn: int = -1, threads: int | None = None):
        L = self.L = _lib()
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
