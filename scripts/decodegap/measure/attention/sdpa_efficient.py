"""sdpa-efficient: SDPA pinned to its EFFICIENT_ATTENTION backend, so a shape it has no kernel for fails as a recorded
failure instead of falling back."""

from decodegap.measure.attention.base import EFFICIENT, AttentionPath, sdpa_call

PATH = AttentionPath("sdpa-efficient", "sdpa", sdpa_call, sdpa_backend="EFFICIENT_ATTENTION", kernels=(EFFICIENT,), families=("efficient",))
