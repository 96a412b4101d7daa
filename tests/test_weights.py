"""Weight paths on the CPU: each quantized path's packing, the bytes it stores (scales included, so
R_floor stays honest), its reasons when it cannot run, and a decode step through the packed model."""

import dataclasses
import importlib

import pytest
import torch

from decodegap.core.config import load_models
from decodegap.measure.weights import PATHS, get_weight_path
from decodegap.measure.weights.int4_tinygemm import dequantize_int4_groups, quantize_int4_groups


def test_int4_groups_round_trip_within_half_a_step():
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(0)) / 16
    q, sz = quantize_int4_groups(w, 128)
    assert q.dtype == torch.int32 and int(q.min()) >= 0 and int(q.max()) <= 15
    assert sz.shape == (512 // 128, 64, 2) and sz.dtype == torch.bfloat16
    step = sz.float()[..., 0].transpose(0, 1).repeat_interleave(128, dim=1)  # each weight's scale
    err = (dequantize_int4_groups(q, sz, 128) - w).abs()
    assert bool((err <= 0.5 * step + 1e-2 * w.abs().max()).all())  # rounding, plus the bf16 scales' own error
    with pytest.raises(ValueError, match="not a multiple of the group size 128"):
        quantize_int4_groups(torch.randn(8, 100), 128)


def test_the_int4_kernel_check_passes_on_the_cpu():
    assert get_weight_path("int4-tinygemm").check("cpu") is None


def _card(hidden=256, layers=2):
    base = load_models()["tiny-llama"]
    arch = {**base.architecture, "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": hidden // 4, "num_hidden_layers": layers}
    return dataclasses.replace(base, architecture=arch)


# Bytes each path stores for one N x K linear layer, from its format's definition: the test's own
# arithmetic, not the code's, so a path that drops its scales from W fails here.
STORED_BYTES = {
    # 4-bit values, two per byte; a bf16 scale and a bf16 zero point per group of 128 columns per row
    "int4-tinygemm": lambda n, k: n * k // 2 + (k // 128) * n * 2 * 2,
    # 4-bit values, two per byte; a float32 absmax per block of 64 weights; the 16-entry float32 NF4 table
    "bnb-nf4": lambda n, k: n * k // 2 + (n * k // 64) * 4 + 16 * 4,
    # int32 words of eight 4-bit values; an fp16 scale per group of 128 rows and column; int32 words of eight 4-bit zeros
    "gptq-exllamav2": lambda n, k: (k // 8) * n * 4 + (k // 128) * n * 2 + (k // 128) * (n // 8) * 4,
    # Marlin's tiles of the AWQ int4 values (K/16 x 2N int32); a bf16 scale per group and column; int32 words of eight zeros
    "awq-marlin": lambda n, k: (k // 16) * (2 * n) * 4 + (k // 128) * n * 2 + (k // 128) * (n // 8) * 4,
    # int32 words of eight 4-bit values; a bf16 scale and a bf16 zero per group of 128 and column
    "gemlite": lambda n, k: (k // 8) * n * 4 + (k // 128) * n * 2 * 2,
    # one e4m3 byte a weight; a float32 scale per row (output channel)
    "fp8": lambda n, k: n * k + n * 4,
    # int32 words of eight 4-bit values along K; a bf16 scale and a bf16 zero per group of 128 columns and row
    "int4-triton": lambda n, k: (k // 8) * n * 4 + (k // 128) * n * 2 * 2,
}


@pytest.mark.parametrize("name", sorted(STORED_BYTES))
def test_each_path_says_what_its_format_stores(name):
    """The path's own byte count (which the stage's check holds the packed layer to) is the format's."""
    for n, k in ((1024, 4096), (18944, 3584), (512, 14336)):
        assert PATHS[name].bytes_per_layer(n, k) == STORED_BYTES[name](n, k)


def _runs_here(name):
    return PATHS[name].unavailable("cpu") is None


@pytest.mark.parametrize("name", sorted(STORED_BYTES))
def test_a_packed_path_stores_what_its_format_says(name):
    if not _runs_here(name):
        pytest.skip(f"{name}: {PATHS[name].unavailable('cpu')}")
    from decodegap.measure.cards import build_model
    from decodegap.measure.modes import make_decoder

    card = _card()
    model = build_model(card, "cpu", "sdpa", seed=1)
    dense = PATHS["bf16"].stored(model)
    linears = [m for layer in model.model.layers for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    linear_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    packed_bytes = sum(STORED_BYTES[name](m.out_features, m.in_features) for m in linears)
    model = PATHS[name].prepare(model)
    assert not [m for layer in model.model.layers for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    assert isinstance(model.lm_head, torch.nn.Linear)  # the output projection stays dense
    stored = PATHS[name].stored(model)
    assert stored.weight_bytes == dense.weight_bytes - linear_bytes + packed_bytes
    assert stored.param_count == dense.param_count  # the card's parameters, not the packed tensors' element count
    assert stored.weight_bytes - stored.weight_bytes_no_embedding == dense.weight_bytes - dense.weight_bytes_no_embedding
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, 21), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        dec = make_decoder("static", model, 40)
        dec.prefill(prompt)
        for _ in range(2):
            dec.launch()
            assert 0 <= dec.read_token() < card.architecture["vocab_size"]


@pytest.mark.parametrize("name", sorted(STORED_BYTES))
def test_a_packed_path_multiplies_by_the_weights_it_stores(name):
    """The check the environment stage runs: a GEMV through the packed layer against float32 on the
    dequantized weights, and a clear reason instead when the package is missing."""
    why = PATHS[name].unavailable("cpu")
    if why:
        assert why.startswith(("package not installed", f"{name} has a CUDA kernel only", "its kernels do not build"))
        assert PATHS[name].check("cpu") == why
    else:
        assert PATHS[name].check("cpu") is None


def test_the_packed_check_tolerates_bf16_accumulation_but_not_a_wrong_layout():
    """The H200 case: gemlite's bf16 split-K sums erred by 0.11 at an output RMS of 1 on one machine,
    a right kernel; a transposed layout, a lost scale or a zero output errs by the output's size."""
    from decodegap.measure.weights import gemv_disagrees

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 4096, generator=g), torch.randn(1024, 4096, generator=g) / 64
    reference = x @ w.T  # RMS about 1
    bf16_sums = reference + 0.11 * torch.sign(torch.randn(reference.shape, generator=g))
    assert gemv_disagrees(bf16_sums, reference) is None
    wrong_layout = x @ w.reshape(4096, 1024)  # the stored buffer read in the other order
    for wrong in (wrong_layout, torch.zeros_like(reference), 2 * reference):
        why = gemv_disagrees(wrong, reference)
        assert why is not None and why.startswith("wrong result: max abs error") and "RMS" in why
    assert gemv_disagrees(reference.clone().fill_(float("nan")), reference) == "wrong result: the output has non-finite values"


def test_a_missing_package_is_the_reason_a_path_cannot_run(monkeypatch):
    real = importlib.import_module

    def no_bnb(name, *a, **k):
        if name.split(".")[0] == "bitsandbytes":
            raise ModuleNotFoundError("No module named 'bitsandbytes'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", no_bnb)
    why = PATHS["bnb-nf4"].unavailable("cpu")
    assert why.startswith("package not installed: `import bitsandbytes` fails (ModuleNotFoundError") and "pip install bitsandbytes" in why
    assert PATHS["bnb-nf4"].check("cpu") == why


def test_gptq_packs_eight_rows_per_word_and_a_zero_of_eight():
    from decodegap.measure.weights.gptq_exllamav2 import pack_gptq, unpack_gptq

    w = torch.randn(16, 256, generator=torch.Generator().manual_seed(3)) / 16
    qweight, qzeros, scales = pack_gptq(w, 128)
    assert qweight.shape == (256 // 8, 16) and qzeros.shape == (2, 2) and scales.shape == (2, 16) and scales.dtype == torch.float16
    s = scales.float().repeat_interleave(128, 0)  # K x N
    q = (w.t() / s).round().clamp(-8, 7) + 8  # the format's values, K x N
    for k, n in ((0, 0), (7, 3), (8, 3), (255, 15), (130, 9)):
        assert (int(qweight[k // 8, n]) >> (4 * (k % 8))) & 15 == int(q[k, n])
    assert all((int(z) >> (4 * i)) & 15 == 7 for z in qzeros.flatten().tolist() for i in range(8))  # v1 stores zero - 1
    err = (unpack_gptq(qweight, qzeros, scales, 128) - w).abs()
    assert bool((err <= 0.5 * s.t() + 1e-3).all())


def test_gemlite_input_round_trips_within_half_a_step():
    from decodegap.measure.weights.gemlite import dequantize_gemlite, quantize_gemlite

    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(4)) / 16
    q, scales, zeros = quantize_gemlite(w, 128)
    assert q.dtype == torch.uint8 and int(q.max()) <= 15 and scales.shape == zeros.shape == (32, 2)
    err = (dequantize_gemlite(q, scales, zeros, 128) - w).abs()
    assert bool((err <= 0.5 * scales.float().repeat_interleave(128, 1) + 2e-2 * w.abs().max()).all())


def test_awq_packs_eight_columns_per_word_in_its_nibble_order():
    from decodegap.measure.weights.awq_marlin import AWQ_ORDER, pack_awq, unpack_awq

    w = torch.randn(16, 256, generator=torch.Generator().manual_seed(5)) / 16
    qweight, qzeros, scales = pack_awq(w, 128)
    assert qweight.shape == (256, 2) and qzeros.shape == (2, 2) and scales.shape == (2, 16)
    g = w.reshape(16, 2, 128)
    lo, hi = g.amin(-1), g.amax(-1)
    s = (hi - lo) / 15
    z = (-lo / s).round()  # N x K/G
    q = (g / s.unsqueeze(-1) + z.unsqueeze(-1)).round().clamp(0, 15).reshape(16, 256)  # N x K
    for k, n in ((0, 0), (5, 1), (130, 9), (255, 15)):
        word, slot = n // 8, AWQ_ORDER.index(n % 8)  # column n sits in nibble AWQ_ORDER.index(n % 8) of word n // 8
        assert (int(qweight[k, word]) >> (4 * slot)) & 15 == int(q[n, k])
        assert (int(qzeros[k // 128, word]) >> (4 * slot)) & 15 == int(z[n, k // 128])
    err = (unpack_awq(qweight, qzeros, scales, 128) - w).abs()
    assert bool((err <= s.repeat_interleave(128, 1) + 1e-6).all())  # value and zero each round by half a step


def test_marlin_without_its_sources_says_how_to_lay_them_out(monkeypatch, tmp_path):
    from decodegap.measure.weights import awq_marlin as weights

    monkeypatch.setenv(weights.MARLIN_SRC, str(tmp_path / "none"))
    with pytest.raises(ModuleNotFoundError, match="envs/build_marlin.py <vllm sdist>"):
        weights.marlin_ops()


def test_fp8_rows_scale_to_the_format_range_and_round_to_nearest():
    from decodegap.measure.weights.fp8 import quantize_fp8_rows

    w = torch.randn(16, 96, generator=torch.Generator().manual_seed(6)) * torch.logspace(-3, 1, 16)[:, None]
    q, scale = quantize_fp8_rows(w)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.shape == (16,)
    assert torch.equal(q.float().abs().amax(1), torch.full((16,), 448.0))  # each row's largest weight at e4m3's largest value
    err = (q.float() * scale[:, None] - w).abs()
    assert bool((err <= 2.0**-4 * w.abs() + 2.0**-9 * scale[:, None]).all())  # half of e4m3's 3-bit mantissa step (subnormals: 2^-9)


def test_int4_words_place_column_16j_plus_i_of_a_group_in_nibble_j_of_word_i():
    """The int4-triton format by its definition: word i of a group of a row holds the group's column
    16 j + i in bits 4j..4j+3; integer zeros; w ~ (q - zero) * scale within half a step, and dense()
    is exactly (q - zero) * scale."""
    from decodegap.measure.weights.int4_triton import quantize_int4_words

    w = torch.randn(8, 256, generator=torch.Generator().manual_seed(7)) / 16
    words, scales, zeros = quantize_int4_words(w)
    assert words.dtype == torch.int32 and words.shape == (8, 32) and scales.shape == zeros.shape == (8, 2)
    assert scales.dtype == zeros.dtype == torch.bfloat16 and torch.equal(zeros.float().round(), zeros.float())
    s, z = scales.float().repeat_interleave(128, 1), zeros.float().repeat_interleave(128, 1)
    q = (w / s + z).round().clamp(0, 15)  # the format's values, N x K
    for row, col in ((0, 0), (1, 5), (2, 16), (3, 127), (4, 128), (5, 200), (7, 255)):
        group, within = divmod(col, 128)
        j, i = divmod(within, 16)
        word = int(words[row, group * 16 + i]) & 0xFFFFFFFF
        assert (word >> (4 * j)) & 15 == int(q[row, col]), (row, col)
    assert bool((((q - z) * s - w).abs() <= 0.5 * s + 1e-6).all())
    lin = torch.nn.Linear(256, 8, bias=False).requires_grad_(False)
    lin.weight.copy_(w)
    packed = PATHS["int4-triton"].pack(lin)
    assert torch.equal(packed.qweight, words) and torch.equal(PATHS["int4-triton"].dense(packed), (q - z) * s)


@pytest.mark.parametrize("name", ["fp8", "int4-triton"])
def test_our_packed_layers_store_their_bytes_and_dense_is_what_the_kernel_multiplies_by(name):
    """module_bytes == bytes_per_layer, and a batch-1 call (our Triton GEMV, under the interpreter)
    equals x @ dense().T at float32: dense() is the weight the kernel reads, not an approximation."""
    g = torch.Generator().manual_seed(8)
    lin = torch.nn.Linear(384, 40, bias=True).requires_grad_(False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(40, 384, generator=g) / 20)
    mod = PATHS[name].pack(lin)
    from decodegap.measure.weights import module_bytes

    assert module_bytes(mod) - lin.bias.numel() * 4 == PATHS[name].bytes_per_layer(40, 384) == STORED_BYTES[name](40, 384)
    assert set(mod.weight_buffers) == ({"weight_fp8", "weight_scale"} if name == "fp8" else {"qweight", "scales", "zeros"})
    x = torch.randn(1, 384, generator=g)
    with torch.no_grad():
        got = mod(x)
        ref = x.double() @ PATHS[name].dense(mod).double().T + lin.bias.double()
        prefill = mod(x.repeat(3, 1))  # several rows: the dequantized matmul
    assert float((got.double() - ref).abs().max()) < 1e-5 * float(ref.abs().max())
    assert torch.allclose(prefill[1:2], got, atol=1e-5)
