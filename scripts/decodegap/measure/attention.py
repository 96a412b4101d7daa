"""Attention paths: which kernel computes attention in a decode step.

A path is measured two ways (decodegap.measure.layer, and a whole step through the model):

- `layer_call(q, k, v)`: the paper's unit, one decode-shaped call (one query token against a GQA
  KV of the cache's length), on tensors in the path's own `layout`, so no copy is timed with it;
- `attn_implementation`: the name transformers builds the model with. A backend transformers does
  not ship is registered once through its AttentionInterface (`register()`), never by patching.

`sdpa` leaves the choice to PyTorch's SDPA dispatcher (transformers' default); `sdpa-<backend>`
pins one backend, so a backend that has no kernel for the shape fails as a recorded failure. For
every path, `kernel_pattern` says which kernel names prove it ran: the session's profiler pass
checks them, and a path that silently ran another kernel is invalid with that reason
(`fallback_reason`). `unavailable()` says precisely why a path cannot run here (package missing,
no build for this GPU), before anything is timed. Adding a path is one entry in PATHS.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from decodegap.core.errors import CellNotPossible, ConfigError

# Which backend a kernel name belongs to, first match wins: names the dispatcher's actual choice
# (sdpa) and tells a fallback apart. Checked against kernel names seen on the H200 (tests/test_attention.py).
KERNEL_FAMILIES = (
    ("flashinfer", r"flashinfer|SingleDecodeWithKVCache|BatchDecodeWithPagedKVCache"),
    ("fa3", r"FlashAttnFwdSm90|flash::enable_sm90"),
    ("fa4", r"flash_attn.?cute|FlashAttentionForwardSm|kernel_cutlass_kernel_flash"),
    ("cudnn", r"cudnn|fort_native_sdpa|sdpa_sm\d+|fmha_sm\d+"),
    ("flex", r"flex|triton_tem_fused"),
    ("fa2", r"(?<!pytorch_)flash::flash_fwd"),  # flash-attn's own namespace; PyTorch's copy is pytorch_flash::
    ("flash", r"pytorch_flash|flash_fwd"),
    ("efficient", r"fmha_cutlass|efficient_attention|mem_eff"),
    ("math", r"softmax_warp|cunn_SoftMax"),  # SDPA's math backend: aten's softmax between two matmuls
)


def kernel_family(name: str) -> str | None:
    for family, pattern in KERNEL_FAMILIES:
        if re.search(pattern, name, re.IGNORECASE):
            return family
    return None


def attention_kernels(kernel_names) -> dict[str, list[str]]:
    """The attention kernels among a step's kernel names, by family (matmuls, norms and copies
    fall in none)."""
    out: dict[str, list[str]] = {}
    for name in kernel_names:
        fam = kernel_family(name)
        if fam is not None:
            out.setdefault(fam, []).append(name)
    if len(out) > 1:  # a fused kernel ran: a softmax beside it is some other op's, not the math backend
        out.pop("math", None)
    return out


@dataclass(frozen=True)
class AttentionPath:
    name: str
    attn_implementation: str  # transformers' attn_implementation (a registered name for our own)
    sdpa_backend: str | None = None  # name of a torch.nn.attention.SDPBackend member, or None
    package: str = "torch"  # the distribution that ships the kernel: its version goes in the environment record
    module: str = "torch"  # what must import for the path to exist; "a|b": either (the first that imports is used)
    families: tuple[str, ...] = ()  # kernel families that prove it ran (KERNEL_FAMILIES); () = any (the dispatcher)
    layout: str = "bhsd"  # how layer_call wants q/k/v: bhsd (batch, heads, seq, dim) or bshd
    min_capability: tuple[int, int] | None = None  # lowest CUDA compute capability with a build
    max_capability: tuple[int, int] | None = None
    install: str = ""  # how the package is had, for the reason when it is missing
    static_cache: str | None = None  # why the path cannot serve transformers' StaticCache, if it cannot

    def context(self):
        """A context manager under which every step (and a graph capture) must run."""
        if self.sdpa_backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, self.sdpa_backend)])

    def unavailable(self, device: str) -> str | None:
        """Why this path cannot run on this machine at all, or None: its package does not import,
        or it has no build for this GPU. Decided before anything is timed."""
        import importlib

        failures = []
        for module in self.module.split("|"):
            try:
                importlib.import_module(module)
                break
            except Exception as exc:  # noqa: BLE001 - ImportError, or an import that fails inside (a missing .so)
                text = str(exc).strip().splitlines()
                failures.append(f"`import {module}` fails ({type(exc).__name__}: {text[0][:200] if text else ''})")
        else:
            return f"package not installed: {'; '.join(failures)}" + (f"; {self.install}" if self.install else "")
        if self.name in ("fa2", "fa3", "fa4", "flashinfer", "flex") and device != "cuda":
            return f"{self.name} has CUDA kernels only; device {device}"
        if device == "cuda" and (self.min_capability or self.max_capability):
            import torch

            cap = torch.cuda.get_device_capability()
            lo, hi = self.min_capability or (0, 0), self.max_capability or (99, 99)
            if not lo <= cap <= hi:
                return (f"no build for sm_{cap[0]}{cap[1]}: {self.name} runs on compute capability "
                        f"{lo[0]}.{lo[1]}" + (f" to {hi[0]}.{hi[1]}" if self.max_capability else " and newer"))
        return None

    def register(self) -> None:
        """Make attn_implementation known to transformers (our own functions only)."""
        if self.name == "flashinfer":
            _register_flashinfer()
        elif self.name in ("fa2", "fa3", "fa4"):
            _register_flash(self)

    def layer_call(self):
        """fn(q, k, v) -> attention output for one decode-shaped call, q of one token, k/v of the
        whole cache, GQA (fewer KV heads than query heads), tensors in `layout`."""
        return _LAYER_CALLS[self.name if self.name in _LAYER_CALLS else "sdpa"]()

    def fallback_reason(self, kernel_names) -> str | None:
        """Why a measurement with these kernels is not a measurement of this path, or None."""
        names = list(kernel_names)
        found = attention_kernels(names)
        if not self.families:
            return None if found else "no attention kernel seen in the profiled steps"
        ours = [f for f in found if f in self.families]
        if ours:
            return None
        seen = ", ".join(f"{f} ({found[f][0][:80]})" for f in found) or "no attention kernel"
        return f"fell back: {self.name} should run a {'/'.join(self.families)} kernel, the profiled steps ran {seen}"


def _sdpa_call():
    import torch.nn.functional as F

    def call(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return call


def _flex_call():
    """The bare compiled call, flex_attention(q, k, v) with no block mask: each call builds its
    default mask (a few small kernels beside the template), as such a call does; transformers'
    whole step builds one BlockMask per step and passes it to every layer."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)  # flex is a template: it runs compiled or not at all

    def call(q, k, v):
        return compiled(q, k, v, enable_gqa=True)

    return call


