"""The attention-backend experiment on the CPU: the path registry and its reasons, the kernel-family
fallback check, the per-layer shape arithmetic, the microbenchmark's decoders, a backend registered
through transformers' attention interface, and the attention tables on fixture records."""

import dataclasses
import json
import shutil
import subprocess
import sys
import types

import pytest
import torch

from decodegap.core.config import load_gpus, load_models
from decodegap.core.errors import CellNotPossible
from decodegap.core.floor import kv_bytes
from decodegap.measure import attention
from decodegap.measure.attention import PATHS, attention_kernels, kernel_family
from decodegap.measure.layer import LayerDecoder, layer_shapes

# Kernel names as the H200's profiler printed them (sessions under results/raw/h200), and as the
# other libraries name theirs.
CUDNN = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0"
TORCH_FLASH = "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>>"
EFFICIENT = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)"
FA3 = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, 1>>>>"
FA2 = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>, false>"
FLASHINFER = "void flashinfer::SingleDecodeWithKVCacheKernel<(flashinfer::PosEncodingMode)0, 4u, 8u, 16u>"
FLEX = "triton_tem_fused_flex_decoding_0"
GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"


def test_the_schema_lists_every_registered_path():
    from decodegap.core.cells import schema_with_keys

    assert schema_with_keys([], [])["$defs"]["attn_key"]["enum"] == sorted(PATHS)
    for name in ("sdpa", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "flex", "fa2", "fa3", "flashinfer", "fa4"):
        assert name in PATHS, name


@pytest.mark.parametrize("name,family", [(CUDNN, "cudnn"), (TORCH_FLASH, "flash"), (EFFICIENT, "efficient"), (FA3, "fa3"),
                                         (FLASHINFER, "flashinfer"), (FLEX, "flex"), (FA2, "fa2"),
                                         ("void (anonymous namespace)::softmax_warp_forward<float>", "math"),
                                         ("triton_red_fused__softmax_0", None), (GEMM, None)])
def test_each_kernel_name_falls_in_its_family(name, family):
    assert kernel_family(name) == family


def test_a_pinned_path_that_ran_another_kernel_is_a_fallback_naming_both():
    names = {GEMM: 200.0, CUDNN: 28.0}
    reason = PATHS["sdpa-flash"].fallback_reason(names)
    assert reason.startswith("fell back: sdpa-flash should run a flash kernel") and "cudnn" in reason
    assert PATHS["sdpa-cudnn"].fallback_reason(names) is None
    assert PATHS["sdpa"].fallback_reason(names) is None  # the dispatcher may choose: its choice is named, not judged
    assert attention_kernels(names) == {"cudnn": [CUDNN]}
    assert "no attention kernel" in PATHS["sdpa"].fallback_reason({GEMM: 1.0})
    # flash-attn's kernels are not PyTorch's copy of them: fa2 falling back to SDPA's flash is caught
    assert "fell back" in PATHS["fa2"].fallback_reason({TORCH_FLASH: 28.0}) and PATHS["fa2"].fallback_reason({FA2: 28.0}) is None
    # a softmax beside a fused attention kernel is another op's, not the math backend
    assert attention_kernels({CUDNN: 28.0, "void (anonymous namespace)::softmax_warp_forward<float>": 1.0}) == {"cudnn": [CUDNN]}
    assert "no attention kernel" in PATHS["flashinfer"].fallback_reason({GEMM: 1.0})


def test_a_missing_package_is_a_precise_reason():
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn importable here")
    reason = PATHS["fa2"].unavailable("cuda")
    assert "package not installed: `import flash_attn` fails" in reason and "published as source only" in reason
    ghost = dataclasses.replace(PATHS["fa3"], module="decodegap_no_such_module")
    assert "`import decodegap_no_such_module` fails (ModuleNotFoundError" in ghost.unavailable("cuda")
    assert PATHS["sdpa-flash"].unavailable("cpu") is None


