"""fa2: FlashAttention-2's decode call (flash_attn_with_kvcache)."""

from decodegap.measure.attention.base import NO_WHEEL, AttentionPath, KernelFamily, flash_layer_call, register_flash

PATH = AttentionPath(
    "fa2", "decodegap-fa2", lambda: flash_layer_call(PATH), package="flash-attn", module="flash_attn",
    # flash-attn's own namespace; PyTorch's copy is pytorch_flash::
    kernels=(KernelFamily("fa2", r"(?<!pytorch_)flash::flash_fwd", order=55),), families=("fa2",),
    layout="bshd", cuda_only=True, min_capability=(8, 0), register_with_transformers=register_flash,
    install=f"{NO_WHEEL}: flash-attn 2.8.3.post2 is published as source only, and its build compiles 72 CUDA units "
            "for sm_90, about 4.5 CPU-minutes each (one measured: 268 s), some 5 CPU-hours in all: longer than a "
            "lent GPU's device budget (envs/README.md gives the build for a cluster)")
