"""Beyond the paper, engines at batch 1: transformers' own generate loop as a single-arm cell
(mode generate), planned by the engines experiment and shown in report/tables/engines.tex beside the
floor experiment's graphed, compiled and fused arms of the same GPU, model and context, each number
recomputable from the raw sessions. (The session itself: tests/test_measure.py.)"""

import json

import numpy as np
import pytest

from decodegap.core.config import load_gpus


def _workspace(tmp_path):
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import synthetic

    cells, files = [], []
    for ctx in (2048, 16384):
        for quant, mode, base_ms in (("bf16", "ab-graphed-compiled", 8.0), ("bf16", "ab-graphed-fused", 8.0),
                                     ("fp8", "ab-graphed-fused", 8.0), ("bf16", "generate", 7.5),
                                     ("gguf-q8-0", "llamacpp", 5.0), ("gguf-q4-k-m", "llamacpp", 4.0)):
            cell = dict(gpu="h200", model="qwen2.5-7b", ctx=ctx, attn="sdpa", quant=quant, mode=mode)
            cells.append(cell)
            if mode == "generate" and ctx == 16384:
                continue  # planned, not measured
            rng = np.random.default_rng([ctx, len(quant), len(mode)])
            files.append(fixture_cell_stats(tmp_path, cell, [synthetic.record(cell, s, 64, rng, base_ms=base_ms) for s in range(2)]))
    return cells, files, {k: vars(v) for k, v in load_gpus().items()}, fixture_models()


def test_the_engines_table_sets_generate_beside_graphed_compiled_and_fused(tmp_path):
    from decodegap.analysis import provenance, tables

    cells, files, gpus, models = _workspace(tmp_path)
    tables.engines_table(files, cells, gpus, models, tmp_path / "e.tex", tmp_path / "e.json")
    tex, numbers = (tmp_path / "e.tex").read_text(), json.loads((tmp_path / "e.json").read_text())
    generate_stats = next(s for s in map(lambda f: json.loads(f.read_text()), files) if s["cell"]["mode"] == "generate")
    gen = "h200/qwen2.5-7b/ctx2048/sdpa_bf16_generate"
    assert numbers[f"engines/ms_per_step/{gen}/generate/completed"]["value"] == pytest.approx(
        generate_stats["completed"]["arms"]["generate"]["median_ms"])
    for key in (f"engines/ms_per_step/{gen}/generate/completed", f"engines/r_floor/{gen}/generate/completed",
                f"engines/streamed_TBps/{gen}/generate/completed",
                "engines/ms_per_step/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-compiled/compiled/completed",
                "engines/ms_per_step/h200/qwen2.5-7b/ctx2048/sdpa_fp8_ab-graphed-fused/fused/completed",
                "engines/ms_per_step/h200/qwen2.5-7b/ctx16384/sdpa_bf16_ab-graphed-fused/fused/completed"):
        value, text = provenance.recompute(numbers[key])
        assert value == pytest.approx(numbers[key]["value"]) and text == numbers[key]["text"], key
    # one graphed row per group (from whichever A/B cell has the most sessions), each fused path its row
    assert sum(k.startswith("engines/ms_per_step/") and k.endswith("/graphed/completed") for k in numbers) == 2
    assert tex.count(r"decodegap fused & \texttt{fp8}") == 2
    # the 16384 group's generate cell has no session: its row says so, the others stand
    ctx16 = tex[tex.index("ctx 16384"):]
    assert r"transformers \texttt{generate} & \texttt{bf16} & \multicolumn{4}{l}{not measured}" in ctx16
    assert r"transformers \texttt{generate} & \texttt{bf16} & \dgnum{engines/ms_per_step/h200/qwen2.5-7b/ctx2048/" in tex
    # llama.cpp: a row per GGUF format, each from its own cell
    for fmt in ("gguf-q8-0", "gguf-q4-k-m"):
        key = f"engines/ms_per_step/h200/qwen2.5-7b/ctx2048/sdpa_{fmt}_llamacpp/llamacpp/completed"
        value, text = provenance.recompute(numbers[key])
        assert value == pytest.approx(numbers[key]["value"]) and tex.count(f"llama.cpp & \\texttt{{{fmt}}}") == 2


