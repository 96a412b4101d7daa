"""sdpa-flash: SDPA pinned to its FLASH_ATTENTION backend, so a shape it has no kernel for fails as a recorded
failure instead of falling back."""

from decodegap.measure.attention.base import FLASH, AttentionPath, sdpa_call

PATH = AttentionPath("sdpa-flash", "sdpa", sdpa_call, sdpa_backend="FLASH_ATTENTION", kernels=(FLASH,), families=("flash",))
