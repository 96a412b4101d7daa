"""The packed weight paths' linear layer on the fused kernels (fp8, int4-triton): one PyTorch op and
the module a path packs an nn.Linear into.

`decodegap::packed_linear` is a custom op (torch.library), so torch.compile(fullgraph=True) holds it
as one node of the graph without tracing into Triton, and a CUDA graph captures its launch: the
path composes with the compiled mode as well as the fused one. A batch-1 call (one row) runs the
GEMV kernel (`gemv.linear`); a call with several rows (a prefill, never timed) multiplies by the
dequantized weight instead.
"""

from __future__ import annotations

from typing import Optional

import torch

from decodegap.measure.fused_kernels.common import INT4_GROUP, INT4_WORDS_PER_GROUP
from decodegap.measure.fused_kernels.gemv import WeightOperand, linear
from decodegap.measure.fused_kernels.launch import GemvConfig, gpu_key_of, launch_shapes_for


def dequantize(op: WeightOperand) -> torch.Tensor:
    """The float32 (n, k) weight an operand stands for: weight * scale per row (fp8), (q - zero) *
    scale per group (int4), as stored (dense)."""
    if op.format == "dense":
        return op.weight.float()
    if op.format == "fp8":
        return op.weight.float() * op.scale.float()[:, None]
    n, k = op.n, op.k
    words = op.weight.view(n, k // INT4_GROUP, 1, INT4_WORDS_PER_GROUP)  # row, group, -, word
    shifts = torch.arange(0, 32, 4, device=words.device, dtype=torch.int32).view(1, 1, 8, 1)  # nibble j
    q = ((words >> shifts) & 15).reshape(n, k)  # column 128 g + 16 j + i, as the format places it
    per_column = lambda t: t.float().repeat_interleave(INT4_GROUP, dim=1)  # noqa: E731
    return (q.float() - per_column(op.zero)) * per_column(op.scale)


@torch.library.custom_op("decodegap::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, zero: Optional[torch.Tensor],
                  bias: Optional[torch.Tensor], fmt: str, rows: int, block_k: int, warps: int) -> torch.Tensor:
    op = WeightOperand(fmt, weight, scale, zero)
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] != 1:  # a prefill: many rows through the dequantized weight (never timed)
        return torch.nn.functional.linear(x, dequantize(op).to(x.dtype), bias)
    out = torch.empty(op.n, dtype=x.dtype, device=x.device)
    linear(flat.reshape(-1).contiguous(), op, out, shape=GemvConfig(rows, block_k, warps), bias=bias)
    return out.view(*x.shape[:-1], op.n)


@packed_linear.register_fake
def _(x, weight, scale, zero, bias, fmt, rows, block_k, warps):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _role_of(n: int, k: int) -> str:
    """The fused step's role whose launch shape suits an n x k layer of the transformers step."""
    return "gate_up" if n >= 2 * k else "down" if k >= 2 * n else "o"


class PackedLinear(torch.nn.Module):
    """A linear layer whose weight is stored in a format the fused kernels read (fp8 or int4), as
    buffers named by `weight_buffers` (what the stored bytes count), with the layer's bias."""

    def __init__(self, fmt: str, stored: dict, in_features: int, out_features: int, bias):
        super().__init__()
        self.fmt, self.in_features, self.out_features = fmt, in_features, out_features
        for name, t in stored.items():
            self.register_buffer(name, t)
        self.weight_buffers = tuple(stored)  # weight first, then scale (and zero)
        self.bias = bias
        op = self.operand
        op.validate("PackedLinear", "the packed weight", op.weight.device)
        if (op.n, op.k) != (out_features, in_features):
            raise ValueError(f"PackedLinear: stored weight is {op.n} x {op.k}, the layer {out_features} x {in_features}")
        device = op.weight.device
        self.shape = launch_shapes_for(gpu_key_of(device)).gemv_for(fmt, _role_of(out_features, in_features))

    @property
    def operand(self) -> WeightOperand:
        parts = [getattr(self, n) for n in self.weight_buffers]
        return WeightOperand(self.fmt, *parts)

    def forward(self, x):
        op, s = self.operand, self.shape
        return packed_linear(x, op.weight, op.scale, op.zero, self.bias, self.fmt, s.rows, s.block_k, s.warps)