def test_a_gpu_outside_a_paths_builds_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 9))
    torch_only = dataclasses.replace(PATHS["fa3"], module="torch")
    assert torch_only.unavailable("cuda") == "no build for sm_89: fa3 runs on compute capability 9.0 to 9.0"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert torch_only.unavailable("cuda") is None


@pytest.mark.parametrize("model,layers,hq,hkv", [("qwen2.5-7b", 28, 28, 4), ("llama-3.1-8b", 32, 32, 8), ("mistral-7b-v0.3", 32, 32, 8)])
def test_layer_shapes_are_the_cards_head_layout(model, layers, hq, hkv):
    card = load_models()[model]
    assert layer_shapes(card, 2048, "bhsd") == {"q": (1, hq, 1, 128), "kv": (1, hkv, 2048, 128), "layers": layers}
    assert layer_shapes(card, 2048, "bshd") == {"q": (1, 1, hq, 128), "kv": (1, 2048, hkv, 128), "layers": layers}
    # the bytes one step reads: every layer's K and V, which is the model's KV cache at ctx
    per_layer = 2 * 2048 * hkv * 128 * 2
    assert per_layer * layers == kv_bytes(card.kv_bytes_per_token(), 2048)


def test_heads_that_do_not_group_are_not_possible():
    card = load_models()["tiny-llama"]
    odd = dataclasses.replace(card, architecture={**card.architecture, "num_attention_heads": 5, "num_key_value_heads": 2})
    with pytest.raises(CellNotPossible, match="5 query heads are not a multiple of 2 KV heads"):
        layer_shapes(odd, 64, "bhsd")


def test_a_layer_step_is_one_correct_call_per_layer():
    card = load_models()["tiny-llama"]
    dec = LayerDecoder(card, PATHS["sdpa-math"], 40, "cpu", torch.bfloat16, seed=3)
    assert dec.layers == card.architecture["num_hidden_layers"] and len(set(id(k) for k in dec.k)) == dec.layers
    assert dec.kv_bytes() == kv_bytes(card.kv_bytes_per_token(), 40)  # bf16, as on the GPU: the floor's bytes
    calls = []
    real = dec.call
    dec.call = lambda q, k, v: calls.append(k) or real(q, k, v)
    with torch.inference_mode(), PATHS["sdpa-math"].context():
        dec.prefill()
        for _ in range(3):
            dec.launch()
            dec.read_token()
    assert len(calls) == 4 * dec.layers and calls[-1] is dec.k[-1]
    assert dec.position.item() == 40 + 3
    q, k, v = dec.q.float(), dec.k[-1].float(), dec.v[-1].float()
    group = q.shape[1] // k.shape[1]
    ref = torch.softmax(q @ k.repeat_interleave(group, 1).transpose(-1, -2) / 16 ** 0.5, -1) @ v.repeat_interleave(group, 1)
    assert torch.allclose(dec.out.float(), ref, atol=2e-2)


@pytest.fixture
def fake_flashinfer(monkeypatch):
    """A stand-in for the flashinfer package on the CPU: its decode call, in torch, with the same
    signature and layouts, so that what our code hands it is checked."""
    seen = []

    def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", sm_scale=None, **kw):
        assert q.dim() == 2 and k.dim() == 3 and kv_layout == "HND", (q.shape, k.shape, kv_layout)
        seen.append((tuple(q.shape), tuple(k.shape)))
        group = q.shape[0] // k.shape[0]
        kk, vv = k.float().repeat_interleave(group, 0), v.float().repeat_interleave(group, 0)
        scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
        w = torch.softmax((q.float().unsqueeze(1) @ kk.transpose(-1, -2)).squeeze(1) * scale, -1)
        return (w.unsqueeze(1) @ vv).squeeze(1).to(q.dtype)

    module = types.ModuleType("flashinfer")
    module.single_decode_with_kv_cache = single_decode_with_kv_cache
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    monkeypatch.setattr(attention.AttentionPath, "unavailable", lambda self, device: None)
    return seen


