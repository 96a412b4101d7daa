"""The fused step's Triton kernels (decodegap.measure.fused_kernels) under Triton's CPU interpreter
(tests/conftest.py switches it on before anything imports triton): each kernel against a float64
reference on fresh random inputs with ragged sizes and NaN-poisoned outputs, in every weight storage
format (bf16 as stored, fp8 with a scale per row, int4 words with a scale and zero per group); the
attention at split edges, past poisoned future slots, with each lever, and at long context; the
launch shapes and their checks; and the whole kernel step against the transformers model's logits
on the tiny cards.

The interpreter's tl.dot on bf16 operands is wrong (Triton 3.6 on numpy 2: a 16 x 16 product errs by
1e9), so the attention kernel, the one with tl.dot, is checked at float32 here and in bf16 on the
GPU (benchmarks/floor_limit.py, and every fused session's logit check)."""

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from decodegap.core.config import load_models  # noqa: E402
from decodegap.measure import fused_kernels as fk  # noqa: E402
from decodegap.measure.cards import build_model  # noqa: E402
from decodegap.measure.fused import FusedModel, logit_check  # noqa: E402
from decodegap.measure.fused_kernels.ops import dequantize  # noqa: E402
from decodegap.measure.modes import make_decoder  # noqa: E402
from decodegap.measure.weights import get_weight_path  # noqa: E402
from decodegap.measure.weights.fp8 import quantize_fp8_rows  # noqa: E402
from decodegap.measure.weights.int4_triton import quantize_int4_words  # noqa: E402

# float32 kernels against float64: summation order alone (~1e-7). bf16: the kernels round where
# transformers rounds (the normalised input, its scaled copy, the linear's output, the activation),
# up to 2^-9 of each value a time, 0.4-1.1e-2 in norm measured here; a wrong kernel errs by O(1).
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
SMALL = fk.GemvConfig(rows=4, block_k=32, warps=4)  # small tiles, so the tiny shapes run several programs and K steps
SMALL_INT4 = fk.GemvConfig(rows=4, block_k=128, warps=4)  # int4 steps whole groups of 128 columns
FORMATS = ("dense", "fp8", "int4")


def _rel(got, ref):
    assert not torch.isnan(got).any(), "an output element was never written"
    return float((got.double() - ref).norm() / ref.norm())


def _rms64(x, g, eps):
    x = x.double()
    return g.double() * x * torch.rsqrt(x.pow(2).mean() + eps)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(torch.randint(0, 2**31, ()).item())  # fresh inputs each run, as on the GPU


def _weight(fmt, n, k, gen, dtype):
    """A random n x k weight stored as `fmt` (by the weight paths' own quantizers), and the float64
    matrix it stands for."""
    w = torch.randn(n, k, generator=gen) / k**0.5
    if fmt == "dense":
        return w.to(dtype), w.to(dtype).double()
    op = fk.WeightOperand("fp8", *quantize_fp8_rows(w)) if fmt == "fp8" else fk.WeightOperand("int4", *quantize_int4_words(w))
    return op, dequantize(op).double()


def _shape(fmt, x_tile=False):
    return dataclasses.replace(SMALL_INT4 if fmt == "int4" else SMALL, x_tile=x_tile)


