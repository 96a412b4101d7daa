"""sdpa-math: SDPA pinned to its MATH backend, so a shape it has no kernel for fails as a recorded
failure instead of falling back."""

from decodegap.measure.attention.base import MATH, AttentionPath, sdpa_call

PATH = AttentionPath("sdpa-math", "sdpa", sdpa_call, sdpa_backend="MATH", kernels=(MATH,), families=("math",))
