"""gguf-f16: llama.cpp's f16 GGUF format, which only the mode llamacpp reads (llama.cpp's own
kernels; decodegap.measure.engines.llamacpp writes the card's file).
The bytes a step reads are counted from the file."""

from __future__ import annotations

from decodegap.measure.weights._gguf import GgufFormat

ENGINE = "llamacpp"  # decodegap.core.registry reads this: a format of that engine, never a transformers model's path

PATH = GgufFormat("f16")
