"""The fused step's Triton kernels (decodegap.measure.fused_kernels) under Triton's CPU interpreter
(tests/conftest.py switches it on before anything imports triton): each kernel against a float64
reference on fresh random inputs with ragged sizes and NaN-poisoned outputs, and the whole kernel
step against the transformers model's logits on the tiny cards.

The interpreter's tl.dot on bf16 operands is wrong (Triton 3.6 on numpy 2: a 16 x 16 product errs by
1e9), so the attention kernel, the one with tl.dot, is checked at float32 here and in bf16 on the
GPU (benchmarks/fused_kernels.py, and every fused session's logit check)."""

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from decodegap.core.config import load_models  # noqa: E402
from decodegap.measure import fused_kernels as fk  # noqa: E402
from decodegap.measure.cards import build_model  # noqa: E402
from decodegap.measure.fused import FusedModel, logit_check  # noqa: E402
from decodegap.measure.modes import make_decoder  # noqa: E402
from decodegap.measure.weights import get_weight_path  # noqa: E402

# float32 kernels against float64: summation order alone (~1e-7). bf16: the kernels round where
# transformers rounds (the normalised input, its scaled copy, the linear's output, the activation),
# up to 2^-9 of each value a time, 0.4-1.1e-2 in norm measured here; a wrong kernel errs by O(1).
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
SMALL = fk.GemvConfig(rows=4, block_k=32, warps=4)  # small tiles, so the tiny shapes run several programs and K steps


def _rel(got, ref):
    assert not torch.isnan(got).any(), "an output element was never written"
    return float((got.double() - ref).norm() / ref.norm())