def _first_module(spec: str):
    import importlib

    for name in spec.split("|"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {spec.replace('|', ', ')} imports")


def flash_decode(name: str, fa, q, k, v, seqlens=None, scale=None):
    """FlashAttention's decode call, each version's own: FA2 and FA3 through flash_attn_with_kvcache
    (their decode entry: it splits the KV over the GPU's SMs on its own, num_splits=0, where
    flash_attn_func would run one split, a handful of CTAs at batch 1), with the valid length when
    given; FA4, which has no such call, through flash_attn_func, or flash_attn_varlen_func with
    seqused_k for a valid length (its Hopper kernel has no split-KV)."""
    if name in ("fa2", "fa3"):
        out = fa.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, softmax_scale=scale)
    elif seqlens is None:
        out = fa.flash_attn_func(q, k, v, softmax_scale=scale)
    else:
        out = fa.flash_attn_varlen_func(q, k, v, seqused_k=seqlens, softmax_scale=scale)
    return out[0] if isinstance(out, tuple) else out


def _flash_call(name):
    def make():
        fa = _first_module(PATHS[name].module)
        return lambda q, k, v: flash_decode(name, fa, q, k, v)

    return make


def _flashinfer_call():
    import flashinfer

    def call(q, k, v):  # bhsd with batch 1: q[0, :, 0] is (heads, dim), k[0] is (kv heads, seq, dim): HND
        return flashinfer.single_decode_with_kv_cache(q[0, :, 0], k[0], v[0], kv_layout="HND")

    return call


_LAYER_CALLS = {"sdpa": _sdpa_call, "flex": _flex_call, "fa2": _flash_call("fa2"), "fa3": _flash_call("fa3"),
                "fa4": _flash_call("fa4"), "flashinfer": _flashinfer_call}

