"""sdpa-cudnn: SDPA pinned to its CUDNN_ATTENTION backend, so a shape it has no kernel for fails as a recorded
failure instead of falling back."""

from decodegap.measure.attention.base import CUDNN, AttentionPath, sdpa_call

PATH = AttentionPath("sdpa-cudnn", "sdpa", sdpa_call, sdpa_backend="CUDNN_ATTENTION", kernels=(CUDNN,), families=("cudnn",))