def test_flashinfer_registers_through_transformers_and_decodes_as_sdpa(fake_flashinfer):
    """The same weights, eager decode: our registered function gives sdpa's tokens and logits."""
    from decodegap.measure.cards import build_model
    from decodegap.measure.modes import make_decoder

    card = load_models()["tiny-llama"]
    PATHS["flashinfer"].register()
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, 37), generator=torch.Generator().manual_seed(0))
    tokens = {}
    for attn in ("sdpa", "decodegap-finfer"):
        model = build_model(card, "cpu", attn, seed=5)
        with torch.inference_mode():
            dec = make_decoder("eager", model, 64)
            dec.prefill(prompt)
            tokens[attn] = []
            for _ in range(4):
                dec.launch()
                tokens[attn].append(dec.read_token())
    assert tokens["sdpa"] == tokens["decodegap-finfer"]
    a = card.architecture
    assert fake_flashinfer and fake_flashinfer[-1] == ((a["num_attention_heads"], a["head_dim"]), (a["num_key_value_heads"], 37 + 4, a["head_dim"]))
    model = build_model(card, "cpu", "decodegap-finfer", seed=5)
    with torch.inference_mode(), pytest.raises(CellNotPossible, match="no length or mask"):
        dec = make_decoder("static", model, 64)
        dec.prefill(prompt)
        dec.launch()


