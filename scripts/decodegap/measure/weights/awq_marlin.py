"""awq-marlin: AWQ's int4 storage repacked into Marlin's tiles, through vLLM's Marlin kernel."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ's nibble order within an int32 word of eight columns


def pack_awq(w, group_size: int):
    """AWQ's int4 storage (AutoAWQ's GEMM layout): per group of `group_size` input rows an fp scale
    s = (max - min)/15 and an integer zero z = round(-min/s), q = round(w/s + z) in 0..15, w ~ (q - z) * s.
    Returns qweight (int32, K x N/8) and qzeros (int32, K/G x N/8), eight columns per word in AWQ's
    nibble order, and scales (K/G x N, float32)."""
    import torch

    n, k = w.shape
    if k % group_size or n % 8:
        raise ValueError(f"a {n} x {k} weight does not pack to AWQ groups of {group_size} (needs K % {group_size} and N % 8 == 0)")
    g = w.float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = (-lo / scale).round().clamp(0, 15)
    q = (g / scale + zero).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    order = torch.tensor(AWQ_ORDER, device=w.device)
    shifts = 4 * torch.arange(8, dtype=torch.int32, device=w.device)

    def pack(cols):  # rows x N -> rows x N/8: word j, nibble i holds column 8j + AWQ_ORDER[i]
        x = cols.reshape(cols.shape[0], -1, 8)[:, :, order]
        return (x << shifts).sum(-1, dtype=torch.int32)

    qweight = pack(q.t().contiguous())
    qzeros = pack(zero.reshape(n, k // group_size).t().to(torch.int32).contiguous())
    return qweight, qzeros, scale.reshape(n, k // group_size).t().contiguous()


def unpack_awq(qweight, qzeros, scales, group_size: int):
    """The float32 N x K weight AWQ tensors stand for: (q - z) * s."""
    import torch

    shifts = 4 * torch.arange(8, dtype=torch.int32, device=qweight.device)
    undo = torch.argsort(torch.tensor(AWQ_ORDER, device=qweight.device))

    def unpack(words):
        x = (words.unsqueeze(-1) >> shifts) & 15  # rows x N/8 x 8, in AWQ order
        return x[:, :, undo].reshape(words.shape[0], -1)

    q, z = unpack(qweight), unpack(qzeros).repeat_interleave(group_size, 0)
    return ((q - z).float() * scales.float().repeat_interleave(group_size, 0)).t()


MARLIN_SRC = "DECODEGAP_MARLIN_SRC"  # where envs/build_marlin.py laid out the Marlin sources
KU4_ID = 1125899906843648  # vLLM's ScalarType id of kU4 (uint4 with zero points), the b_type the kernels are built for


def marlin_ops():
    """vLLM's Marlin ops, compiled at first use from the sources envs/build_marlin.py lays out
    ($DECODEGAP_MARLIN_SRC, default .whl/marlin in the repository), and the layout helpers beside them."""
    import importlib.util
    import os
    from pathlib import Path

    import torch

    src = Path(os.environ.get(MARLIN_SRC) or Path(__file__).resolve().parents[4] / ".whl" / "marlin")
    if not (src / "bind.cpp").is_file():
        raise ModuleNotFoundError(f"no Marlin sources at {src}: python envs/build_marlin.py <vllm sdist> {src} lays them out")
    if not hasattr(torch.ops, "decodegap_marlin") or not hasattr(torch.ops.decodegap_marlin, "marlin_gemm"):
        from torch.utils.cpp_extension import load

        marlin = src / "csrc" / "quantization" / "marlin"
        sources = [src / "bind.cpp", *(marlin / f for f in ("marlin.cu", "awq_marlin_repack.cu", "gptq_marlin_repack.cu")),
                   *sorted(marlin.glob("sm*_kernel_*.cu"))]
        load(name="decodegap_marlin", sources=[str(p) for p in sources], extra_include_paths=[str(src / "csrc"), str(marlin)],
             extra_cflags=["-O3", "-std=c++17"],
             extra_cuda_cflags=["-O3", "-std=c++17", "-DUSE_CUDA", "-DMARLIN_NAMESPACE_NAME=marlin", "--expt-relaxed-constexpr",
                                "-static-global-template-stub=false"],
             is_python_module=False)
    spec = importlib.util.spec_from_file_location("decodegap_marlin_layout", src / "marlin_layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    return torch.ops.decodegap_marlin, layout


class AwqMarlinWeights(PackedWeights):
    """AWQ-packed int4 (groups of 128, a scale and an integer zero per group) multiplied through a
    Marlin kernel, as vLLM serves AWQ checkpoints on Ampere and newer ("awq_marlin"). AutoAWQ, the
    paper's upstream, is archived and its kernels build for old torch only; the kernel family is
    taken from vLLM's sources, trimmed to the bf16 uint4 group-128 kernels (envs/build_marlin.py)."""

    name = "awq-marlin"
    package = "vllm"  # the sources' origin (envs/build_marlin.py)
    module = "decodegap_marlin"  # compiled by marlin_ops()
    install = "python envs/build_marlin.py <vllm-0.33.0.tar.gz> .whl/marlin (vLLM's Marlin sources, compiled at first use)"
    cuda_only = True
    min_capability = (8, 0)
    group_size = 128

    def load(self):
        marlin_ops()

    def bytes_per_layer(self, n: int, k: int) -> int:
        groups = k // self.group_size  # 4-bit values; a bf16 scale per group and column; 4-bit zeros packed in int32
        return n * k // 2 + groups * n * 2 + groups * n // 2

    def pack(self, linear):
        return _marlin_linear_class()(linear, self.group_size)

    def dense(self, packed, linear):
        return unpack_awq(*pack_awq(linear.weight.detach().float().cpu(), self.group_size), self.group_size)


_MARLIN_WORKSPACE: dict = {}


def _marlin_linear_class():
    import torch

    class _MarlinLinear(torch.nn.Module):
        def __init__(self, linear, group_size: int):
            super().__init__()
            ops, layout = marlin_ops()
            w = linear.weight.detach()
            n, k = w.shape
            self.in_features, self.out_features = k, n
            qweight, qzeros, scales = pack_awq(w, group_size)
            self.register_buffer("qweight", ops.awq_marlin_repack(qweight, k, n, 4, False))  # Marlin's tile order
            self.register_buffer("scales", layout.marlin_permute_scales(scales.to(torch.bfloat16), k, n, group_size))
            self.register_buffer("zeros", layout.awq_to_marlin_zero_points(qzeros, k // group_size, n, 4))
            self.weight_buffers = ("qweight", "scales", "zeros")
            sms = torch.cuda.get_device_properties(w.device).multi_processor_count
            # the kernel's locks, zero, shared by every layer (each call leaves them zero again)
            self.workspace = _MARLIN_WORKSPACE.setdefault(w.device, torch.zeros(sms * 4, dtype=torch.int32, device=w.device))
            self._gemm = ops.marlin_gemm
            self.bias = linear.bias

        def forward(self, x):
            shape = x.shape
            a = x.reshape(-1, self.in_features).contiguous()
            y = self._gemm(a, None, self.qweight, None, self.scales, None, None, self.zeros, self.workspace, KU4_ID,
                           a.shape[0], self.out_features, self.in_features, False, True, False)
            y = y.reshape(*shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y

    return _MarlinLinear


PATH = AwqMarlinWeights()
