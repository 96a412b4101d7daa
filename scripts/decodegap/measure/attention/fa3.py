"""fa3: FlashAttention-3's decode call (Hopper only), from a source build or PyPI's prebuilt fa3-fwd."""

from decodegap.measure.attention.base import AttentionPath, KernelFamily, flash_layer_call, register_flash

PATH = AttentionPath(
    "fa3", "decodegap-fa3", lambda: flash_layer_call(PATH), package="fa3-fwd", requirement="fa3-fwd==0.0.3",
    module="flash_attn_interface|fa3_fwd_interface",
    kernels=(KernelFamily("fa3", r"FlashAttnFwdSm90|flash::enable_sm90", order=20),), families=("fa3",),
    layout="bshd", cuda_only=True, min_capability=(9, 0), max_capability=(9, 0), register_with_transformers=register_flash,
    install="FlashAttention-3 is built from flash-attention's hopper/ source (not on PyPI), or installed as "
            "PyPI's prebuilt forward-only fa3-fwd (CUDA 13, torch's stable ABI)")
