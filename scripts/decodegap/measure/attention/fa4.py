"""fa4: FlashAttention-4 (CuTe DSL kernels), through flash_attn_func (it has no split-KV decode call)."""

from decodegap.measure.attention.base import AttentionPath, KernelFamily, flash_layer_call, register_flash

PATH = AttentionPath(
    "fa4", "decodegap-fa4", lambda: flash_layer_call(PATH), package="flash-attn-4", requirement="flash-attn-4==4.0.0b36",
    module="flash_attn.cute",
    kernels=(KernelFamily("fa4", r"flash_attn.?cute|FlashAttentionForwardSm|kernel_cutlass_kernel_flash", order=30),),
    families=("fa4",), layout="bshd", cuda_only=True, min_capability=(9, 0), register_with_transformers=register_flash,
    install="pip install --pre flash-attn-4 (CuTe DSL kernels, compiled at first use); it needs "
            "nvidia-cutlass-dsl-libs-cu13 4.8.1, a 91.9 MB wheel around one 193 MB shared library that "
            "no trimming shrinks: past a lent GPU's 64 MiB per device call")