def _rms64(x, g, eps):
    x = x.double()
    return g.double() * x * torch.rsqrt(x.pow(2).mean() + eps)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(torch.randint(0, 2**31, ()).item())  # fresh inputs each run, as on the GPU


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(24, 64), (37, 96)])  # 37 rows: the last program half empty; 96: K not a power of 2
def test_linear_with_norm_bias_and_residual_in_place(dtype, n, k, gen):
    x = torch.randn(k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b, g = torch.randn(n, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    res = torch.randn(n, generator=gen).to(dtype)
    out = torch.full((n,), float("nan"), dtype=dtype)
    fk.linear(x, w, out, SMALL)
    assert _rel(out, w.double() @ x.double()) < TOL[dtype]
    out = res.clone()  # residual in place, as the o and down projections add into x
    fk.linear(x, w, out, SMALL, b=b, g=g, eps=1e-5, residual=out)
    ref = res.double() + w.double() @ _rms64(x, g, 1e-5) + b.double()
    assert _rel(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gate_up_is_silu_of_gate_times_up_from_either_input(dtype, gen):
    inter, k = 40, 64
    x, g = torch.randn(k, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    w = (torch.randn(2 * inter, k, generator=gen) / 4).to(dtype)
    y64 = w.double() @ _rms64(x, g, 1e-6)
    ref = torch.nn.functional.silu(y64[:inter]) * y64[inter:]
    out = torch.full((inter,), float("nan"), dtype=dtype)
    fk.gate_up(x, w, g, 1e-6, out, inter, SMALL)
    assert _rel(out, ref) < TOL[dtype]
    out.fill_(float("nan"))  # a packed path's output: the epilogue alone
    fk.gate_up(x, None, g, 1e-6, out, inter, SMALL, y=y64.to(dtype))
    assert _rel(out, ref) < TOL[dtype]


def _rotate64(v, cos, sin):
    half = v.shape[-1] // 2
    return v * torch.cat((cos, cos)) + torch.cat((-v[..., half:], v[..., :half]), dim=-1) * torch.cat((sin, sin))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qkv_rope_turns_q_and_k_and_appends_k_and_v_at_the_position_only(dtype, gen):
    hq, hkv, d, k, length, pos = 4, 2, 16, 64, 12, 7
    x, g = torch.randn(k, generator=gen).to(dtype), (1 + torch.randn(k, generator=gen) / 4).to(dtype)
    w = (torch.randn((hq + 2 * hkv) * d, k, generator=gen) / 8).to(dtype)
    b = torch.randn((hq + 2 * hkv) * d, generator=gen).to(dtype)
    angles = torch.arange(length).double()[:, None] * (1e4 ** (-torch.arange(0, d, 2).double() / d))[None, :]
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    sentinel = 123.0
    q = torch.full((hq * d,), float("nan"), dtype=dtype)
    kc, vc = torch.full((hkv, length, d), sentinel, dtype=dtype), torch.full((hkv, length, d), sentinel, dtype=dtype)
    fk.qkv_rope(x, w, b, g, 1e-6, cos, sin, torch.tensor([pos]), q, kc, vc, hq, hkv, d, fk.GemvConfig(4, 32, 4))
    y = w.double() @ _rms64(x, g, 1e-6) + b.double()
    qr, kr, vr = y.split([hq * d, hkv * d, hkv * d])
    c, s = cos[pos].double(), sin[pos].double()
    assert _rel(q, _rotate64(qr.view(hq, d), c, s).reshape(-1)) < TOL[dtype]
    assert _rel(kc[:, pos], _rotate64(kr.view(hkv, d), c, s)) < TOL[dtype]
    assert _rel(vc[:, pos], vr.view(hkv, d)) < TOL[dtype]
    others = torch.arange(length) != pos
    assert (kc[:, others] == sentinel).all() and (vc[:, others] == sentinel).all(), "a cache row other than the position's was written"


@pytest.mark.parametrize("pos", [0, 15, 16, 37, 47])  # the first slot, either side of a split's edge, the last slot
@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 16), (6, 2, 8), (7, 1, 32)])  # groups of 2, 3 and 7 (Qwen's), head_dim 8 padded to 16
def test_attention_over_the_cache_up_to_the_position(pos, hq, hkv, d, gen):
    length = 48
    plan = fk.AttentionPlan.for_cache(length, hkv, block_t=16, programs=3 * hkv)  # 3 splits of 16: several per head
    assert plan.n_splits * plan.split >= length and plan.n_splits == 3
    q = torch.randn(hq * d, generator=gen)
    kc, vc = torch.randn(hkv, length, d, generator=gen), torch.randn(hkv, length, d, generator=gen)
    kc[:, pos + 1:] = 1e4  # positions past the step's own: attending to any would swamp the result
    vc[:, pos + 1:] = float("nan")
    out = torch.full((hq * d,), float("nan"))
    fk.attention(q, kc, vc, torch.tensor([pos]), plan, fk.attention_scratch(plan, hq, hkv, d, "cpu"), out, hq, hkv, d, d**-0.5)
    qq = q.double().view(hkv, hq // hkv, d)
    scores = qq @ kc[:, : pos + 1].double().transpose(1, 2) * d**-0.5
    ref = (scores.softmax(-1) @ vc[:, : pos + 1].double()).reshape(-1)
    assert _rel(out, ref) < TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_norm_adds_the_residual_and_normalises_for_the_next_layer(dtype, gen):
    h = 72
    x, y = torch.randn(h, generator=gen).to(dtype), torch.randn(h, generator=gen).to(dtype)
    g = (1 + torch.randn(h, generator=gen) / 4).to(dtype)
    x0, xn = x.clone(), torch.full((h,), float("nan"), dtype=dtype)
    fk.add_norm(x, y, g, 1e-5, xn)
    total = x0.double() + y.double()
    assert _rel(x, total) < TOL[dtype] and _rel(xn, _rms64(total, g, 1e-5)) < TOL[dtype]
    fk.add_norm(x, None, g, 1e-5, xn)  # the first layer's norm: no add
    assert _rel(x, total) < TOL[dtype]


def test_the_attention_plan_fills_the_gpu_at_every_cache_length():
    for length in (2048 + 200, 16384 + 200):
        for hkv in (4, 8):
            plan = fk.AttentionPlan.for_cache(length, hkv)
            assert plan.split % plan.block_t == 0 and plan.n_splits * plan.split >= length > (plan.n_splits - 1) * plan.split
            assert fk.ATTENTION_PROGRAMS / 2 <= plan.n_splits * hkv <= fk.ATTENTION_PROGRAMS * 1.5


def _card(key, **arch):
    card = load_models()[key]
    return dataclasses.replace(card, architecture={**card.architecture, **arch})


KERNEL_CARDS = {
    "tiny-qwen": _card("tiny-qwen"),  # q/k/v biases, tied embeddings, head_dim 8, 3 query heads per KV head
    "tiny-llama3-rope": _card("tiny-llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
}


@pytest.mark.parametrize("name", sorted(KERNEL_CARDS))
def test_the_kernel_step_gives_the_models_logits_at_float32(name):
    model = build_model(KERNEL_CARDS[name], "cpu", "sdpa", 0).float()
    net = FusedModel(model, get_weight_path("bf16"), 64, backend="triton", gemv_configs={"lm_head": SMALL, "gate_up": SMALL})
    check = logit_check(model, net, prompt_tokens=20, steps=3)
    assert check["rel_l2_max"] <= 1e-5 and check["top1_agree"] == check["compared"], check
    assert net.describe()["gemv"]["lm_head"] == SMALL.as_dict() and net.describe()["attention"]["splits"] >= 1


def test_the_kernel_step_runs_a_packed_paths_gemvs_with_the_same_epilogues():
    """int4-tinygemm: the path's own matmuls (the CPU kernel here), the kernels' RoPE, append, SiLU and
    residual-plus-norm around them; the same logits as the packed transformers model."""
    card = _card("tiny-llama", hidden_size=256, intermediate_size=256, head_dim=64)  # whole groups of 128 columns
    path = get_weight_path("int4-tinygemm")
    dense = build_model(card, "cpu", "sdpa", 0).float()
    net = FusedModel(dense, path, 64, backend="triton")
    check = logit_check(path.prepare(dense), net)
    assert net.describe()["weights"] == "packed by the path"
    assert check["rel_l2_max"] <= 1e-5 and check["agrees"], check


def test_the_fused_decoder_decodes_the_static_caches_tokens_with_the_kernels():
    """The mode on the kernel backend: no torch.compile (compile_s is the first call), the same tokens
    as the static cache, the step's description ready for the session."""
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
    assert 0 < dec.jit_s < dec.compile_s  # the kernels' first launch (their JIT) counts, though it ran before the logit check
    assert tokens["fused"] == tokens["static"][-len(tokens["fused"]):]


def test_unknown_launch_roles_and_backends_are_named():
    model = build_model(KERNEL_CARDS["tiny-qwen"], "cpu", "sdpa", 0).float()
    with pytest.raises(ValueError, match="unknown role.*qkvv.*roles are qkv, o, gate_up, down, lm_head"):
        FusedModel(model, get_weight_path("bf16"), 32, backend="triton", gemv_configs={"qkvv": SMALL})
    with pytest.raises(ValueError, match="fused backend 'cuda'"):
        FusedModel(model, get_weight_path("bf16"), 32, backend="cuda")