@pytest.mark.parametrize("x_tile", [False, True])  # x as a vector, or as a tile of W's shape
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(24, 128), (37, 384)])  # 37 rows: the last program half empty; 384: 3 int4 groups, K not a power of 2
def test_linear_with_norm_bias_and_residual_in_place(fmt, dtype, n, k, x_tile, gen):
    x = torch.randn(k, generator=gen).to(dtype)
    w, w64 = _weight(fmt, n, k, gen, dtype)
    b, g = torch.randn(n, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    res = torch.randn(n, generator=gen).to(dtype)
    out = torch.full((n,), float("nan"), dtype=dtype)
    fk.linear(x, w, out, shape=_shape(fmt, x_tile))
    assert _rel(out, w64 @ x.double()) < TOL[dtype]
    out = res.clone()  # residual in place, as the o and down projections add into x
    fk.linear(x, w, out, shape=_shape(fmt, x_tile), bias=b, norm_weight=g, eps=1e-5, residual=out)
    ref = res.double() + w64 @ _rms64(x, g, 1e-5) + b.double()
    assert _rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("fmt,x_tile", [(f, False) for f in FORMATS] + [("int4", True)])
def test_gate_up_is_silu_of_gate_times_up_from_either_input(fmt, x_tile, gen):
    inter, k, dtype = 40, 256, torch.float32
    x, g = torch.randn(k, generator=gen), 1 + torch.randn(k, generator=gen) / 4
    w, w64 = _weight(fmt, 2 * inter, k, gen, dtype)
    y64 = w64 @ _rms64(x, g, 1e-6)
    ref = torch.nn.functional.silu(y64[:inter]) * y64[inter:]
    out = torch.full((inter,), float("nan"))
    fk.gate_up(x, w, out, norm_weight=g, eps=1e-6, shape=_shape(fmt, x_tile))
    assert _rel(out, ref) < TOL[dtype]
    out.fill_(float("nan"))  # a packed path's output: the epilogue alone
    fk.gate_up(x, None, out, norm_weight=g, eps=1e-6, shape=SMALL, y=y64.float())
    assert _rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_norm_from_the_sum_the_gemv_before_added_up_or_from_x_normalised_apart(fmt, gen):
    """The norm lever's kernels: o/down's sum_out adds the squares of the rows it wrote (as stored)
    into one float32; a GEMV given that sum as norm_sum normalises x as if it had summed x itself, and
    one given no norm_weight takes x as it is (the lever "apart": add_norm normalised it). The sum is
    added to, not set: a stale sum would double the statistic, and the outputs show it."""
    n, k, inter, dtype = 37, 256, 40, torch.float32
    a, res = torch.randn(k, generator=gen), torch.randn(n, generator=gen)
    w, w64 = _weight(fmt, n, k, gen, dtype)
    sums = torch.zeros(3)
    out = res.clone()
    fk.linear(a, w, out, shape=_shape(fmt), residual=out, sum_out=sums[1:2])
    assert _rel(out, res.double() + w64 @ a.double()) < TOL[dtype]
    assert sums[0] == 0 and sums[2] == 0 and abs(float(sums[1]) - float(out.double().pow(2).sum())) < 1e-4 * float(sums[1])
    g = 1 + torch.randn(n, generator=gen) / 4
    wg, wg64 = _weight(fmt, 2 * inter, n, gen, dtype) if fmt != "int4" else _weight("dense", 2 * inter, n, gen, dtype)
    y64 = wg64 @ _rms64(out, g, 1e-6)
    ref = torch.nn.functional.silu(y64[:inter]) * y64[inter:]
    got = torch.full((inter,), float("nan"))
    fk.gate_up(out, wg, got, norm_weight=g, eps=1e-6, shape=_shape(fmt if fmt != "int4" else "dense"), norm_sum=sums[1:2])
    assert _rel(got, ref) < TOL[dtype]
    xn = torch.empty(n)
    fk.add_norm(out, None, g, xn, eps=1e-6)
    got.fill_(float("nan"))
    fk.gate_up(xn, wg, got, norm_weight=None, eps=1e-6, shape=_shape(fmt if fmt != "int4" else "dense"))
    assert _rel(got, ref) < TOL[dtype]
    fk.gate_up(out, wg, got, norm_weight=g, eps=1e-6, shape=_shape(fmt if fmt != "int4" else "dense"), norm_sum=2 * sums[1:2])
    assert _rel(got, ref) > 0.2  # twice the sum: x scaled by 1/sqrt(2), which the check must see
    with pytest.raises(ValueError, match="gate_up: norm_sum is the statistic of a norm: it needs norm_weight"):
        fk.gate_up(xn, wg, got, norm_weight=None, eps=1e-6, shape=SMALL, norm_sum=sums[1:2])
    with pytest.raises(ValueError, match="linear: norm_sum must be float32, not bfloat16"):
        fk.linear(out, wg, torch.empty(2 * inter), shape=SMALL, norm_weight=g, norm_sum=sums[1:2].bfloat16())
    with pytest.raises(ValueError, match="linear: sum_out must hold 1 elements, not 3"):
        fk.linear(a, w, out, shape=_shape(fmt), residual=out, sum_out=sums)


def test_gate_up_rounds_as_transformers_in_bf16(gen):
    inter, k, dtype = 40, 64, torch.bfloat16
    x, g = torch.randn(k, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    w = (torch.randn(2 * inter, k, generator=gen) / 4).to(dtype)
    y64 = w.double() @ _rms64(x, g, 1e-6)
    out = torch.full((inter,), float("nan"), dtype=dtype)
    fk.gate_up(x, w, out, norm_weight=g, eps=1e-6, shape=SMALL)
    assert _rel(out, torch.nn.functional.silu(y64[:inter]) * y64[inter:]) < TOL[dtype]


@pytest.mark.parametrize("fmt", ["dense", "int4"])
def test_x_fp32_inputs_hold_the_bf16_values_and_give_the_same_outputs(fmt, gen):
    """The lever x_fp32: add_norm and gate_up store their bf16 results as float32 (the next GEMV then
    converts nothing); the stored values, and what the next GEMV computes from them, are the bf16
    ones exactly (every rounding stays the activations' dtype's)."""
    inter, k, bf = 128, 128, torch.bfloat16  # whole int4 groups
    x, g = torch.randn(k, generator=gen).to(bf), (1 + torch.randn(k, generator=gen) / 4).to(bf)
    xn16, xn32 = torch.empty(k, dtype=bf), torch.empty(k, dtype=torch.float32)
    fk.add_norm(x, None, g, xn16, eps=1e-6)
    fk.add_norm(x, None, g, xn32, eps=1e-6)
    assert torch.equal(xn32, xn16.float())
    w, _ = _weight(fmt, 2 * inter, k, gen, bf)
    h16, h32 = torch.empty(inter, dtype=bf), torch.full((inter,), float("nan"))
    fk.gate_up(xn16, w, h16, norm_weight=None, eps=1e-6, shape=_shape(fmt))
    fk.gate_up(xn32, w, h32, norm_weight=None, eps=1e-6, shape=_shape(fmt), act_dtype=bf)
    assert torch.equal(h32, h16.float())  # rounded to bf16, stored as float32
    wd, _ = _weight(fmt, k, inter, gen, bf)
    y16, y32 = torch.empty(k, dtype=bf), torch.empty(k, dtype=bf)
    fk.linear(h16, wd, y16, shape=_shape(fmt))
    fk.linear(h32, wd, y32, shape=_shape(fmt))  # a float32 input, a bf16 output
    assert torch.equal(y16, y32)
    with pytest.raises(ValueError, match="out .float16. must hold the activations' dtype act_dtype .bfloat16."):
        fk.gate_up(xn32, w, torch.empty(inter, dtype=torch.float16), norm_weight=None, eps=1e-6, shape=_shape(fmt), act_dtype=bf)


def _rotate64(v, cos, sin):
    half = v.shape[-1] // 2
    return v * torch.cat((cos, cos)) + torch.cat((-v[..., half:], v[..., :half]), dim=-1) * torch.cat((sin, sin))


@pytest.mark.parametrize("fmt,dtype,x_tile", [("dense", torch.float32, False), ("dense", torch.bfloat16, False),
                                              ("dense", torch.float32, True), ("fp8", torch.float32, False),
                                              ("int4", torch.float32, False)])
def test_qkv_rope_turns_q_and_k_and_appends_k_and_v_at_the_position_only(fmt, dtype, x_tile, gen):
    hq, hkv, d, k, length, pos = 4, 2, 16, 128, 12, 7
    heads = fk.HeadLayout(hq, hkv, d)
    x, g = torch.randn(k, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    w, w64 = _weight(fmt, heads.qkv_rows, k, gen, dtype)
    b = torch.randn(heads.qkv_rows, generator=gen).to(dtype)
    angles = torch.arange(length).double()[:, None] * (1e4 ** (-torch.arange(0, d, 2).double() / d))[None, :]
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    sentinel = 123.0
    q = torch.full((hq * d,), float("nan"), dtype=dtype)
    kc, vc = torch.full((hkv, length, d), sentinel, dtype=dtype), torch.full((hkv, length, d), sentinel, dtype=dtype)
    fk.qkv_rope(x, w, heads=heads, position=torch.tensor([pos]), cos=cos, sin=sin, q_out=q, k_cache=kc, v_cache=vc,
                norm_weight=g, eps=1e-6, shape=fk.GemvConfig(4, 32 if fmt != "int4" else 128, 4, x_tile), bias=b)
    y = w64 @ _rms64(x, g, 1e-6) + b.double()
    qr, kr, vr = y.split([hq * d, hkv * d, hkv * d])
    c, s = cos[pos].double(), sin[pos].double()
    assert _rel(q, _rotate64(qr.view(hq, d), c, s).reshape(-1)) < TOL[dtype]
    assert _rel(kc[:, pos], _rotate64(kr.view(hkv, d), c, s)) < TOL[dtype]
    assert _rel(vc[:, pos], vr.view(hkv, d)) < TOL[dtype]
    others = torch.arange(length) != pos
    assert (kc[:, others] == sentinel).all() and (vc[:, others] == sentinel).all(), "a cache row other than the position's was written"


LEVERS = {"skip, separate": dict(skip_empty=True, combine="separate"), "masked, separate": dict(skip_empty=False, combine="separate"),
          "masked, in split": dict(skip_empty=False, combine="in_split"), "skip, in split": dict(skip_empty=True, combine="in_split")}


def _attention_case(hq, hkv, d, length, pos, config, sm_count, gen):
    heads = fk.HeadLayout(hq, hkv, d)
    plan = fk.AttentionPlan.for_cache(length, hkv, config, sm_count)
    q = torch.randn(hq * d, generator=gen)
    kc, vc = torch.randn(hkv, length, d, generator=gen), torch.randn(hkv, length, d, generator=gen)
    kc[:, pos + 1:] = 1e4  # positions past the step's own: attending to any would swamp the result
    vc[:, pos + 1:] = float("nan")
    out = torch.full((hq * d,), float("nan"))
    scratch = fk.attention_scratch(plan, heads, "cpu")
    fk.attention(q, kc, vc, torch.tensor([pos]), out, plan=plan, scratch=scratch, heads=heads, scale=d**-0.5)
    qq = q.double().view(hkv, hq // hkv, d)
    scores = qq @ kc[:, : pos + 1].double().transpose(1, 2) * d**-0.5
    ref = (scores.softmax(-1) @ vc[:, : pos + 1].double()).reshape(-1)
    assert _rel(out, ref) < TOL[torch.float32]
    assert not scratch[3].any(), "the in-split combine's counters are not back to zero for the next step"
    return plan


@pytest.mark.parametrize("lever", sorted(LEVERS))
@pytest.mark.parametrize("pos", [0, 15, 16, 37, 47])  # the first slot, either side of a split's edge, the last slot
@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 16), (6, 2, 8), (7, 1, 32)])  # groups of 2, 3 and 7 (Qwen's), head_dim 8 padded to 16
def test_attention_over_the_cache_up_to_the_position(lever, pos, hq, hkv, d, gen):
    config = fk.AttentionConfig(block_t=16, programs_per_sm=3, **LEVERS[lever])
    plan = _attention_case(hq, hkv, d, 48, pos, config, hkv, gen)  # 3 splits of 16 a head: several per head
    assert plan.n_splits * plan.split >= 48 and plan.n_splits == 3


@pytest.mark.parametrize("lever", ["skip, separate", "masked, in split"])
@pytest.mark.parametrize("block_t,per_sm,sms,splits", [(64, 4, 9, 17), (16, 2, 132, 132)])
def test_attention_at_long_context_over_many_splits(lever, block_t, per_sm, sms, splits, gen):
    """2,000 positions, Llama's group of 4: in 17 splits of 128, and in 132 of 16 (the combines read
    them in steps: the separate one 128 a step, the in-split one 16)."""
    config = fk.AttentionConfig(block_t=block_t, programs_per_sm=per_sm, **LEVERS[lever])
    plan = _attention_case(8, 2, 16, 2100, 1999, config, sms, gen)
    assert plan.n_splits == splits and plan.split * splits >= 2100


@pytest.mark.parametrize("cols", [16, 32])
def test_the_combine_spread_over_a_heads_columns_gives_the_same_attention(cols, gen):
    """combine_cols: the separate combine as several programs a query head, each its block of the head
    dim (head_dim 64 padded nowhere, and head_dim 8 padded to 16); the result is the attention's."""
    for hq, hkv, d in ((8, 2, 64), (6, 2, 8)):
        config = fk.AttentionConfig(block_t=16, programs_per_sm=3, skip_empty=False, combine="separate", combine_cols=cols)
        _attention_case(hq, hkv, d, 48, 37, config, hkv, gen)
    with pytest.raises(ValueError, match="combine_cols 24"):
        fk.AttentionConfig(combine_cols=24)
    assert "combine_cols" not in fk.AttentionConfig().as_dict()  # records before the field read the same
    assert fk.AttentionConfig(combine_cols=32).as_dict()["combine_cols"] == 32


def test_the_splits_store_only_the_groups_own_rows_and_run_apart(gen):
    """tl.dot pads a group of 4 query heads to 16 rows: the split programs store the 4 real rows of
    their partials only (the rest of the scratch keeps what it held), and only="split" then
    only="combine" give the whole attention, each launch alone."""
    heads, length, pos = fk.HeadLayout(8, 2, 16), 48, 40
    config = fk.AttentionConfig(block_t=16, programs_per_sm=3, skip_empty=False, combine="separate")
    plan = fk.AttentionPlan.for_cache(length, 2, config, 2)
    q = torch.randn(8 * 16, generator=gen)
    kc, vc = torch.randn(2, length, 16, generator=gen), torch.randn(2, length, 16, generator=gen)
    scratch = fk.attention_scratch(plan, heads, "cpu")
    for t in scratch[:3]:
        t.fill_(-7.0)
    whole = torch.empty(8 * 16)
    fk.attention(q, kc, vc, torch.tensor([pos]), whole, plan=plan, scratch=scratch, heads=heads, scale=0.25)
    m, l, acc = scratch[:3]
    assert (m[:, :, 4:] == -7).all() and (acc[:, :, 4:] == -7).all(), "the padded rows of the group were stored"
    assert (l[:, :, :4] >= 0).all() and torch.isfinite(acc[:, :, :4]).all()
    out = torch.full((8 * 16,), float("nan"))
    fk.attention(q, kc, vc, torch.tensor([pos]), out, plan=plan, scratch=scratch, heads=heads, scale=0.25, only="split")
    assert out.isnan().all(), "only='split' wrote the output"
    fk.attention(q, kc, vc, torch.tensor([pos]), out, plan=plan, scratch=scratch, heads=heads, scale=0.25, only="combine")
    assert torch.equal(out, whole)
    with pytest.raises(ValueError, match="only='both'"):
        fk.attention(q, kc, vc, torch.tensor([pos]), out, plan=plan, scratch=scratch, heads=heads, scale=0.25, only="both")


def test_add_norm_adds_the_residual_and_normalises_for_the_next_layer(gen):
    for dtype in (torch.float32, torch.bfloat16):
        h = 72
        x, y = torch.randn(h, generator=gen).to(dtype), torch.randn(h, generator=gen).to(dtype)
        g = (1 + torch.randn(h, generator=gen) / 4).to(dtype)
        x0, xn = x.clone(), torch.full((h,), float("nan"), dtype=dtype)
        fk.add_norm(x, y, g, xn, eps=1e-5)
        total = x0.double() + y.double()
        assert _rel(x, total) < TOL[dtype] and _rel(xn, _rms64(total, g, 1e-5)) < TOL[dtype]
        fk.add_norm(x, None, g, xn, eps=1e-5)  # the first layer's norm: no add
        assert _rel(x, total) < TOL[dtype]


def test_the_attention_plan_follows_the_multiprocessors():
    """Splits of whole loop steps covering the cache, about programs_per_sm x SMs programs over the KV
    heads (fewer where a split would be shorter than a loop step); the H200's entry as tuned there (four programs per multiprocessor)."""
    for config in (fk.LAUNCH_SHAPES["h200"].attention, fk.LAUNCH_SHAPES["default"].attention):
        for sms in (132, 78):
            for length in (2048 + 200, 16384 + 200):
                for hkv in (4, 8):
                    plan = fk.AttentionPlan.for_cache(length, hkv, config, sms)
                    target = config.programs_per_sm * sms
                    assert plan.split % config.block_t == 0 and plan.n_splits * plan.split >= length > (plan.n_splits - 1) * plan.split
                    assert plan.n_splits * hkv <= target * 1.5
                    assert plan.n_splits * hkv >= target / 2 or plan.split == config.block_t  # a split is one loop step at least
    assert fk.AttentionPlan.for_cache(16584, 4, fk.LAUNCH_SHAPES["h200"].attention, 132).split == 128  # 130 splits of 128 over 4 KV heads
    assert fk.sm_count_of("cpu") == 132


def test_launch_shapes_by_gpu_type_and_from_a_tuned_dict():
    h200 = fk.launch_shapes_for("h200")
    assert h200.gemv_for("dense", "qkv") == fk.GemvConfig(4, 512, 4, True) and h200.norm_for("dense") == "apart"
    assert fk.GEMV_CONFIGS["qkv"] == fk.GemvConfig(4, 512, 4)  # the shapes earlier sessions recorded, with the norm per program
    assert fk.launch_shapes_for("l4") is fk.LAUNCH_SHAPES["default"] and fk.gpu_key_of("cpu") == "cpu"
    assert h200.gemv_for("fp8", "lm_head") == h200.gemv["dense"]["lm_head"]  # the output projection is always dense
    assert fk.resolve(None, "cpu") is fk.LAUNCH_SHAPES["cpu"]
    roles = fk.resolve({"o": {"rows": 1, "block_k": 64, "warps": 2}}, "cpu", "h200")  # the --gemv-configs form
    assert roles.gemv["dense"]["o"] == fk.GemvConfig(1, 64, 2) and roles.gemv["dense"]["qkv"] == h200.gemv["dense"]["qkv"]
    tuned = {"gemv": {"int4": {"down": {"rows": 8, "block_k": 1024, "warps": 8}}}, "attention": {"block_t": 64, "combine": "in_split"},
             "pdl": True, "gpu": "h200", "timings_us": {}, "source": "tuned"}
    got = fk.resolve(tuned, "cpu", "h200")
    assert got.gemv["int4"]["down"] == fk.GemvConfig(8, 1024, 8) and got.attention.block_t == 64 and got.attention.combine == "in_split"
    assert got.attention.programs_per_sm == h200.attention.programs_per_sm and got.pdl and got.source == "tuned"
    assert fk.resolve(got.as_dict(), "cpu", "h200") == got  # the JSON form reads back
    with pytest.raises(ValueError, match="unknown role.*qkvv.*roles are qkv, o, gate_up, down, lm_head"):
        fk.resolve({"qkvv": {"rows": 1, "block_k": 64, "warps": 2}}, "cpu")
    with pytest.raises(ValueError, match="unknown format 'int8'"):
        fk.resolve({"gemv": {"int8": {}}}, "cpu")
    with pytest.raises(ValueError, match="combine 'fused'"):
        fk.AttentionConfig(combine="fused")


def test_pdl_prefetch_spans_whole_lines_of_the_first_loop_steps_and_reads_back():
    """The lever pdl_prefetch: with PDL, each program prefetches its rows' first loop steps into L2
    before the wait (the cubin shows it: tests/test_fused_kernels_compile.py). The span is whole
    128-byte lines, a power of 2, at most a row; nothing without PDL; the record keeps the lever."""
    bf16 = torch.empty(8, 3584, dtype=torch.bfloat16)
    assert fk.prefetch_span(bf16, 4, 512, True) == {"PF": 2048, "PF_LINE": 64, "ROWW": 3584}
    assert fk.prefetch_span(bf16, 16, 512, True)["PF"] == 4096  # a row's 3584, as a power of 2 (the kernel clamps)
    assert fk.prefetch_span(bf16, 4, 512, False)["PF"] == 0 and fk.prefetch_span(bf16, 0, 512, True)["PF"] == 0
    words = torch.empty(8, 3584 // 8, dtype=torch.int32)  # int4: 32 words a line, block_k / 8 words a step
    assert fk.prefetch_span(words, 1, 1024 // 8, True) == {"PF": 128, "PF_LINE": 32, "ROWW": 448}
    assert fk.prefetch_span(torch.empty(8, 3584, dtype=torch.float8_e4m3fn), 1, 16, True)["PF"] == 128  # at least a line
    h200 = fk.launch_shapes_for("h200")  # measured: PDL on, one loop step prefetched by 2 programs an SM, not for fp8
    assert h200.pdl and (h200.prefetch_for("dense"), h200.prefetch_for("fp8"), h200.prefetch_for("int4")) == (1, 0, 1)
    assert h200.pdl_prefetch_per_sm == 2
    assert h200.x_fp32_for("int4", 4096) and not h200.x_fp32_for("int4", 3584) and not h200.x_fp32_for("dense", 4096)
    on = fk.resolve({"pdl": True, "pdl_prefetch": 4, "pdl_prefetch_per_sm": 3}, "cpu", "h200")  # a number: every format's
    assert on.pdl and on.prefetch_for("fp8") == 4 and on.as_dict()["pdl_prefetch"] == {"dense": 4, "fp8": 4, "int4": 4}
    assert fk.resolve(on.as_dict(), "cpu", "h200") == on and on.pdl_prefetch_per_sm == 3
    some = fk.resolve({"pdl": True, "pdl_prefetch": {"int4": 1}}, "cpu", "default")
    assert some.prefetch_for("int4") == 1 and some.prefetch_for("dense") == 0
    # pdl per format and card width (the stage's choice per step), over a table's one setting
    per = fk.resolve({"pdl": {"int4": [3584], "fp8": True}}, "cpu", "default")
    assert per.pdl_for("int4", 3584) and not per.pdl_for("int4", 4096) and per.pdl_for("fp8", 4096)
    assert not per.pdl_for("dense", 3584) and per.pdl_anywhere() and not fk.resolve(None, "cpu", "default").pdl_anywhere()
    assert fk.resolve(per.as_dict(), "cpu", "default") == per and per.as_dict()["pdl"]["int4"] == [3584]
    partial = fk.resolve(None, "cpu", "default").replace(pdl={"int4": [3584]})  # a format absent is off, written so
    assert partial.as_dict()["pdl"] == {"dense": False, "fp8": False, "int4": [3584]}
    assert not fk.resolve(partial.as_dict(), "cpu", "h200").pdl_for("dense", 3584)  # not the H200 table's PDL
    over_on = fk.resolve({"pdl": {"int4": False}}, "cpu", "h200")  # the H200's PDL for every step, but int4's off
    assert over_on.pdl_for("dense", 3584) and not over_on.pdl_for("int4", 3584) and over_on.l2_ahead_for("int4") is None
    assert fk.resolve({"pdl": {"int4": [3584]}, "l2_ahead": {"int4": "evict_last"}}, "cpu", "default").l2_ahead_for("int4", 4096) is None
    for bad in ("yes", {"int4": "on"}, {"int8": True}):
        with pytest.raises(ValueError, match="pdl|unknown format"):
            fk.resolve({"pdl": bad}, "cpu", "default")
    assert fk.prefetch_programs(100, 264) == 100 and fk.prefetch_programs(1000, 264) == 264 and fk.prefetch_programs(7, None) == 7
    assert "pdl_prefetch" not in fk.LAUNCH_SHAPES["default"].as_dict()  # absent when off: records made before read the same
    for key, bad in (("pdl_prefetch", -1), ("pdl_prefetch", 1.5), ("pdl_prefetch", True), ("pdl_prefetch_per_sm", 0)):
        with pytest.raises(ValueError, match=f"{key} must be a whole number"):
            fk.resolve({key: bad}, "cpu", "h200")
    with pytest.raises(ValueError, match="unknown format 'int8'"):
        fk.resolve({"pdl_prefetch": {"int8": 1}}, "cpu", "h200")


def test_a_card_width_gets_its_own_gemv_shapes_and_what_is_given_wins():
    """On the H200 the 4096-wide cards read best with their own shapes (1.066x Llama-3.1-8B's step):
    the table keeps them by width; a shape given for every width (--gemv-configs, a tuned record
    without widths) replaces them, so what a benchmark or session is handed is what runs."""
    h200 = fk.launch_shapes_for("h200")
    assert h200.gemv_for("dense", "gate_up", 4096) == fk.GemvConfig(1, 1024, 4) != h200.gemv_for("dense", "gate_up", 3584)
    assert h200.gemv_for("dense", "gate_up", 3584) == h200.gemv_for("dense", "gate_up") == fk.GemvConfig(2, 512, 4)
    assert h200.gemv_for("int4", "gate_up", 4096) == fk.GemvConfig(4, 1024, 4, True) != h200.gemv_for("int4", "gate_up", 3584)
    assert h200.gemv_for("fp8", "lm_head", 4096) == fk.GemvConfig(1, 1024, 4)  # the output projection: the width's dense one
    given = fk.GemvConfig(8, 256, 4)
    for spec in ({"gate_up": given.as_dict()}, {"gemv": {"dense": {"gate_up": given.as_dict()}}}):
        got = fk.resolve(spec, "cpu", "h200")
        assert got.gemv_for("dense", "gate_up", 4096) == given == got.gemv_for("dense", "gate_up", 3584)
        assert got.gemv_for("dense", "o", 4096) == fk.GemvConfig(4, 1024, 4)  # the roles not given keep the width's
    wide = fk.resolve({"gemv_by_hidden": {"384": {"dense": {"o": given.as_dict()}}}}, "cpu", "h200")
    assert wide.gemv_for("dense", "o", 384) == given and wide.gemv_for("dense", "o", 4096) == fk.GemvConfig(4, 1024, 4)
    assert wide.gemv_for("fp8", "qkv", 384) == wide.gemv["fp8"]["qkv"]  # no fp8 shapes of its own: the GPU's fp8 ones
    assert fk.resolve(wide.as_dict(), "cpu", "h200") == wide  # the JSON form (string widths) reads back
    assert "gemv_by_hidden" not in fk.LAUNCH_SHAPES["cpu"].as_dict()  # absent when empty: older records read the same
    with pytest.raises(ValueError, match=r"gemv_by_hidden'\]\['wide'\]: a card's hidden size"):
        fk.resolve({"gemv_by_hidden": {"wide": {}}}, "cpu")
    with pytest.raises(ValueError, match="unknown format 'int8'"):
        fk.resolve({"gemv_by_hidden": {"4096": {"int8": {}}}}, "cpu")


def test_a_gemv_shape_carries_its_pipelining_depth_to_every_launch(monkeypatch):
    """GemvConfig.stages reaches Triton as num_stages in linear and gate_up (qkv_rope passes it alike; else the
    benchmark's stages part would compare a depth with itself); left out, Triton keeps its default and
    the shape's JSON form is what it was before the field, so recorded shapes read the same."""
    from decodegap.measure.fused_kernels import gemv as gemv_module

    assert fk.GemvConfig(2, 512, 4).as_dict() == {"rows": 2, "block_k": 512, "warps": 4, "x_tile": False}
    deep = fk.GemvConfig(2, 64, 4, stages=4)
    assert fk.resolve({"o": deep.as_dict()}, "cpu", "h200").gemv["dense"]["o"] == deep  # the JSON form reads back
    seen = []
    real = gemv_module.launch_options
    monkeypatch.setattr(gemv_module, "launch_options", lambda warps, pdl, stages=None: seen.append(stages) or real(warps, pdl, stages))
    x, w, out = torch.randn(64), torch.randn(8, 64), torch.empty(8)
    fk.linear(x, w, out, shape=deep)
    torch.testing.assert_close(out, w @ x, rtol=1e-5, atol=1e-5)  # the depth changes the schedule, never the result
    fk.gate_up(x, torch.randn(16, 64), torch.empty(8), norm_weight=torch.ones(64), eps=1e-5, shape=deep)
    fk.linear(x, w, out, shape=SMALL)
    assert seen == [4, 4, None]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="stages must be a whole number >= 1"):
            fk.GemvConfig(2, 512, 4, stages=bad)
    with pytest.raises(ValueError, match="role o: unknown key.*num_stages.*a GEMV shape has rows, block_k, warps, x_tile, stages"):
        fk.resolve({"o": {"rows": 1, "block_k": 64, "warps": 2, "num_stages": 3}}, "cpu")


def test_a_gemv_shape_carries_its_loop_stages_to_the_loop(monkeypatch):
    """GemvConfig.loop_stages reaches the weight loop as LS (tl.range's num_stages: the pipeliner that the
    launch option `stages` never applies to a loop without a dot) in every GEMV wrapper; its JSON form
    reads back, is absent when off (recorded shapes read the same), and a depth below 2 is refused."""
    from decodegap.measure.fused_kernels import gemv as gemv_module

    piped = fk.GemvConfig(2, 64, 4, loop_stages=3)
    assert piped.as_dict()["loop_stages"] == 3 and "loop_stages" not in fk.GemvConfig(2, 64, 4).as_dict()
    assert fk.resolve({"o": piped.as_dict()}, "cpu", "h200").gemv["dense"]["o"] == piped
    seen = []
    for name in ("_linear_kernel", "_gate_up_kernel", "_qkv_rope_kernel"):
        kernel = getattr(gemv_module, name)
        monkeypatch.setattr(gemv_module, name, type("K", (), {"__getitem__": lambda self, grid, k=kernel: (
            lambda *a, **kw: seen.append(kw["LS"]) or k[grid](*a, **kw))})())
    x, w, out = torch.randn(64), torch.randn(8, 64), torch.empty(8)
    fk.linear(x, w, out, shape=piped)
    torch.testing.assert_close(out, w @ x, rtol=1e-5, atol=1e-5)
    fk.gate_up(x, torch.randn(16, 64), torch.empty(8), norm_weight=torch.ones(64), eps=1e-5, shape=piped)
    heads = fk.HeadLayout(2, 1, 16)
    fk.qkv_rope(x, torch.randn(heads.qkv_rows, 64), heads=heads, position=torch.tensor([1]), cos=torch.ones(4, 8),
                sin=torch.zeros(4, 8), q_out=torch.empty(32), k_cache=torch.zeros(1, 4, 16), v_cache=torch.zeros(1, 4, 16),
                norm_weight=torch.ones(64), eps=1e-5, shape=piped)
    fk.linear(x, w, out, shape=SMALL)
    assert seen == [3, 3, 3, None]
    for bad in (0, 1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="loop_stages must be a whole number >= 2"):
            fk.GemvConfig(2, 512, 4, loop_stages=bad)


def test_the_launch_wrappers_name_a_bad_tensor():
    x, w, out = torch.randn(64), torch.randn(8, 64), torch.empty(8)
    with pytest.raises(ValueError, match="linear: x must be contiguous"):
        fk.linear(torch.randn(64, 2)[:, 0], w, out, shape=SMALL)
    with pytest.raises(ValueError, match="linear: out must hold 8 elements, not 7"):
        fk.linear(x, w, torch.empty(7), shape=SMALL)
    w8, scale = quantize_fp8_rows(w)
    with pytest.raises(ValueError, match=r"linear: weight.scale must be float32, not bfloat16"):
        fk.linear(x, fk.WeightOperand("fp8", w8, scale.bfloat16()), out, shape=SMALL)
    with pytest.raises(ValueError, match="linear: weight has 64 columns, not whole int4 groups of 128"):
        fk.linear(x, fk.WeightOperand("int4", torch.zeros(8, 8, dtype=torch.int32), None, None), out, shape=SMALL)
    words, s, z = quantize_int4_words(torch.randn(8, 128))
    with pytest.raises(ValueError, match="int4 reads whole groups: block_k 32"):
        fk.linear(torch.randn(128), fk.WeightOperand("int4", words, s, z), out, shape=SMALL)
    with pytest.raises(ValueError, match=r"gate_up: weight is 8 x 64; out and x need 20 x 64"):
        fk.gate_up(x, w, torch.empty(10), norm_weight=torch.ones(64), eps=1e-6, shape=SMALL)
    heads = fk.HeadLayout(2, 1, 16)
    with pytest.raises(ValueError, match=r"attention: k_cache must be \(kv heads 1, positions, head_dim 16\)"):
        plan = fk.AttentionPlan.for_cache(32, 1)
        fk.attention(torch.randn(32), torch.randn(2, 32, 16), torch.randn(1, 32, 16), torch.tensor([3]), torch.empty(32), plan=plan,
                     scratch=fk.attention_scratch(plan, heads, "cpu"), heads=heads, scale=0.25)


def _card(key, **arch):
    card = load_models()[key]
    return dataclasses.replace(card, architecture={**card.architecture, **arch})


KERNEL_CARDS = {
    "tiny-qwen": _card("tiny-qwen"),  # q/k/v biases, tied embeddings, head_dim 8, 3 query heads per KV head
    "tiny-llama3-rope": _card("tiny-llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
}
WIDE = _card("tiny-llama", hidden_size=256, intermediate_size=256, head_dim=64)  # whole int4 groups of 128 columns


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(KERNEL_CARDS))
def test_the_kernel_step_gives_the_models_logits_at_float32(name):
    model = build_model(KERNEL_CARDS[name], "cpu", "sdpa", 0).float()
    net = FusedModel(model, get_weight_path("bf16"), 64, backend="triton", gemv_configs={"lm_head": SMALL, "gate_up": SMALL})
    check = logit_check(model, net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 1e-5 and check["top1_agree"] == check["compared"] and check["agrees"], check
    assert net.describe()["gemv"]["lm_head"] == SMALL.as_dict() and net.describe()["attention"]["splits"] >= 1


@pytest.mark.parametrize("norm", ["sum", "apart"])
@pytest.mark.parametrize("quant", ["bf16", "int4-triton"])
def test_the_norm_lever_gives_the_same_logits_and_is_recorded(norm, quant):
    """Each norm lever (launch.py) against the transformers model at float32: the statistic summed
    by the GEMVs that wrote x ("sum", zeroed every step: a second step on stale sums would be wrong)
    or x normalised by a launch of its own ("apart"), on bf16 and on int4 words."""
    path = get_weight_path(quant)
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton", gemv_configs={"norm": norm})
    check = logit_check(path.prepare(dense) if quant != "bf16" else dense, net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 1e-5 and check["agrees"] and check["top1_agree"] == check["compared"], check
    kinds = [kind for kind, _ in net.launches(torch.tensor([1]), torch.tensor([20]))]
    layers = len(net.layers)
    assert net.describe()["norm"] == norm and kinds.count("gemv") == 4 * layers + 1
    assert kinds.count("other") == (2 if norm == "sum" else 1 + 2 * layers + 1)  # the embedding, then the zeroing or the norms
    fmt = net.kernel_format
    assert fk.resolve({"norm": norm}, "cpu").as_dict()["norm"] == {f: norm for f in fk.FORMATS}
    assert "norm" not in fk.resolve(None, "cpu").as_dict()  # every format's "program": records before the lever read the same
    net.set_launch_shapes({"norm": {"fp8" if fmt != "fp8" else "dense": norm}})  # another format's lever: not this step's
    assert net.describe()["norm"] == "program" and [k for k, _ in net.launches(torch.tensor([1]), torch.tensor([20]))].count("other") == 1
    with pytest.raises(ValueError, match="gemv_configs: norm 'once' for int4: one of program, sum, apart"):
        net.set_launch_shapes({"norm": {"int4": "once"}})
    with pytest.raises(ValueError, match="gemv_configs: norm: unknown format 'bf16'"):
        net.set_launch_shapes({"norm": {"bf16": "sum"}})
    with pytest.raises(ValueError, match="launch shapes: norm must be {format: one of program, sum, apart}, not 'sum'"):
        fk.LaunchShapes(gemv=fk.LAUNCH_SHAPES["cpu"].gemv, norm="sum")


def test_the_x_fp32_lever_gives_the_same_logits_and_is_recorded():
    """x_fp32 on int4 words with the norm apart: the step's GEMV inputs live in float32 buffers of
    their own (a packed path's kernels keep theirs), the logits are the transformers model's, and
    the record says so; the lever reads back from its JSON form and names a bad value."""
    path = get_weight_path("int4-triton")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton", gemv_configs={"norm": "apart", "x_fp32": {"int4": True}})
    check = logit_check(path.prepare(dense), net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 1e-5 and check["agrees"], check
    assert net.describe()["x_fp32"] is True and net._h_in is not net._h and net._h_in.dtype == torch.float32
    net.set_launch_shapes({"x_fp32": {"dense": True}})  # another format's lever: not this step's
    assert "x_fp32" not in net.describe() and net._h_in is net._h
    on = fk.resolve({"x_fp32": True}, "cpu")
    assert on.as_dict()["x_fp32"] == {f: True for f in fk.FORMATS} and fk.resolve(on.as_dict(), "cpu") == on
    assert "x_fp32" not in fk.resolve(None, "cpu").as_dict()
    wide = fk.resolve({"x_fp32": {"int4": [4096]}}, "cpu")  # on for one card width only
    assert wide.x_fp32_for("int4", 4096) and not wide.x_fp32_for("int4", 3584) and not wide.x_fp32_for("dense", 4096)
    assert fk.resolve(wide.as_dict(), "cpu") == wide
    net.set_launch_shapes({"x_fp32": {"int4": [net.embed.shape[1] + 1]}})  # another width's: not this card's
    assert "x_fp32" not in net.describe()
    with pytest.raises(ValueError, match=r"x_fp32 must be {format: true, false or \[card widths\]}"):
        fk.resolve({"x_fp32": {"int4": "yes"}}, "cpu")


@pytest.mark.model
@pytest.mark.parametrize("quant", ["fp8", "int4-triton"])
def test_the_kernel_step_reads_fp8_and_int4_weights_itself(quant):
    """The path's stored tensors inside the fused kernels (the same prologues and epilogues as bf16):
    the logits of the transformers model holding the path's dequantized weights, at float32."""
    path = get_weight_path(quant)
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton")
    check = logit_check(path.prepare(dense), net, prompt_tokens=20, steps=3)
    fmt = "fp8" if quant == "fp8" else "int4"
    assert net.describe()["weights"] == f"packed by the path, read by the fused kernels ({fmt})"
    assert net.describe()["gemv"]["down"] == fk.LAUNCH_SHAPES["cpu"].gemv[fmt]["down"].as_dict()
    assert check["rel_l2_max"] <= 1e-5 and check["agrees"] and check["top1_agree"] == check["compared"], check


@pytest.mark.model
def test_the_kernel_step_runs_a_packed_paths_gemvs_with_the_same_epilogues():
    """int4-tinygemm: the path's own matmuls (the CPU kernel here, bf16 inside), the kernels' RoPE,
    append, SiLU and residual-plus-norm around them: the same logits as the plain-op step running
    the same matmuls, and near the reference on the weights the kernel multiplies by."""
    path = get_weight_path("int4-tinygemm")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    nets = {backend: FusedModel(dense, path, 64, backend=backend) for backend in ("triton", "torch")}
    packed = path.prepare(dense)
    checks = {backend: logit_check(packed, net) for backend, net in nets.items()}
    assert nets["triton"].describe()["weights"] == "packed by the path"
    assert abs(checks["triton"]["rel_l2_max"] - checks["torch"]["rel_l2_max"]) < 1e-5, checks  # the same step, but for our kernels
    assert checks["triton"]["rel_l2_max"] < 2e-2  # tinygemm's bf16 inputs against the float32 reference


@pytest.mark.model
def test_the_fused_decoder_decodes_the_static_caches_tokens_with_the_kernels():
    """The mode on the kernel backend: no torch.compile (compile_s is the first call), the logit check
    on the session's own prompt in prepare, the same tokens as the static cache, the step's
    description ready for the session."""
    card = KERNEL_CARDS["tiny-qwen"]
    model = build_model(card, "cpu", "sdpa", 0).float()
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, 20), generator=torch.Generator().manual_seed(1))
    tokens = {}
    for mode in ("static", "fused"):
        net = FusedModel(model, get_weight_path("bf16"), 48, backend="triton") if mode == "fused" else None
        dec = make_decoder(mode, model, 48, net)
        dec.prefill(prompt)
        steps = dec.prepare()
        out = [dec.read_token()]
        for _ in range(5 - steps):
            dec.launch()
            out.append(dec.read_token())
        tokens[mode] = out
    assert dec.step_info["backend"] == "triton" and dec.compile_cache == {"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 0}
    assert dec.logit_check["context"] == 20 and dec.logit_check["agrees"]
    assert 0 < dec.jit_s < dec.compile_s  # the kernels' first launch (their JIT) counts, though it ran before the logit check
    assert tokens["fused"] == tokens["static"][-len(tokens["fused"]):]


def test_unknown_launch_roles_backends_and_levers_are_named():
    model = build_model(KERNEL_CARDS["tiny-qwen"], "cpu", "sdpa", 0).float()
    with pytest.raises(ValueError, match="unknown role.*qkvv.*roles are qkv, o, gate_up, down, lm_head"):
        FusedModel(model, get_weight_path("bf16"), 32, backend="triton", gemv_configs={"qkvv": SMALL})
    with pytest.raises(ValueError, match="fused backend 'cuda'"):
        FusedModel(model, get_weight_path("bf16"), 32, backend="cuda")
    with pytest.raises(ValueError, match="programmatic dependent launch needs a CUDA GPU"):
        FusedModel(model, get_weight_path("bf16"), 32, backend="triton", gemv_configs={"pdl": True})
    assert fk.pdl_available("cpu") == "programmatic dependent launch needs a CUDA GPU"


def test_tune_launch_shapes_returns_what_a_fused_model_takes():
    """The sweep's mechanics on the interpreter (host time says nothing of a GPU): one candidate
    table per format and role, an attention config, JSON-able, and a fused model built from it."""
    import json

    arch = dict(WIDE.architecture, vocab_size=256)
    got = fk.tune_launch_shapes("cpu", [arch], budget_s=60, formats=("dense", "int4"), ctxs=(40,), layers=1,
                                gemv_candidates={"dense": [(4, 64, 4), (64, 256, 4)], "int4": [(64, 256, 4)]},
                                attention_candidates=[fk.AttentionConfig(), fk.AttentionConfig(64, 4, 4, 2, False, "in_split")],
                                norm={"int4": "apart"}, x_fp32={"int4": True})
    json.dumps(got)
    assert "gemv_by_hidden" not in got  # one width: one choice
    assert got["norm"] == {"int4": "apart"} and fk.resolve(got, "cpu").norm_for("int4") == "apart"  # tuned as the step runs
    assert got["x_fp32"] == {"int4": True} and fk.resolve(got, "cpu").x_fp32_for("int4", arch["hidden_size"])
    assert set(got["gemv"]) == {"dense", "int4"} and set(got["gemv"]["dense"]) == set(fk.ROLES) and "lm_head" not in got["gemv"]["int4"]
    assert got["gpu"] == "cpu" and got["attention"]["block_t"] in (32, 64, 128) and not got["skipped"]
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton", gemv_configs=got)
    assert net.describe()["gemv"]["o"] == got["gemv"]["dense"]["o"] and net.describe()["launch_shapes"] == got["source"]
    from decodegap.measure.modes import FusedDecoder

    net = FusedDecoder.from_dense(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, launch_shapes=got)
    assert net.backend == "torch"  # the CPU's own step: what a session builds here, the shapes unused


def test_tune_launch_shapes_chooses_for_each_card_width_and_a_model_takes_its_own():
    import json

    arch = dict(WIDE.architecture, vocab_size=256)
    wider = dict(arch, hidden_size=384)
    got = fk.tune_launch_shapes("cpu", [arch, wider], budget_s=120, formats=("dense",), ctxs=(40,), layers=1,
                                gemv_candidates={"dense": [(4, 64, 4), (64, 256, 4)]}, attention_candidates=[fk.AttentionConfig()])
    json.loads(json.dumps(got))
    assert set(got["gemv_by_hidden"]) == {"384"} and set(got["gemv_by_hidden"]["384"]["dense"]) == set(fk.ROLES)
    assert all(set(t) == {"0", "1"} or set(t) == {0, 1} for t in got["timings_us"]["gemv"]["dense"]["o"].values())  # every candidate on each width's card
    card = dataclasses.replace(WIDE, architecture={**WIDE.architecture, "hidden_size": 384})
    net = FusedModel(build_model(card, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton", gemv_configs=got)
    assert net.describe()["gemv"]["down"] == got["gemv_by_hidden"]["384"]["dense"]["down"]


def test_tune_launch_shapes_tunes_fp8s_o_on_halves_under_o_pairs():
    """Under o_pairs (with fp8's x_pairs and norm apart) the step launches fp8's o on the attention's
    halves too: the tuner times it as the read "fp8_pairs", keeps the lever in its result, and a fused
    model runs its choice with o on halves."""
    arch = dict(WIDE.architecture, vocab_size=256)
    cands = {"fp8": [(4, 128, 4)], "fp8_pairs": [(8, 128, 4, False, None, False, None, 2)]}
    got = fk.tune_launch_shapes("cpu", [arch], budget_s=600, formats=("fp8",), ctxs=(40,), layers=1, gemv_candidates=cands,
                                attention_candidates=[fk.AttentionConfig()], norm={"fp8": "apart"}, x_pairs={"fp8": True},
                                o_pairs={"fp8": True})
    assert set(got["gemv"]["fp8_pairs"]) == {"qkv", "o", "gate_up", "down"} and not got["gemv"].get("fp8"), got
    assert set(got["timings_us"]["gemv"]["fp8_pairs"]["o"]) == {"8x128/4w f16x2"} and got["o_pairs"] == {"fp8": True}
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("fp8"), 64, backend="triton", gemv_configs=got)
    assert net.describe()["o_pairs"] is True and net.describe()["gemv"]["o"] == got["gemv"]["fp8_pairs"]["o"]


def test_tune_launch_shapes_tunes_int4s_pair_reads_as_the_step_launches_them():
    """Under x_pairs (with int4's norm apart) the step launches int4's qkv, gate_up and down only as
    f16 pairs: the tuner times those roles as the read "int4_pairs" and int4's float32 loop for o alone;
    the choice keeps x_pairs and a fused model runs it. At a width where x_pairs is off, no pairs."""
    import json

    arch = dict(WIDE.architecture, vocab_size=256)
    cands = {"int4": [(64, 256, 4)], "int4_pairs": [(64, 256, 4), (32, 128, 4, False, None, True)]}
    got = fk.tune_launch_shapes("cpu", [arch], budget_s=120, formats=("int4",), ctxs=(40,), layers=1, gemv_candidates=cands,
                                attention_candidates=[fk.AttentionConfig()], norm={"int4": "apart"}, x_pairs={"int4": True})
    json.loads(json.dumps(got))
    assert set(got["gemv"]["int4_pairs"]) == {"qkv", "gate_up", "down"} and set(got["gemv"]["int4"]) == {"o"}
    assert set(got["timings_us"]["gemv"]["int4_pairs"]["down"]) == {"64x256/4w", "32x128/4w ahead"} and not got["skipped"]
    shapes = fk.resolve(got, "cpu")
    assert got["x_pairs"] == {"int4": True} and shapes.x_pairs_for("int4", 256)
    for role in ("qkv", "gate_up", "down"):
        assert shapes.gemv_for("int4_pairs", role, 256).as_dict() == got["gemv"]["int4_pairs"][role]
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("int4-triton"), 64, backend="triton", gemv_configs=got)
    assert net.describe()["x_pairs"] is True and net.describe()["gemv"]["down"] == got["gemv"]["int4_pairs"]["down"]
    off = fk.tune_launch_shapes("cpu", [arch], budget_s=120, formats=("int4",), ctxs=(40,), layers=1, gemv_candidates=cands,
                                attention_candidates=[fk.AttentionConfig()], norm={"int4": "apart"}, x_pairs={"int4": [4096]})
    assert "int4_pairs" not in off["gemv"] and set(off["gemv"]["int4"]) == {"qkv", "o", "gate_up", "down"}


# ----------------------------------------------------------------------------- the lever x_pairs (int4_pairs.py)


def test_add_norm_and_gate_up_write_the_f16_pairs_of_their_bf16_values(gen):
    """x_pairs: add_norm's normalised x and gate_up's SiLU(gate) * up stored as the int4 loop's f16 pairs
    are exactly x_pairs() of the bf16 values the same kernels store plainly (bf16 -> f16 is exact in
    range, and the odd nibbles' 1/16 too), and read back to them."""
    from decodegap.measure.fused_kernels.int4_pairs import from_pairs, x_pairs

    inter, k, bf = 256, 384, torch.bfloat16  # 3 groups of x, 2 of the intermediate: pairs cross programs
    x, g = torch.randn(k, generator=gen).to(bf), (1 + torch.randn(k, generator=gen) / 4).to(bf)
    xn16, xnp = torch.empty(k, dtype=bf), torch.full((k // 2,), -1, dtype=torch.int32)
    fk.add_norm(x, None, g, xn16, eps=1e-6)
    fk.add_norm(x, None, g, xnp, eps=1e-6)
    assert torch.equal(xnp, x_pairs(xn16).view(-1)) and torch.equal(from_pairs(xnp), xn16.float())
    w, _ = _weight("int4", 2 * inter, k, gen, bf)
    h16, hp = torch.empty(inter, dtype=bf), torch.full((inter // 2,), -1, dtype=torch.int32)
    fk.gate_up(xn16, w, h16, norm_weight=None, eps=1e-6, shape=SMALL_INT4)
    fk.gate_up(xn16, w, hp, norm_weight=None, eps=1e-6, shape=SMALL_INT4, act_dtype=bf)
    assert torch.equal(hp, x_pairs(h16).view(-1))


@pytest.mark.parametrize("f16_words", [1, 2, 4])  # each word's halves to float32, or 2 or 4 words' summed in f16 first
@pytest.mark.parametrize("n,k", [(37, 384), (24, 640)])  # a half-empty last program; 5 groups, 2 a loop step
def test_the_int4_pairs_loop_gives_the_float32_loops_products(n, k, f16_words, gen):
    """linear, qkv_rope and gate_up reading x as f16 pairs (their arithmetic under the interpreter in
    float32, the PTX's bit operations checked in tests/test_int4_packed_gemv.py) against float64 on the
    dequantized weights: f16's rounding of x, and of the words' sums in f16 (f16_words)."""
    from decodegap.measure.fused_kernels.int4_pairs import x_pairs

    x = torch.randn(k, generator=gen).to(torch.bfloat16)
    xp = x_pairs(x).view(-1)
    w, w64 = _weight("int4", n, k, gen, torch.bfloat16)
    # the pairs as a tile of the words' shape in one case
    shape = fk.GemvConfig(rows=4, block_k=256, warps=4, x_tile=k == 640, f16_words=f16_words)
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    fk.linear(xp, w, out, shape=shape)
    assert _rel(out, w64 @ x.double()) < 1e-2
    res = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = res.clone()
    fk.linear(xp, w, out, shape=shape, residual=out)
    assert _rel(out, res.double() + w64 @ x.double()) < 1e-2
    inter = 128
    wg, wg64 = _weight("int4", 2 * inter, k, gen, torch.bfloat16)
    h = torch.full((inter,), float("nan"), dtype=torch.bfloat16)
    fk.gate_up(xp, wg, h, norm_weight=None, eps=1e-6, shape=shape, act_dtype=torch.bfloat16)
    y64 = wg64 @ x.double()
    assert _rel(h, torch.nn.functional.silu(y64[:inter]) * y64[inter:]) < 3e-2


def test_f16_pairs_are_refused_where_they_cannot_be_read(gen):
    from decodegap.measure.fused_kernels.int4_pairs import x_pairs

    xp = x_pairs(torch.randn(128, generator=gen)).view(-1)
    dense, _ = _weight("dense", 8, 128, gen, torch.bfloat16)
    int4, _ = _weight("int4", 8, 128, gen, torch.bfloat16)
    out = torch.empty(8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="linear: x as int32 f16 pairs .the lever x_pairs. is read by int4 and fp8 weights only, not dense"):
        fk.linear(xp, dense, out, shape=SMALL)
    with pytest.raises(ValueError, match="linear: x as f16 pairs is normalised by the kernel that wrote it"):
        fk.linear(xp, int4, out, shape=SMALL_INT4, norm_weight=torch.ones(128, dtype=torch.bfloat16), eps=1e-6)
    with pytest.raises(ValueError, match="linear: x must hold 64 elements"):
        fk.linear(xp[:32], int4, out, shape=SMALL_INT4)
    with pytest.raises(ValueError, match="add_norm: xn as f16 pairs needs whole groups of 128: x has 96 values"):
        fk.add_norm(torch.randn(96), None, torch.ones(96), torch.empty(48, dtype=torch.int32), eps=1e-6)


def test_add_norm_and_gate_up_write_fp8s_f16_halves_of_their_bf16_values(gen):
    """x_pairs for fp8: add_norm's normalised x and gate_up's SiLU(gate) * up stored as fp8_pairs' halves
    are exactly x_halves() of the bf16 values the same kernels store plainly (x / 16 is exact in f16's
    normal range), and read back to them; pairs_for names the weights the pairs are for."""
    from decodegap.measure.fused_kernels.fp8_pairs import from_halves, x_halves

    inter, k, bf = 96, 384, torch.bfloat16
    x, g = torch.randn(k, generator=gen).to(bf), (1 + torch.randn(k, generator=gen) / 4).to(bf)
    xn16, xnh = torch.empty(k, dtype=bf), torch.full((k // 2,), -1, dtype=torch.int32)
    fk.add_norm(x, None, g, xn16, eps=1e-6)
    fk.add_norm(x, None, g, xnh, eps=1e-6, pairs_for="fp8")
    assert torch.equal(xnh, x_halves(xn16).view(-1)) and torch.equal(from_halves(xnh), xn16.float())
    w, _ = _weight("fp8", 2 * inter, k, gen, bf)
    h16, hh = torch.empty(inter, dtype=bf), torch.full((inter // 2,), -1, dtype=torch.int32)
    fk.gate_up(xn16, w, h16, norm_weight=None, eps=1e-6, shape=SMALL)
    fk.gate_up(xn16, w, hh, norm_weight=None, eps=1e-6, shape=SMALL, act_dtype=bf, pairs_for="fp8")
    assert torch.equal(hh, x_halves(h16).view(-1))
    with pytest.raises(ValueError, match="add_norm: pairs_for 'int8': the f16 pairs of int4 or fp8 weights"):
        fk.add_norm(x, None, g, xnh, eps=1e-6, pairs_for="int8")


@pytest.mark.parametrize("n,k,la,xt,words", [(37, 384, False, False, 1), (24, 640, True, False, 1), (37, 640, False, True, 1),
                                              (37, 384, False, False, 2), (24, 640, True, True, 4)])  # a half-empty last program; a ragged last step
def test_the_fp8_halves_loop_gives_the_float32_loops_products(n, k, la, xt, words, gen):
    """linear (with its residual), qkv_rope and gate_up reading x as fp8_pairs' f16 halves, with and
    without load_ahead, the halves as a vector or a tile (x_tile), each word's halves to float32 or 2 or 4
    words' summed in f16 first (f16_words) (their arithmetic under the interpreter in float32, rounded to
    f16 where the PTX rounds; the PTX compiles in tests/test_fused_kernels_compile.py) against float64 on
    the dequantized weights: f16's rounding of x / 16, and of the words' sums."""
    from decodegap.measure.fused_kernels.fp8_pairs import x_halves

    x = torch.randn(k, generator=gen).to(torch.bfloat16)
    xh = x_halves(x).view(-1)
    w, w64 = _weight("fp8", n, k, gen, torch.bfloat16)
    shape = fk.GemvConfig(rows=4, block_k=256, warps=4, x_tile=xt, load_ahead=la, f16_words=words)
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    fk.linear(xh, w, out, shape=shape)
    assert _rel(out, w64 @ x.double()) < 1e-2
    if words > 1:  # the words' sums really are rounded to f16 (the lever reaches the loop), and no further
        y32, y32_one = torch.empty(n), torch.empty(n)
        fk.linear(xh, w, y32, shape=shape)
        fk.linear(xh, w, y32_one, shape=dataclasses.replace(shape, f16_words=1))
        assert not torch.equal(y32, y32_one) and _rel(y32, y32_one.double()) < 2e-3
    res = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = res.clone()
    fk.linear(xh, w, out, shape=shape, residual=out)
    assert _rel(out, res.double() + w64 @ x.double()) < 1e-2
    inter = 64
    wg, wg64 = _weight("fp8", 2 * inter, k, gen, torch.bfloat16)
    h = torch.full((inter,), float("nan"), dtype=torch.bfloat16)
    fk.gate_up(xh, wg, h, norm_weight=None, eps=1e-6, shape=shape, act_dtype=torch.bfloat16)
    y64 = wg64 @ x.double()
    assert _rel(h, torch.nn.functional.silu(y64[:inter]) * y64[inter:]) < 3e-2
    with pytest.raises(ValueError, match="linear: x as f16 pairs for fp8 weights reads whole words of 4 columns: 6 columns"):
        fk.linear(xh[:3], _weight("fp8", 4, 6, gen, torch.bfloat16)[0], out[:4], shape=shape)


def test_the_x_pairs_lever_runs_the_fp8_step_near_its_float32_loop_and_is_recorded():
    """x_pairs on fp8 weights with the norm apart: qkv, gate_up and down read f16 halves (o and lm_head
    their inputs as before), at the "fp8_pairs" shapes where given; the logits stay within f16's
    rounding of the transformers model's on the same dequantized weights; the record says so."""
    path = get_weight_path("fp8")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton", gemv_configs={"norm": "apart", "x_pairs": {"fp8": True},
                                                                      "gemv": {"fp8_pairs": {"down": {"rows": 8, "block_k": 128, "warps": 4}}}})
    check = logit_check(path.prepare(dense), net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 2e-3 and check["top1_agree"] == check["compared"], check
    assert net.describe()["x_pairs"] is True and net._h_in.dtype == torch.int32 and net._xn_in.dtype == torch.int32
    assert net.gemv["down"].rows == 8 and net.gemv["o"] == net.shapes.gemv_for("fp8", "o", 256)
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()  # prepare() packed the first one in place
    off = FusedModel(dense, path, 64, backend="triton", gemv_configs={"norm": "apart"})
    check_off = logit_check(path.prepare(dense), off, prompt_tokens=20, steps=3)
    assert "x_pairs" not in off.describe() and check_off["rel_l2_max"] < check["rel_l2_max"]  # the float32 loop: closer still
    on = fk.resolve({"norm": "apart", "x_pairs": {"fp8": True}}, "cpu")
    assert on.as_dict()["x_pairs"] == {"fp8": True} and fk.resolve(on.as_dict(), "cpu") == on and not on.x_pairs_for("int4", 256)


@pytest.mark.parametrize("lever", ["skip, separate", "masked, in split", "cols 32"])
def test_attention_writes_fp8s_f16_halves_of_its_output(lever, gen):
    """o_pairs: the combine (separate, by columns, or in the split programs) stores the output as
    fp8_pairs' halves, exactly x_halves() of the float32 output the same launch stores plainly; an out
    of the wrong size is refused by name."""
    from decodegap.measure.fused_kernels.fp8_pairs import x_halves

    config = fk.AttentionConfig(block_t=16, programs_per_sm=3, **(LEVERS.get(lever) or {"combine_cols": 32}))
    hq, hkv, d, length, pos = 8, 2, 16, 48, 37
    heads, plan = fk.HeadLayout(hq, hkv, d), fk.AttentionPlan.for_cache(length, hkv, config, hkv)
    q = torch.randn(hq * d, generator=gen)
    kc, vc = torch.randn(hkv, length, d, generator=gen), torch.randn(hkv, length, d, generator=gen)
    outs = []
    for out in (torch.empty(hq * d), torch.zeros(hq * d // 2, dtype=torch.int32)):
        fk.attention(q, kc, vc, torch.tensor([pos]), out, plan=plan, scratch=fk.attention_scratch(plan, heads, "cpu"),
                     heads=heads, scale=d**-0.5)
        outs.append(out)
    assert torch.equal(outs[1], x_halves(outs[0]))
    with pytest.raises(ValueError, match="attention: out must hold 64 elements, not 128"):
        fk.attention(q, kc, vc, torch.tensor([pos]), torch.zeros(hq * d, dtype=torch.int32), plan=plan,
                     scratch=fk.attention_scratch(plan, heads, "cpu"), heads=heads, scale=d**-0.5)


def test_the_o_pairs_lever_runs_the_fp8_steps_o_on_halves_and_is_recorded():
    """o_pairs on fp8 with x_pairs: the attention writes its output as halves and o reads them at the
    "fp8_pairs" o shape where given, the logits within f16's rounding of the transformers model's on the
    same dequantized weights, the record says so; off without x_pairs; refused for int4."""
    path = get_weight_path("fp8")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    lever = {"norm": "apart", "x_pairs": {"fp8": True}, "o_pairs": {"fp8": True}}
    net = FusedModel(dense, path, 64, backend="triton",
                     gemv_configs={**lever, "gemv": {"fp8_pairs": {"o": {"rows": 4, "block_k": 128, "warps": 4, "f16_words": 2}}}})
    check = logit_check(path.prepare(dense), net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 2e-3 and check["top1_agree"] == check["compared"], check
    assert net.describe()["o_pairs"] is True and net._attn_in.dtype == torch.int32 and net._attn_in.numel() * 2 == net._attn.numel()
    assert net.gemv["o"] == fk.GemvConfig(4, 128, 4, f16_words=2)
    on = fk.resolve(lever, "cpu")
    assert on.as_dict()["o_pairs"] == {"fp8": True} and fk.resolve(on.as_dict(), "cpu") == on and on.o_pairs_for("fp8", 256)
    net.set_launch_shapes({"norm": "apart", "o_pairs": True})  # o_pairs alone, x_pairs off: o reads as before
    assert "o_pairs" not in net.describe() and net._attn_in is net._attn and net.gemv["o"] == net.shapes.gemv_for("fp8", "o", 256)
    h200 = fk.launch_shapes_for("h200")  # measured: on for fp8, o at the halves' qkv shape of each width
    assert h200.o_pairs_for("fp8", 3584) and h200.o_pairs_for("fp8", 4096) and not h200.o_pairs_for("int4", 4096)
    assert h200.gemv_for("fp8_pairs", "o", 4096) == h200.gemv_for("fp8_pairs", "qkv", 4096) == fk.GemvConfig(4, 1024, 4, f16_words=4)
    from decodegap.measure.fused_kernels.tune import as_the_step_reads

    assert as_the_step_reads(h200, "fp8", "o", 3584)[0] == "fp8_pairs"  # the tuner times o as the step reads it
    assert as_the_step_reads(h200, "int4", "o", 3584)[0] == "int4"
    with pytest.raises(ValueError, match="o_pairs is a lever of fp8 weights only, not int4"):
        fk.resolve({"o_pairs": {"int4": True}}, "cpu")


def test_the_x_pairs_lever_runs_the_step_near_the_float32_loop_and_is_recorded():
    """x_pairs on int4 words with the norm apart: qkv, gate_up and down read f16 pairs (o and lm_head
    their inputs as before); the logits stay within f16's rounding of the transformers model's on the
    same dequantized weights; the record says so; its shapes are the "int4_pairs" ones where given; it
    is off without the norm apart, and refused for another format."""
    path = get_weight_path("int4-triton")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton", gemv_configs={"norm": "apart", "x_pairs": True,
                                                                      "gemv": {"int4_pairs": {"down": {"rows": 8, "block_k": 128, "warps": 4}}}})
    check = logit_check(path.prepare(dense), net, prompt_tokens=20, steps=3)
    # float32 activations rounded to f16 (2^-11 of each value): about 1e-4 here, where the float32 loop gives 1e-7
    assert check["rel_l2_max"] <= 2e-3 and check["top1_agree"] == check["compared"], check
    assert net.describe()["x_pairs"] is True and net._h_in.dtype == torch.int32 and net._xn_in.dtype == torch.int32
    assert net.gemv["down"].rows == 8 and net.gemv["o"] == net.shapes.gemv_for("int4", "o", 256)
    on = fk.resolve({"norm": "apart", "x_pairs": True}, "cpu")
    assert on.as_dict()["x_pairs"] == {"int4": True} and fk.resolve(on.as_dict(), "cpu") == on
    assert not fk.resolve({"norm": "program", "x_pairs": True}, "cpu").x_pairs_for("int4", 256)
    net.set_launch_shapes({"norm": "sum", "x_pairs": True})  # no norm apart, no launch to write the pairs: off
    assert "x_pairs" not in net.describe() and net._h_in is net._h
    with pytest.raises(ValueError, match="x_pairs is a lever of int4 and fp8 weights only, not dense"):
        fk.resolve({"x_pairs": {"dense": True}}, "cpu")
    with pytest.raises(ValueError, match="unknown format 'int8_pairs'"):
        fk.resolve({"gemv": {"int8_pairs": {}}}, "cpu")


@pytest.mark.parametrize("lever", ["load_ahead", "loop_stages"])
@pytest.mark.parametrize("fmt", ["dense", "fp8", "int4", "int4 pairs", "fp8 pairs"])
def test_loading_each_step_ahead_gives_the_same_numbers(fmt, lever, gen):
    """The levers load_ahead and loop_stages only move each loop step's weight loads earlier (one step
    ahead into registers; loop_stages - 1 steps ahead into shared memory, which Triton's pipeliner does
    on the GPU and the interpreter does not): linear, gate_up and qkv_rope give the same bits with them
    as without, over a ragged last step (K = 384 in steps of 256: the look-ahead past the last group or
    column is masked off) and a half-empty last program."""
    from decodegap.measure.fused_kernels.fp8_pairs import x_halves
    from decodegap.measure.fused_kernels.int4_pairs import x_pairs

    n, k, inter = 37, 384, 40
    stored = fmt.split()[0]
    x = torch.randn(k, generator=gen).to(torch.bfloat16)
    g = None if fmt.endswith("pairs") else (1 + torch.randn(k, generator=gen) / 4).to(torch.bfloat16)
    xin = {"int4 pairs": lambda: x_pairs(x).view(-1), "fp8 pairs": lambda: x_halves(x).view(-1)}.get(fmt, lambda: x)()
    off = fk.GemvConfig(rows=4, block_k=256, warps=4)
    on = dataclasses.replace(off, **({"load_ahead": True} if lever == "load_ahead" else {"loop_stages": 3}))
    w, _ = _weight(stored, n, k, gen, torch.bfloat16)
    wg, _ = _weight(stored, 2 * inter, k, gen, torch.bfloat16)
    heads = fk.HeadLayout(2, 1, 16)
    wq, _ = _weight(stored, heads.qkv_rows, k, gen, torch.bfloat16)
    runs = []
    for shape in (off, on):
        out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
        fk.linear(xin, w, out, shape=shape, norm_weight=g, eps=1e-6)
        h = torch.full((inter,), float("nan"), dtype=torch.bfloat16)
        fk.gate_up(xin, wg, h, norm_weight=g, eps=1e-6, shape=shape, act_dtype=torch.bfloat16)
        q, kc, vc = (torch.zeros(2 * 16, dtype=torch.bfloat16), torch.zeros(1, 8, 16, dtype=torch.bfloat16),
                     torch.zeros(1, 8, 16, dtype=torch.bfloat16))
        fk.qkv_rope(xin, wq, heads=heads, position=torch.tensor([3]), cos=torch.ones(8, 8, dtype=torch.bfloat16),
                    sin=torch.zeros(8, 8, dtype=torch.bfloat16), q_out=q, k_cache=kc, v_cache=vc, norm_weight=g, eps=1e-6, shape=shape)
        runs.append((out, h, q, kc, vc))
    assert not runs[0][0].isnan().any() and not runs[0][1].isnan().any() and runs[0][2].abs().sum() > 0
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_the_load_ahead_lever_is_per_read_and_role_and_recorded():
    """load_ahead names, per read, the roles it is on for: gemv_for sets it on those shapes only, at every
    card width; the step runs and records it per role, with the same logits as without; a bad read or
    role is a ValueError that names it."""
    t = fk.resolve({"load_ahead": {"int4_pairs": ["gate_up", "down"], "dense": ["down"]}}, "cpu")
    assert t.gemv_for("int4_pairs", "down").load_ahead and t.gemv_for("int4_pairs", "gate_up", 4096).load_ahead
    assert not t.gemv_for("int4", "down").load_ahead and not t.gemv_for("int4_pairs", "qkv").load_ahead
    assert t.gemv_for("dense", "down", 4096).load_ahead and not t.gemv_for("fp8", "down").load_ahead
    assert fk.resolve(t.as_dict(), "cpu") == t and t.gemv_for("dense", "down").as_dict()["load_ahead"] is True
    assert "load_ahead" not in fk.resolve(None, "cpu").as_dict()  # off: records made before the lever read the same
    with pytest.raises(ValueError, match=r"load_ahead\['int4_pairs'\]: unknown role\(s\) 'gateup'"):
        fk.resolve({"load_ahead": {"int4_pairs": ["gateup"]}}, "cpu")
    with pytest.raises(ValueError, match="load_ahead: unknown format 'int8'"):
        fk.resolve({"load_ahead": {"int8": ["down"]}}, "cpu")
    with pytest.raises(ValueError, match=r"load_ahead must be \{read: \[roles\]\}"):
        fk.resolve({"load_ahead": {"dense": True}}, "cpu")
    path = get_weight_path("int4-triton")
    dense = build_model(WIDE, "cpu", "sdpa", 0).float()
    levers = {"norm": "apart", "x_pairs": True, "gemv": {"int4_pairs": {r: {"rows": 8, "block_k": 128, "warps": 4} for r in ("gate_up", "down")}}}
    reference = path.prepare(build_model(WIDE, "cpu", "sdpa", 0).float())
    logits = []
    for ahead in ([], ["gate_up", "down"]):
        net = FusedModel(dense, path, 64, backend="triton", gemv_configs={**levers, "load_ahead": {"int4_pairs": ahead}})
        assert [r for r, c in net.describe()["gemv"].items() if c.get("load_ahead")] == ahead
        logits.append(logit_check(reference, net, prompt_tokens=20, steps=2))
    assert logits[0]["rel_l2_max"] == logits[1]["rel_l2_max"]


def test_benchmarks_launch_each_role_as_the_step_reads_it():
    """as_the_step_reads (floor_limit's gemv and l2 parts): the H200 table's int4 qkv, gate_up and down
    read f16 pairs at the pairs' shapes, normalised apart; o reads the attention's output as stored; with
    the pairs off, the 4096-wide int4 inputs the step writes are float32 (x_fp32); bf16 takes neither."""
    from decodegap.measure.fused_kernels.tune import as_the_step_reads

    h200 = fk.resolve(None, "cpu", gpu_key="h200")
    read, shape, given = as_the_step_reads(h200, "int4", "down", 4096)
    assert (read, given) == ("int4_pairs", {"norm": "none", "x_pairs": True}) and shape == h200.gemv_for("int4_pairs", "down", 4096)
    assert shape.load_ahead  # the 4096-wide pairs down loads each step ahead (the table's shape)
    assert as_the_step_reads(h200, "int4", "o", 3584)[0::2] == ("int4", {"norm": "none", "x_fp32": False})
    off = fk.resolve({"x_pairs": False}, "cpu", gpu_key="h200")
    assert as_the_step_reads(off, "int4", "gate_up", 4096)[0::2] == ("int4", {"norm": "none", "x_fp32": True})
    assert as_the_step_reads(off, "int4", "gate_up", 3584)[0::2] == ("int4", {"norm": "none", "x_fp32": False})
    assert as_the_step_reads(h200, "dense", "down", 3584)[0::2] == ("dense", {"norm": "none", "x_fp32": False})
    assert as_the_step_reads(fk.resolve(None, "cpu"), "dense", "qkv", 256)[0::2] == ("dense", {"norm": "program", "x_fp32": False})


import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from decodegap.measure.fused_kernels.common import l2_ahead as _l2_ahead_jit  # noqa: E402


@triton.jit
def _l2_mark_kernel(l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines, l2c_per, L2_PRI: tl.constexpr,
                    L2A_TILE: tl.constexpr, L2A_STEPS: tl.constexpr, L2B_TILE: tl.constexpr, L2B_STEPS: tl.constexpr,
                    L2C_TILE: tl.constexpr, L2C_STEPS: tl.constexpr):
    _l2_ahead_jit(tl.program_id(0), l2a_ptr, l2a_lines, l2a_per, l2b_ptr, l2b_lines, l2b_per, l2c_ptr, l2c_lines, l2c_per, L2_PRI,
                  L2A_TILE, L2A_STEPS, L2B_TILE, L2B_STEPS, L2C_TILE, L2C_STEPS)


@pytest.mark.parametrize("programs", [1, 7, 64])
def test_l2_ahead_touches_every_line_of_each_span_and_nothing_past_it(programs):
    """The split programs' l2_ahead code itself (under the interpreter, each line it would prefetch
    marked instead): every 128-byte line of each span is one some program prefetches, a span that ends
    inside a line included, and nothing before or after a span is touched (its neighbours stay zero)."""
    from decodegap.measure.fused_kernels.common import L2_MARK, l2_ahead_args

    buf = torch.zeros(3 * 8192 + 3 * 256, dtype=torch.uint8)
    sizes = (5000, 128 * 9, 700)  # bytes: ragged, whole lines, under a few lines
    starts = [256, 256 + 8192 + 256, 256 + 2 * (8192 + 256)]
    spans = [buf[a:a + n] for a, n in zip(starts, sizes)]
    args = l2_ahead_args(spans, programs, "evict_last", True, buf)
    _l2_mark_kernel[(programs,)](**{**args, "L2_PRI": L2_MARK})
    for a, n in zip(starts, sizes):
        marks = buf[a:a + n]
        assert marks[::128].tolist() == [1] * -(-n // 128)  # each line's first byte
        assert int(marks.sum()) == -(-n // 128)  # and no other byte of the span
    outside = torch.ones_like(buf, dtype=torch.bool)
    for a, n in zip(starts, sizes):
        outside[a:a + n] = False
    assert int(buf[outside].sum()) == 0


def test_the_l2_ahead_lever_shares_the_o_weight_among_the_split_programs_and_needs_pdl():
    """l2_ahead: every line of each span (o's weight, gate_up's first gate and up rows) falls to some
    split program's share, the shares in whole prefetch tiles; only under PDL (the prefetch goes before
    its wait, and the interpreter has none), at a priority the PTX has; a wrong priority, format or
    size is refused by name; the table's form reads back; the spans are the rows gate_up's first
    programs read; a step without PDL neither prefetches nor records the lever."""
    from decodegap.measure.fused_kernels.common import l2_ahead_args

    w, gu = torch.empty(3584, 3584, dtype=torch.bfloat16), torch.empty(2 * 1000, 448, dtype=torch.int32)
    spans = [w, gu[:100], gu[1000:1100]]
    for programs in (256, 512, 1000):
        got = l2_ahead_args(spans, programs, "evict_last", True, w)
        assert got["L2_PRI"] == 2
        for slot, span in zip("abc", spans):
            lines, per = got[f"l2{slot}_lines"], got[f"l2{slot}_per"]
            assert lines == -(-span.numel() * span.element_size() // 128)
            assert programs * per >= lines > (programs - 1) * (per - 1)  # covered, and no program idles for long
            assert got[f"L2{slot.upper()}_TILE"] * got[f"L2{slot.upper()}_STEPS"] >= per
            assert got[f"l2{slot}_ptr"].dtype == torch.uint8 and got[f"l2{slot}_ptr"].data_ptr() == span.data_ptr()
    assert got["l2b_ptr"].numel() == 100 * 448 * 4 and got["l2c_ptr"].data_ptr() == gu[1000].data_ptr()
    one = l2_ahead_args([w], 256, "evict_normal", True, w)
    assert one["L2_PRI"] == 1 and one["L2B_STEPS"] == one["L2C_STEPS"] == 0  # unused slots prefetch nothing
    assert l2_ahead_args(spans, 256, "evict_last", False, w)["L2_PRI"] == 0 and l2_ahead_args(None, 256, "evict_last", True, w)["L2_PRI"] == 0
    with pytest.raises(ValueError, match="l2_ahead priority 'evict_first'"):
        l2_ahead_args(spans, 256, "evict_first", True, w)
    with pytest.raises(ValueError, match="4 spans, at most 3"):
        l2_ahead_args(spans + [w], 256, "evict_last", True, w)
    with pytest.raises(ValueError, match="span a must be contiguous"):
        l2_ahead_args([w[:, :100]], 256, "evict_last", True, w)
    on = fk.resolve({"pdl": True, "l2_ahead": {"dense": "evict_last", "fp8": "evict_normal"}}, "cpu")
    assert on.l2_ahead_for("dense") == "evict_last" and on.l2_ahead_for("fp8") == "evict_normal" and on.l2_ahead_for("int4") is None
    assert fk.resolve(on.as_dict(), "cpu") == on and "l2_ahead" not in fk.resolve(None, "cpu").as_dict()
    off = fk.resolve({"pdl": True, "l2_ahead": {"dense": None, "fp8": "evict_normal"}}, "cpu")  # null: a format's off
    assert off.l2_ahead == {"fp8": "evict_normal"} and off.l2_ahead_for("dense") is None
    assert fk.resolve({"l2_ahead": {"dense": "evict_last"}}, "cpu").l2_ahead_for("dense") is None  # no PDL, no prefetch
    with pytest.raises(ValueError, match=r"l2_ahead\['dense'\] is 'first'"):
        fk.resolve({"l2_ahead": {"dense": "first"}}, "cpu")
    with pytest.raises(ValueError, match="l2_ahead"):
        fk.resolve({"l2_ahead": {"bf16": "evict_last"}}, "cpu")
    with pytest.raises(ValueError, match="l2_ahead must be"):
        fk.resolve({"l2_ahead": "evict_last"}, "cpu")
    mib = fk.resolve({"pdl": True, "l2_ahead": {"dense": "evict_last"}, "l2_ahead_mib": {"dense": 16}}, "cpu")
    assert mib.l2_ahead_bytes_for("dense") == 16 * 2**20 and mib.l2_ahead_bytes_for("fp8") == 0  # fp8's l2_ahead is off
    assert fk.resolve(mib.as_dict(), "cpu") == mib
    with pytest.raises(ValueError, match="l2_ahead_mib"):
        fk.resolve({"l2_ahead_mib": {"dense": -1}}, "cpu")
    assert fk.resolve({"l2_ahead_at": "end"}, "cpu").as_dict()["l2_ahead_at"] == "end"
    with pytest.raises(ValueError, match="l2_ahead_at 'middle'"):
        fk.resolve({"l2_ahead_at": "middle"}, "cpu")
    net = FusedModel(build_model(WIDE, "cpu", "sdpa", 0).float(), get_weight_path("bf16"), 64, backend="triton",
                     gemv_configs={"l2_ahead": {"dense": "evict_last"}, "l2_ahead_mib": {"dense": 1}})
    assert net._l2_ahead is None and "l2_ahead" not in net.describe()
    # the spans as a step with PDL would hand them (set here by hand: the CPU has no PDL)
    net._l2_ahead, net._l2_ahead_bytes = "evict_last", 2**16
    o, gu = net._operand(net.layers[1].o).weight, net._operand(net.layers[1].gate_up).weight
    got = net._l2_spans(1)
    inter, rows = gu.shape[0] // 2, 2**16 // 2 // (gu.shape[1] * gu.element_size())
    assert got[0] is o and got[1].data_ptr() == gu.data_ptr() and got[2].data_ptr() == gu[inter].data_ptr()
    assert got[1].shape[0] == got[2].shape[0] == min(rows, inter) > 0
    assert net.describe()["l2_ahead"] == "evict_last" and net.describe()["l2_ahead_mib"] == 2**16 / 2**20
    heads, plan = net.heads, net.attention_plan
    with pytest.raises(ValueError, match="attention: l2_at 'middle'"):
        fk.attention(net._q, net.k_cache[0], net.v_cache[0], torch.tensor([3]), net._attn, plan=plan, scratch=net._scratch,
                     heads=heads, scale=0.1, l2_ahead=got, l2_at="middle")
