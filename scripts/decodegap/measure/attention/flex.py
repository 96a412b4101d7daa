"""flex: FlexAttention, compiled (it is a template: it runs compiled or not at all)."""

from decodegap.measure.attention.base import AttentionPath, KernelFamily


def _flex_call():
    """The bare compiled call, flex_attention(q, k, v) with no block mask: each call builds its
    default mask (a few small kernels beside the template), as such a call does; transformers'
    whole step builds one BlockMask per step and passes it to every layer."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)

    def call(q, k, v):
        return compiled(q, k, v, enable_gqa=True)

    return call


PATH = AttentionPath("flex", "flex_attention", _flex_call, kernels=(KernelFamily("flex", r"flex|triton_tem_fused", order=50),),
                     families=("flex",), cuda_only=True)
