"""What the weight paths that are llama.cpp's own file formats share (decodegap/measure/weights/gguf_*.py,
one unit file per format). Not a unit itself: its name starts with an underscore."""

from __future__ import annotations

from pathlib import Path

from decodegap.core.cells import gguf_quant
from decodegap.measure.engines.llamacpp import APPROX_BYTES_PER_WEIGHT, FORMATS, INSTALL  # torch-free; llama_cpp is never imported here
from decodegap.measure.weights.base import WeightPath


class GgufFormat(WeightPath):
    """A weight path that is one of llama.cpp's own file formats: the mode llamacpp reads the card's
    GGUF file in it (gguf_for), and no transformers model runs it. A unit file per format
    (decodegap/measure/weights/gguf_*.py) holds one, with `ENGINE = "llamacpp"` for the config."""

    package = "llama-cpp-python"
    module = ""  # llama.cpp loads in its own process (decodegap.measure.engines.llamacpp): never imported beside torch
    engine = "llamacpp"
    install = INSTALL

    def __init__(self, fmt: str):
        if fmt not in FORMATS:
            raise ValueError(f"llama.cpp format '{fmt}': one of {', '.join(FORMATS)}")
        self.format, self.name = fmt, gguf_quant(fmt)

    def unavailable(self, device: str) -> str | None:
        """Whether llama-cpp-python is installed, found without importing it (its CUDA build and
        torch's crash in one process: it runs in its own)."""
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
            return f"package not installed: llama_cpp; {INSTALL}"
        return None

    def check(self, device: str) -> str | None:
        """The environment stage's check: llama.cpp here loads a tiny card's file in this format
        (on the GPU, every layer offloaded), and greedy decode runs with finite logits, one position a step."""
        import math
        import tempfile

        why = self.unavailable(device)
        if why:
            return why
        from decodegap.measure.engines.llamacpp import build_info

        info = build_info()
        if device == "cuda" and not info["gpu_offload"]:
            return f"llama.cpp here has no GPU backend (built without CUDA; system info: {info['system_info'][:160]}); {INSTALL}"
        from decodegap.core.config import load_models
        from decodegap.measure.engines.gguf_file import write_gguf
        from decodegap.measure.engines.llamacpp import LlamaCppDecoder, quantize
        from decodegap.measure.timing import StepTimer

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
                dec.run(StepTimer("cpu", 1), StepTimer("cpu", 3), 2)
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