FLASHINFER_STATIC = ("FlashInfer's decode kernel takes the whole KV as given, with no length or mask, and transformers' "
                     "StaticCache hands every layer its preallocated max_cache_len buffer, unfilled tail included; its paged "
                     "wrapper needs a host-side plan() each step, which no step captured as one graph can hold")


def _register_flashinfer() -> None:
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


def _register_flash(path) -> None:
    """`decodegap-<fa2|fa3|fa4>` for transformers: FlashAttention's own decode calls from whichever
    of the path's packages imports (FlashAttention-3 ships as flash_attn_interface when built from
    source and as fa3_fwd_interface in PyPI's prebuilt fa3-fwd), through flash_decode: on the
    dynamic cache every key; on the static cache the valid length read on the device from the mask
    (no host sync, so the step still captures as one graph). Prefill (never timed): SDPA."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def flash_decode_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        import torch

        if query.shape[0] != 1 or query.shape[2] != 1:
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        fa = _first_module(path.module)
        q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # (batch, seq, heads, dim) views, last dim contiguous
        # every key valid (the dynamic cache), or the static cache's valid prefix, counted on the device
        seqlens = None if attention_mask is None else attention_mask.reshape(-1).sum(dtype=torch.int32).reshape(1)
        return flash_decode(path.name, fa, q, k, v, seqlens, scaling), None

    AttentionInterface.register(path.attn_implementation, flash_decode_forward)
    AttentionMaskInterface.register(path.attn_implementation, sdpa_mask)


NO_WHEEL = "PyPI has no wheel for this torch, CUDA and Python"
PATHS = {
    "sdpa": AttentionPath("sdpa", "sdpa"),
    "sdpa-flash": AttentionPath("sdpa-flash", "sdpa", "FLASH_ATTENTION", families=("flash",)),
    "sdpa-cudnn": AttentionPath("sdpa-cudnn", "sdpa", "CUDNN_ATTENTION", families=("cudnn",)),
    "sdpa-efficient": AttentionPath("sdpa-efficient", "sdpa", "EFFICIENT_ATTENTION", families=("efficient",)),
    "sdpa-math": AttentionPath("sdpa-math", "sdpa", "MATH", families=("math",)),
    "flex": AttentionPath("flex", "flex_attention", families=("flex",)),
    "fa2": AttentionPath("fa2", "decodegap-fa2", package="flash-attn", module="flash_attn", families=("fa2",),
                         layout="bshd", min_capability=(8, 0),
                         install=f"{NO_WHEEL}: flash-attn 2.8.3.post2 is published as source only, and its build compiles 72 CUDA units "
                                 "for sm_90, about 4.5 CPU-minutes each (one measured: 268 s), some 5 CPU-hours in all: longer than a "
                                 "lent GPU's device budget (envs/README.md gives the build for a cluster)"),
    "fa3": AttentionPath("fa3", "decodegap-fa3", package="fa3-fwd", module="flash_attn_interface|fa3_fwd_interface", families=("fa3",),
                         layout="bshd", min_capability=(9, 0), max_capability=(9, 0),
                         install="FlashAttention-3 is built from flash-attention's hopper/ source (not on PyPI), or installed as "
                                 "PyPI's prebuilt forward-only fa3-fwd (CUDA 13, torch's stable ABI)"),
    "flashinfer": AttentionPath("flashinfer", "decodegap-finfer", package="flashinfer-python", module="flashinfer",
                                families=("flashinfer",), min_capability=(7, 5), static_cache=FLASHINFER_STATIC,
                                install="pip install flashinfer-python (kernels compile at first use, JIT)"),
    "fa4": AttentionPath("fa4", "decodegap-fa4", package="flash-attn-4", module="flash_attn.cute", families=("fa4",),
                         layout="bshd", min_capability=(9, 0),
                         install="pip install --pre flash-attn-4 (CuTe DSL kernels, compiled at first use); it needs "
                                 "nvidia-cutlass-dsl-libs-cu13 4.8.1, a 91.9 MB wheel around one 193 MB shared library that "
                                 "no trimming shrinks: past a lent GPU's 64 MiB per device call"),
}


def get_attention_path(name: str) -> AttentionPath:
    if name not in PATHS:
        raise ConfigError(f"unknown attn '{name}' (implemented: {', '.join(PATHS)})")
    return PATHS[name]
