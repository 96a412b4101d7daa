"""sdpa: PyTorch's SDPA dispatcher picks the backend (transformers' default); any SDPA kernel counts."""

from decodegap.measure.attention.base import AttentionPath, sdpa_call

PATH = AttentionPath("sdpa", "sdpa", sdpa_call)
