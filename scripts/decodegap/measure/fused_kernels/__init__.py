"""The fused step's Triton kernels: a batch-1 decoder layer in six launches (five with the in-split
combine).

One token's layer reads each weight once and little else, so every launch that is not a weight read
is overhead, and on a graph-replayed step each costs a kernel's start and drain (about 1.4 us on the
H200, `benchmarks/step_model.py`). The kernels fold the small ops into the weight reads:

  gemv       qkv_rope (RMSNorm, joined q/k/v GEMV, bias, RoPE, KV append), linear (o, down, the
             output projection; RMSNorm prologue, residual epilogue), gate_up (RMSNorm, joined
             gate/up GEMV, SiLU x up), add_norm; generic over the weight's storage (dense bf16,
             fp8 with a scale per row, int4 words with a scale and zero per group): WeightOperand
  int4_pairs int4 words against the input as f16 pairs, two weights an instruction (the lever x_pairs)
  fp8_pairs  fp8 weights against the input as f16 halves of x / 16, a word of four at a time (x_pairs for fp8)
  split_attention  decode attention split over the cache's positions (flash decoding) and the combine
  launch     launch shapes keyed by GPU type (LAUNCH_SHAPES), the levers, and `resolve`, which
             turns what a fused model is given into LaunchShapes
  ops        the packed paths' linear layer as one PyTorch op (fp8, int4-triton)
  tune       tune_launch_shapes: the fastest shapes on the GPU at hand, each role timed alone; the
             benches benchmarks use
  tune_step  refine_in_step: each role's shape chosen in the whole captured step (a role's fastest
             alone is not its fastest there)
  common     the legend of the kernels' compile-time names, the wrappers' tensor checks, helpers
  ahead      every kernel compiled for a GPU without one (sm_90): registers, spills, SASS instructions a weight

Arithmetic follows transformers' bf16 roundings where they are visible (the linear's output, the
normalised activation, cos/sin tables in the activations' dtype); sums are float32.
tests/test_fused_kernels.py runs these kernels under Triton's CPU interpreter against float64
references and the transformers model (TRITON_INTERPRET=1, which must be set before anything
imports triton: transformers does, so tests/conftest.py sets it first).
"""

from decodegap.measure.fused_kernels.split_attention import AttentionPlan, attention, attention_scratch  # noqa: F401
from decodegap.measure.fused_kernels.common import pdl_available, prefetch_programs, prefetch_span, usable_here  # noqa: F401
from decodegap.measure.fused_kernels.gemv import HeadLayout, WeightOperand, add_norm, gate_up, linear, qkv_rope  # noqa: F401
from decodegap.measure.fused_kernels.launch import (  # noqa: F401
    FORMATS, GEMV_CONFIGS, L2_AHEAD_AT, LAUNCH_SHAPES, LEVERS_FROM, NORMS, ROLES, AttentionConfig, GemvConfig, LaunchShapes, gpu_key_of, launch_shapes_for,
    resolve, sm_count_of)
from decodegap.measure.fused_kernels.tune import tune_launch_shapes  # noqa: F401
from decodegap.measure.fused_kernels.tune_step import declined_levers, refine_in_step  # noqa: F401
