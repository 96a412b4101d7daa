"""flashinfer: FlashInfer's single-request decode kernel (JIT-built at first use)."""

from decodegap.measure.attention.base import AttentionPath, CellNotPossible, KernelFamily


def _flashinfer_call():
    import flashinfer

    def call(q, k, v):  # bhsd with batch 1: q[0, :, 0] is (heads, dim), k[0] is (kv heads, seq, dim): HND
        return flashinfer.single_decode_with_kv_cache(q[0, :, 0], k[0], v[0], kv_layout="HND")

    return call


FLASHINFER_STATIC = ("FlashInfer's decode kernel takes the whole KV as given, with no length or mask, and transformers' "
                     "StaticCache hands every layer its preallocated max_cache_len buffer, unfilled tail included; its paged "
                     "wrapper needs a host-side plan() each step, which no step captured as one graph can hold")


def _register_flashinfer(path) -> None:
    """`decodegap-finfer` for transformers: FlashInfer's single-request decode kernel for the
    decode steps; the prompt's prefill (never timed) goes through SDPA. (The name must not contain
    "flash": transformers would take it for a flash-attention kernel to fetch from its hub.)"""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # older transformers: no mask interface, every custom function gets no mask
        AttentionMaskInterface = sdpa_mask = None

    def flashinfer_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        import flashinfer

        if query.shape[0] != 1 or query.shape[2] != 1:
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if attention_mask is not None:  # only a static cache's unfilled tail needs a mask at batch-1 decode
            raise CellNotPossible(FLASHINFER_STATIC)
        out = flashinfer.single_decode_with_kv_cache(query[0, :, 0], key[0], value[0], kv_layout="HND", sm_scale=scaling)
        return out.view(1, 1, *out.shape), None  # transformers takes (batch, q_len, heads, dim)

    AttentionInterface.register("decodegap-finfer", flashinfer_attention_forward)
    if AttentionMaskInterface is not None:  # the boolean SDPA mask: None whenever every key is valid
        AttentionMaskInterface.register("decodegap-finfer", sdpa_mask)


PATH = AttentionPath(
    "flashinfer", "decodegap-finfer", _flashinfer_call, package="flashinfer-python", requirement="flashinfer-python==0.7.0.post1",
    module="flashinfer", kernels=(KernelFamily("flashinfer", r"flashinfer|SingleDecodeWithKVCache|BatchDecodeWithPagedKVCache", order=10),),
    families=("flashinfer",), cuda_only=True, min_capability=(7, 5), static_cache=FLASHINFER_STATIC,
    register_with_transformers=_register_flashinfer, install="pip install flashinfer-python (kernels compile at first use, JIT)")