def test_the_plan_measures_generate_alone_per_card_and_context(tmp_path):
    from conftest import small_config

    from decodegap.core.cells import Plan

    config = small_config()
    config["floor"] = {"gpus": ["h200"], "models": ["qwen2.5-7b", "llama-3.1-8b"], "ctx": [2048, 16384], "attn": "sdpa",
                       "quant": ["bf16"], "modes": ["ab-graphed-fused"], "sessions": 3}
    config["engines"] = {"gpus": ["h200"], "models": ["qwen2.5-7b"], "ctx": [2048, 16384], "attn": "sdpa", "quant": ["bf16"],
                         "modes": ["generate"], "sessions": 2}
    plan = Plan(config, root=tmp_path)
    assert [(c.model, c.ctx, c.mode) for c in plan.engines] == [("qwen2.5-7b", 2048, "generate"), ("qwen2.5-7b", 16384, "generate")]
    assert all(plan.wanted[c] == 2 for c in plan.engines) and set(plan.engines) <= set(plan.cells())
    # the engines table reads the engines' cells and the floor arms of the same card and contexts, not Llama's
    shown = plan.cell_set("engines")
    assert set(plan.engines) <= set(shown) and {c.model for c in shown} == {"qwen2.5-7b"} and len(shown) == 4


@pytest.mark.parametrize("modes, message", [(["ab-graphed-generate"], r"engines.modes"), (["fused"], r"engines.modes")])
def test_generate_is_never_an_ab_arm_and_engines_take_only_engines(modes, message):
    from conftest import small_config

    from decodegap.core.cells import arms_of, validate_config
    from decodegap.core.errors import ConfigError

    config = small_config()
    config["engines"] = {"gpus": ["h200"], "models": ["qwen2.5-7b"], "ctx": [2048], "attn": "sdpa", "quant": ["bf16"],
                         "modes": modes, "sessions": 2}
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
    with pytest.raises(ConfigError, match="generate runs its own decode loop"):
        arms_of("ab-generate-fused")


def test_every_mode_names_the_attention_forms_the_environment_stage_checks():
    """The stage's verdicts (ruled_out) look a mode up by its attention forms: a mode without an entry
    stopped the measure rule's planning with a KeyError."""
    from decodegap.core.cells import LAYER_ARMS, MODE_NAMES
    from decodegap.measure.setup import FORMS_OF_MODE, forms_needed

    assert set(MODE_NAMES) | set(LAYER_ARMS) <= set(FORMS_OF_MODE)
    assert forms_needed("generate") == ("static",)


def test_each_engine_gets_the_formats_it_reads_and_a_format_elsewhere_is_a_config_error_naming_the_key(tmp_path):
    from conftest import small_config

    from decodegap.core.cells import Plan, validate_config
    from decodegap.core.errors import ConfigError

    config = small_config()
    config["engines"] = {"gpus": ["h200"], "models": ["qwen2.5-7b"], "ctx": [2048], "attn": "sdpa",
                         "quant": ["bf16", "gguf-f16", "gguf-q4-k-m"], "modes": ["generate", "llamacpp"], "sessions": 2}
    plan = Plan(config, root=tmp_path)
    assert [(c.quant, c.mode) for c in plan.engines] == [("bf16", "generate"), ("gguf-f16", "llamacpp"), ("gguf-q4-k-m", "llamacpp")]
    bad = dict(config["engines"], quant=["bf16", "gguf-f16"], modes=["generate"])
    with pytest.raises(ConfigError, match=r"engines\.quant\.1: 'gguf-f16' makes no cell: weight path 'gguf-f16' is a file format of the engine 'llamacpp'"):
        validate_config({**config, "engines": bad})
    bad = dict(config["engines"], quant=["bf16"], modes=["generate", "llamacpp"])
    with pytest.raises(ConfigError, match=r"engines\.modes\.1: 'llamacpp' makes no cell: mode 'llamacpp' runs its own model"):
        validate_config({**config, "engines": bad})
    bad = dict(config["engines"], quant=["fp8"], modes=["generate"])
    with pytest.raises(ConfigError, match=r"engines\.modes\.0: 'generate' makes no cell: mode 'generate' runs transformers' dense model"):
        validate_config({**config, "engines": bad})
    with pytest.raises(ConfigError, match=r"attention.step_modes: mode 'llamacpp' runs its own model"):
        validate_config({**config, "attention": {**config["attention"], "step_modes": ["llamacpp"]}})
    with pytest.raises(ConfigError, match=r"matrix: weight path 'gguf-q8-0' is a file format of the engine 'llamacpp'"):
        validate_config({**config, "matrix": {**config["matrix"], "quant": ["gguf-q8-0"]}})


def test_the_session_command_refuses_a_format_its_mode_cannot_read(tmp_path, measure_main):
    rc, rec, _ = measure_main(tmp_path, mode="static", quant="gguf-f16")
    assert rc == 2 and rec is None
    rc, rec, _ = measure_main(tmp_path, mode="llamacpp", quant="bf16")
    assert rc == 2 and rec is None
