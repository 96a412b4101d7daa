"""What every attention path shares: the AttentionPath record a unit fills in, the kernel families
that tell which backend ran, and the decode calls several units use. A path itself is one file
beside this one."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable

from decodegap.core.errors import CellNotPossible  # noqa: F401 - units raise it


@dataclass(frozen=True)
class KernelFamily:
    """Kernel names that belong to one attention backend. `order`: families are tried lowest first
    and the first match wins (FA2's flash::flash_fwd must be told from PyTorch's pytorch_flash::)."""

    name: str
    pattern: str
    order: int = 50

    def matches(self, kernel_name: str) -> bool:
        return re.search(self.pattern, kernel_name, re.IGNORECASE) is not None


@dataclass(frozen=True)
class AttentionPath:
    """One attention path, as its unit declares it.

    A path is measured two ways (decodegap.measure.layer, and a whole step through the model):
    `layer_call()` gives fn(q, k, v), one decode-shaped call (one query token against a GQA KV of
    the cache's length) on tensors in the path's own `layout`, so no copy is timed with it; and
    `attn_implementation` is the name transformers builds the model with (`register()` makes a name
    of our own known to transformers' AttentionInterface, never by patching)."""

    name: str
    attn_implementation: str  # transformers' attn_implementation (a registered name for our own)
    make_layer_call: Callable[[], Callable]  # () -> fn(q, k, v)
    sdpa_backend: str | None = None  # name of a torch.nn.attention.SDPBackend member, or None
    package: str = "torch"  # the distribution that ships the kernel: its version goes in the environment record
    requirement: str | None = None  # its pin (envs/measure-requirements.txt; tests/test_pins.py)
    module: str = "torch"  # what must import for the path to exist; "a|b": either (the first that imports is used)
    kernels: tuple[KernelFamily, ...] = ()  # the kernel families this path's own kernels belong to
    families: tuple[str, ...] = ()  # families that prove it ran; () = any (the dispatcher)
    layout: str = "bhsd"  # how layer_call wants q/k/v: bhsd (batch, heads, seq, dim) or bshd
    cuda_only: bool = False
    min_capability: tuple[int, int] | None = None  # lowest CUDA compute capability with a build
    max_capability: tuple[int, int] | None = None
    install: str = ""  # how the package is had, for the reason when it is missing
    static_cache: str | None = None  # why the path cannot serve transformers' StaticCache, if it cannot
    register_with_transformers: Callable[["AttentionPath"], None] | None = None

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
        if self.cuda_only and device != "cuda":
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
        if self.register_with_transformers is not None:
            self.register_with_transformers(self)

    def layer_call(self):
        """fn(q, k, v) -> attention output for one decode-shaped call, q of one token, k/v of the
        whole cache, GQA (fewer KV heads than query heads), tensors in `layout`."""
        return self.make_layer_call()

    def fallback_reason(self, kernel_names) -> str | None:
        """Why a measurement with these kernels is not a measurement of this path, or None."""
        from decodegap.measure.attention import attention_kernels

        found = attention_kernels(list(kernel_names))
        if not self.families:
            return None if found else "no attention kernel seen in the profiled steps"
        if any(f in self.families for f in found):
            return None
        seen = ", ".join(f"{f} ({found[f][0][:80]})" for f in found) or "no attention kernel"
        return f"fell back: {self.name} should run a {'/'.join(self.families)} kernel, the profiled steps ran {seen}"


def sdpa_call():
    """SDPA's decode call with GQA in the kernel: the dispatcher, or the backend the context pins."""
    import torch.nn.functional as F

    def call(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return call


def first_module(spec: str):
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


def flash_layer_call(path: AttentionPath):
    fa = first_module(path.module)
    return lambda q, k, v: flash_decode(path.name, fa, q, k, v)


def register_flash(path: AttentionPath) -> None:
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
        fa = first_module(path.module)
        q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # (batch, seq, heads, dim) views, last dim contiguous
        # every key valid (the dynamic cache), or the static cache's valid prefix, counted on the device
        seqlens = None if attention_mask is None else attention_mask.reshape(-1).sum(dtype=torch.int32).reshape(1)
        return flash_decode(path.name, fa, q, k, v, seqlens, scaling), None

    AttentionInterface.register(path.attn_implementation, flash_decode_forward)
    AttentionMaskInterface.register(path.attn_implementation, sdpa_mask)


NO_WHEEL = "PyPI has no wheel for this torch, CUDA and Python"

# PyTorch's own SDPA backends' kernels (the sdpa-* units name them; the dispatcher `sdpa` may run any)
FLASH = KernelFamily("flash", r"pytorch_flash|flash_fwd", order=60)
CUDNN = KernelFamily("cudnn", r"cudnn|fort_native_sdpa|sdpa_sm\d+|fmha_sm\d+", order=40)
EFFICIENT = KernelFamily("efficient", r"fmha_cutlass|efficient_attention|mem_eff", order=70)
MATH = KernelFamily("math", r"softmax_warp|cunn_SoftMax", order=90)  # SDPA's math backend: aten's softmax between two matmuls