def test_the_stage_checks_a_new_paths_own_call_and_rules_out_what_it_cannot(fake_flashinfer, tmp_path):
    from decodegap.measure.setup import build_record, ruled_out

    record = build_record("cpu", ["flashinfer", "sdpa"], ["bf16"], tmp_path)
    fi = record["attention"]["flashinfer"]["checks"]
    assert fi["dynamic"]["runs"] and fi["dynamic"]["max_abs_err"] < 1e-4  # the bare call against float32
    assert not fi["static"]["runs"] and "no length or mask" in fi["static"]["reason"]
    assert ruled_out(record, "flashinfer", "bf16", "layer") is None
    assert "static-cache decode call" in ruled_out(record, "flashinfer", "bf16", "ab-static-graphed")
    assert record["cache_variables"]["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "flashinfer")


def test_the_stage_gives_a_missing_package_as_its_reason(tmp_path):
    from decodegap.measure.setup import build_record

    record = build_record("cpu", ["fa3"], ["bf16"], tmp_path)
    for form in ("dynamic", "static"):
        c = record["attention"]["fa3"]["checks"][form]
        assert not c["runs"] and c["reason"].startswith("package not installed: `import flash_attn_interface` fails")


def test_a_layer_session_on_a_missing_package_is_an_invalid_record_with_its_reason(measure_main, tmp_path):
    rc, rec, _ = measure_main(tmp_path, attn="fa3", mode="layer")
    assert rc == 0 and rec["status"] == "invalid" and rec["arms"] == []
    assert rec["error"]["kind"] == "not possible" and "`import flash_attn_interface` fails" in rec["reasons"][0]


def test_a_layer_session_needs_a_graph_for_its_second_arm(measure_main, tmp_path):
    rc, rec, _ = measure_main(tmp_path, attn="sdpa", mode="layer")
    assert rc == 0 and rec["status"] == "invalid"
    assert rec["reasons"] == ["not possible: layer-graphed needs CUDA graphs; device cpu has none"]


def test_the_batch_runner_measures_every_cells_first_session_first():
    from argparse import Namespace

    from decodegap.measure.batch import planned

    cells = planned(Namespace(gpu="h200", models=["qwen2.5-7b"], ctx=[2048, 4096], modes=["layer"], sessions=[0, 1],
                              attn=["sdpa", "flex"], quant="bf16"))
    assert [(c["session"], c["attn"], c["ctx"]) for c in cells] == [
        (0, "sdpa", 2048), (0, "sdpa", 4096), (0, "flex", 2048), (0, "flex", 4096),
        (1, "sdpa", 2048), (1, "sdpa", 4096), (1, "flex", 2048), (1, "flex", 4096)]


# --- the tables, on fixture records ----------------------------------------------------------------

def _layer_workspace(tmp_path):
    import numpy as np
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import synthetic

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    cells, files = [], []
    for attn in ("sdpa", "sdpa-flash", "fa3"):
        for ctx in (2048, 4096):
            for mode in ("layer", "ab-static-graphed"):
                cell = dict(gpu="h200", model="qwen2.5-7b", ctx=ctx, attn=attn, quant="bf16", mode=mode)
                cells.append(cell)
                records = [synthetic.not_possible_record(cell, s, "package not installed: `import flash_attn_interface` fails")
                           if attn == "fa3" else synthetic.record(cell, s, 64, np.random.default_rng([s, ctx]), base_ms=1.0)
                           for s in range(2)]
                files.append(fixture_cell_stats(tmp_path, cell, records))
    return cells, files, gpus, fixture_models()

def test_the_attention_tables_show_us_per_layer_the_launch_share_and_a_reason(tmp_path):
    from decodegap.analysis import tables
    from decodegap.analysis.reference import load_reference

    cells, files, gpus, models = _layer_workspace(tmp_path)
    tables.attention_table(files, cells, load_reference(), gpus, models, tmp_path / "a.tex", tmp_path / "a.json")
    tex, numbers = (tmp_path / "a.tex").read_text(), json.loads((tmp_path / "a.json").read_text())
    s = json.loads(files[0].read_text())  # sdpa, ctx 2048, layer
    op, gr = s["completed"]["arms"]["layer-op"], s["completed"]["arms"]["layer-graphed"]
    assert op["layers_per_step"] == 28 and abs(op["us_per_layer"] - op["median_ms"] * 1e3 / 28) < 1e-9
    key = "attention/us_per_layer/h200/qwen2.5-7b/ctx2048/sdpa_bf16_layer/layer-op/completed"
    assert numbers[key]["value"] == pytest.approx(op["us_per_layer"]) and f"{op['us_per_layer']:.1f}" in tex
    share = numbers["attention/launch_share/h200/qwen2.5-7b/ctx2048/sdpa_bf16_layer/completed"]["value"]
    assert share == pytest.approx(1 - 1 / s["completed"]["speedup"]["estimate"]) and 0 < share < 1
    assert "28 layers, 28 query / 4 KV heads of 128" in tex
    assert r"\texttt{fa3} & & \multicolumn{6}{l}{cannot run\textsuperscript{a}}" in tex  # 2 contexts x (op, graph, share)
    assert "fa3: not possible: package not installed: `import flash\\_attn\\_interface` fails" in tex
    assert "36.05 (H100 SXM5)" in tex and "79.25 (H100 SXM5)" in tex  # the paper's figures beside ours
    tables.attention_step_table(files, cells, gpus, models, tmp_path / "b.tex", tmp_path / "b.json")
    step = (tmp_path / "b.tex").read_text()
    # a path that cannot run in the model at any context: one row, one note (not a "failed" per cell)
    assert r"Qwen-2.5-7B & \texttt{fa3} & \multicolumn{6}{l}{cannot run\textsuperscript{a}}" in step and "failed" not in step
    assert step.count("fa3: not possible: package not installed") == 1
    assert any(k.startswith("attention_step/speedup/h200/qwen2.5-7b/ctx4096/sdpa-flash") for k in json.loads((tmp_path / "b.json").read_text()))
    if shutil.which("pdflatex"):
        doc = tmp_path / "doc.tex"
        doc.write_text("\\documentclass{article}\\usepackage{booktabs,graphicx}\\begin{document}\\input{a.tex}\\input{b.tex}\\end{document}\n")
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:]


def test_the_attention_figure_draws_each_path(tmp_path):
    from decodegap.analysis import figures
    from decodegap.analysis.reference import load_reference

    cells, files, gpus, models = _layer_workspace(tmp_path)
    out = [tmp_path / "f.pdf", tmp_path / "f.png"]
    figures.attention(files, load_reference(), gpus, models, out)
    assert all(p.stat().st_size > 1000 for p in out)


@pytest.fixture
def fake_fa3(monkeypatch):
    """PyPI's prebuilt FlashAttention-3 module, in torch on the CPU: its two decode calls with their
    layouts ((batch, seq, heads, dim)) and the valid cache length given on the device."""
    calls = []

    def attend(q, k, v, scale, n):
        group = q.shape[2] // k.shape[2]
        kk, vv = (x[0, :n].float().repeat_interleave(group, 1).transpose(0, 1) for x in (k, v))  # (heads, n, dim)
        w = torch.softmax(q[0].float().transpose(0, 1) @ kk.transpose(-1, -2) * scale, -1)
        return (w @ vv).transpose(0, 1).unsqueeze(0).to(q.dtype)

    def flash_attn_func(q, k, v, softmax_scale=None, **kw):
        calls.append(("func", k.shape[1]))
        return attend(q, k, v, softmax_scale or q.shape[-1] ** -0.5, k.shape[1])

    def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, num_splits=0, **kw):
        assert num_splits == 0  # its default: split the KV over the SMs as it sees fit
        if cache_seqlens is None:  # every key valid
            n = k_cache.shape[1]
        else:
            assert cache_seqlens.dtype == torch.int32 and cache_seqlens.shape == (1,)
            n = int(cache_seqlens[0])
        calls.append(("kvcache", n))
        return attend(q, k_cache, v_cache, softmax_scale or q.shape[-1] ** -0.5, n)

    def flash_attn_varlen_func(q, k, v, seqused_k=None, softmax_scale=None, **kw):  # FA4's: no kvcache call
        assert seqused_k.dtype == torch.int32 and seqused_k.shape == (1,)
        calls.append(("varlen", int(seqused_k[0])))
        return attend(q, k, v, softmax_scale or q.shape[-1] ** -0.5, int(seqused_k[0])), None

    module = types.ModuleType("fa3_fwd_interface")
    module.flash_attn_func, module.flash_attn_with_kvcache = flash_attn_func, flash_attn_with_kvcache
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", module)
    cute = types.ModuleType("flash_attn.cute")  # FlashAttention-4's module
    cute.flash_attn_func, cute.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setattr(attention.AttentionPath, "unavailable", lambda self, device: None)
    return calls


@pytest.mark.parametrize("path,mode", [("fa3", "eager"), ("fa3", "static"), ("fa4", "eager"), ("fa4", "static")])
def test_flashattention_decodes_as_sdpa_on_both_caches(fake_fa3, path, mode):
    """Through transformers' interface, from whichever module imports; on the static cache with the
    valid length counted from the mask (FA3: flash_attn_with_kvcache; FA4, which has none: varlen
    with seqused_k)."""
    from decodegap.measure.cards import build_model
    from decodegap.measure.modes import make_decoder

    card = load_models()["tiny-llama"]
    PATHS[path].register()
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, 37), generator=torch.Generator().manual_seed(1))
    tokens = {}
    for attn in ("sdpa", PATHS[path].attn_implementation):
        model = build_model(card, "cpu", attn, seed=7)
        with torch.inference_mode():
            dec = make_decoder(mode, model, 64)
            dec.prefill(prompt)
            tokens[attn] = [(dec.launch(), dec.read_token())[1] for _ in range(4)]
    assert tokens["sdpa"] == tokens[PATHS[path].attn_implementation]
    kind = "kvcache" if path == "fa3" else {"eager": "func", "static": "varlen"}[mode]  # FA4 has no kvcache call
    assert fake_fa3[-1] == (kind, 37 + 4)  # the last step saw exactly the keys written so far


def test_a_kernel_missing_for_one_head_layout_rules_out_only_that_layouts_cells(fake_flashinfer, tmp_path, monkeypatch):
    """FlashInfer's decode has no kernel for 7 query heads per KV head (Qwen-2.5-7B's 28/4) but runs
    Llama's 32/8: the stage keeps each layout's verdict and a cell is judged by its card's."""
    from decodegap.measure.setup import build_record, ruled_out

    real = sys.modules["flashinfer"].single_decode_with_kv_cache

    def picky(q, k, *a, **kw):
        if q.shape[0] // k.shape[0] == 7:
            raise RuntimeError("Error in function 'SingleDecodeWithKVCacheDispatched': Unsupported group_size: 7")
        return real(q, k, *a, **kw)

    monkeypatch.setattr(sys.modules["flashinfer"], "single_decode_with_kv_cache", picky)
    models = load_models()
    qwen, llama = models["qwen2.5-7b"].attention_layout, models["llama-3.1-8b"].attention_layout
    assert (qwen, llama) == ("28/4/128", "32/8/128")
    record = build_record("cpu", ["flashinfer"], ["bf16"], tmp_path, layouts=[qwen, llama])
    dynamic = record["attention"]["flashinfer"]["checks"]["dynamic"]
    assert not dynamic["runs"] and dynamic["layouts"][llama] is None and "Unsupported group_size: 7" in dynamic["layouts"][qwen]
    assert dynamic["reason"].startswith("layout 28/4/128: flashinfer-python's kernel fails here")
    assert "Unsupported group_size: 7" in ruled_out(record, "flashinfer", "bf16", "layer", qwen)
    assert ruled_out(record, "flashinfer", "bf16", "layer", llama) is None
    assert ruled_out(record, "flashinfer", "bf16", "layer", "4/2/16") is None  # never checked: the session finds out


def test_the_reason_pytorch_gives_only_as_a_warning_is_kept():
    """On CUDA a pinned SDPA backend that cannot take the call raises "No available kernel" and says
    why only in warnings; the stage keeps the one that names the constraint."""
    import warnings as w

    from decodegap.measure.setup import why_no_kernel

    said = [w.WarningMessage(UserWarning(m), UserWarning, "x", 1) for m in (
        "Memory efficient kernel not used because: (Triggered internally at sdp_utils.cpp:986.)",
        "Memory Efficient attention has been runtime disabled. (Triggered internally at sdp_utils_cpp.h:552.)",
        "For dense input, both fused kernels require query, key and value to have the same num_heads. Query.sizes(): "
        "[1, 28, 1, 128], Key sizes(): [1, 4, 515, 128] (Triggered internally at sdp_utils_cpp.h:418.)")]
    assert why_no_kernel(said).startswith("For dense input, both fused kernels require query, key and value to have the same num_heads")
    assert "Triggered" not in why_no_kernel(said)
    assert why_no_kernel(said[:2]) is None


def test_the_in_model_check_runs_at_each_layouts_heads():
    """The stage's decode check steps a two-layer card with the layout's own heads and head dim, not
    a tiny card's: a kernel that takes head dim 128 but not 16 is judged at 128."""
    from decodegap.measure.setup import check_card

    card = check_card("28/4/128")
    a = card.architecture
    assert (a["num_attention_heads"], a["num_key_value_heads"], a["head_dim"], a["hidden_size"], a["num_hidden_layers"]) == (28, 4, 128, 3584, 2)
    assert card.attention_layout == "28/4/128"


def test_a_layer_session_lengthens_its_blocks_until_its_fastest_arm_passes_min_duration():
    from decodegap.core.protocol import Protocol, layer_block_steps

    p = Protocol()
    # A graphed cuDNN layer step on the H200 is ~0.23 ms: 96-step blocks timed 0.196 s, "too short".
    steps = layer_block_steps(p, [[1.0, 1.1, 0.9], [0.23, 0.24, 0.22]])
    assert steps > p.layer_block_steps
    assert p.ab_blocks * steps * 0.23e-3 >= 2 * p.min_duration_s
    # A math step at ctx 16384 takes ~20 ms: the least block length is already long enough.
    assert layer_block_steps(p, [[20.0], [18.0]]) == p.layer_block_steps
    assert layer_block_steps(p, [[], []]) == p.layer_block_steps
