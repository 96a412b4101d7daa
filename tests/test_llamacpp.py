"""llama.cpp as a decode engine (decodegap.measure.engines.llamacpp), on the CPU build of
llama-cpp-python (`.ci/run` builds it from its source distribution; `make test` skips these where it
is not installed): a GGUF file written from a transformers model's own weights decodes the very
tokens of our static step, the step is llama.cpp's decode plus its greedy sampler, one position a
step, and its own quantizer makes the 8- and 4-bit files whose bytes the file itself gives."""

import pytest
import torch

from decodegap.core.config import load_models

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is built from source: envs/README.md (llama.cpp)")

MODELS = load_models()


def _pair(tmp_path, key, ctx=32):
    from decodegap.measure.cards import build_model
    from decodegap.measure.engines.gguf_file import write_gguf
    from decodegap.measure.engines.llamacpp import LlamaCppEngine
    from decodegap.measure.modes import StaticDecoder

    card = MODELS[key]
    model = build_model(card, "cpu", "sdpa", 0)
    # Random weights attend almost uniformly, whatever q and k hold; sharpened, the attention depends
    # on them, so a q/k row order that RoPE reads wrongly (llama's permutation, qwen2's none) shows.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(10)
            layer.self_attn.k_proj.weight.mul_(10)
    out = write_gguf(card, tmp_path / f"{key}.gguf", file_type="f32", state_dict=model.state_dict())
    prompt = torch.randint(0, card.architecture["vocab_size"], (1, ctx), generator=torch.Generator().manual_seed(5))
    return card, model, out, prompt, LlamaCppEngine(out["path"], 128, threads=1), StaticDecoder(model, 128)


def test_a_gguf_of_the_models_own_weights_decodes_our_static_steps_tokens(tmp_path):
    from decodegap.measure.timing import StepTimer

    _, _, _, prompt, engine, static = _pair(tmp_path, "tiny-llama")
    timers = {}
    with torch.inference_mode():
        for name, dec in (("llamacpp", engine), ("static", static)):
            dec.prefill(prompt)
            timers[name] = StepTimer("cpu", 24)
            for _ in range(24):
                timers[name].step(dec)  # launch (llama_decode of one token), read_token (the greedy sampler)
    assert timers["llamacpp"].tokens == timers["static"].tokens and len(set(timers["llamacpp"].tokens)) > 5
    assert engine.final_position() == 32 + 24 and static.final_position() == 32 + 24
    assert all(ms > 0 for ms in timers["llamacpp"].host_ms())
    engine.close()


@pytest.mark.parametrize("key", ["tiny-llama", "tiny-qwen"])
def test_the_rope_order_and_biases_give_transformers_logits(tmp_path, key):
    _, model, _, prompt, engine, _ = _pair(tmp_path, key)
    engine.prefill(prompt)
    with torch.inference_mode():
        ref = model(input_ids=prompt).logits[0, -1].float().numpy()
    mine = engine.last_logits()
    # the model computes in bf16 on the CPU, llama.cpp in float32: within bf16's rounding of the logits
    assert mine.shape == ref.shape and abs(mine - ref).max() < 1e-2 * abs(ref).max()
    engine.close()


def test_llamas_quantizer_makes_smaller_files_and_refuses_to_overwrite(tmp_path):
    from decodegap.measure.engines.gguf_file import identity_problem, stored_bytes, write_gguf
    from decodegap.measure.engines.llamacpp import FORMATS, LlamaCppDecoder, build_info, quantize

    # a card whose rows hold whole 32- and 256-value blocks, so every matrix takes the format
    card = MODELS["tiny-llama"]
    arch = {**card.architecture, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64}
    from decodegap.core.config import ModelCard

    card = ModelCard(**{**vars(card), "architecture": arch})
    f16 = write_gguf(card, tmp_path / "f16.gguf")
    sizes = {"f16": stored_bytes(f16["path"])}
    for fmt in ("q8_0", "q4_0", "q4_k_m"):
        quantize(f16["path"], tmp_path / f"{fmt}.gguf", fmt, threads=1)
        sizes[fmt] = stored_bytes(tmp_path / f"{fmt}.gguf")
        assert sizes[fmt]["param_count"] == sizes["f16"]["param_count"]
        # llama.cpp's quantizer keeps the source's identity: the cache knows its files for the card's
        assert identity_problem(tmp_path / f"{fmt}.gguf", card, FORMATS[fmt], 0) is None
        assert "general.file_type" in identity_problem(tmp_path / f"{fmt}.gguf", card, FORMATS["f16"], 0)
    step = {k: v["step_weight_bytes"] for k, v in sizes.items()}
    assert step["f16"] > step["q8_0"] > step["q4_k_m"] > step["q4_0"]  # 16, 8.5, 4.5+, 4.5 bits a weight
    assert 0.5 < step["q8_0"] / step["f16"] < 0.6 and "Q8_0" in sizes["q8_0"]["types"] and "Q4_0" in sizes["q4_0"]["types"]
    before = (tmp_path / "q8_0.gguf").read_bytes()
    with pytest.raises(FileExistsError):
        quantize(f16["path"], tmp_path / "q8_0.gguf", "q8_0")
    assert (tmp_path / "q8_0.gguf").read_bytes() == before
    with pytest.raises(ValueError, match="q3_k.*one of"):
        quantize(f16["path"], tmp_path / "x.gguf", "q3_k")
    # a quantized file decodes too, in llama.cpp's own process: the loop's samples come back to our timers
    from decodegap.measure.timing import StepTimer

    dec = LlamaCppDecoder(tmp_path / "q4_0.gguf", 64, threads=1)
    dec.prefill(list(range(3, 19)))
    warm, timed = StepTimer("cpu", 2, probe_iterations=100), StepTimer("cpu", 5, probe_iterations=100)
    block_probe_ms, blocks = dec.run(warm, timed, 2)
    assert len(warm) == 2 and len(timed) == 5 and blocks == [0, 0, 1, 1, 2] and len(block_probe_ms) == 3
    assert all(0 <= t < arch["vocab_size"] for t in timed.tokens) and all(ms > 0 for ms in timed.host_ms())
    assert all(ms > 0 for ms in timed.samples()["cpu_probe_before_ms"]) and dec.final_position() == 16 + 7
    assert dec.last_logits().shape == (arch["vocab_size"],) and dec.info["engine"] == "llama.cpp"
    dec.close()
    assert dec.worker.proc.returncode == 0  # its process ends when the session lets it go
    info = build_info()
    assert info["engine"] == "llama.cpp" and info["llama_cpp_python"] and "CPU" in info["system_info"]
    assert info["cuda_graphs"] is False  # a CPU build has no CUDA graphs, and says so


def _serving_children() -> list[int]:
    """This process's children that are llama.cpp's process (a session must end them before its GPU check)."""
    import os
    from pathlib import Path

    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid() \
                    and b"--serve" in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.parametrize("quant", ["gguf-f16", "gguf-q8-0"])
def test_a_llamacpp_session_times_llamas_own_step_on_the_cards_file_and_counts_its_bytes(tmp_path, monkeypatch, measure_main, quant):
    """Mode llamacpp as a cell: the session writes (and quantizes) the card's GGUF file into the
    machine's cache, times llama.cpp's decode plus sampler step by step under the protocol, and the
    floor's bytes are the file's; the second session reuses the file."""
    from decodegap.measure.engines.gguf_file import stored_bytes

    monkeypatch.setenv("DECODEGAP_GGUF_DIR", str(tmp_path / "gguf"))
    rc, rec, _ = measure_main(tmp_path, model="tiny-qwen", mode="llamacpp", quant=quant, session=0)
    assert rc == 0 and rec["status"] == "valid", rec["reasons"]
    (arm,) = rec["arms"]
    assert arm["mode"] == "llamacpp" and "anatomy" not in arm and arm["timed"]["device_ms"] is None
    assert len(arm["timed"]["host_ms"]) == rec["protocol"]["timed_steps"] and all(ms > 0 for ms in arm["timed"]["host_ms"])
    assert arm["final_position"] == arm["expected_position"] == 32 + rec["protocol"]["warmup_steps"] + rec["protocol"]["timed_steps"]
    engine = arm["engine"]
    assert engine["build"]["engine"] == "llama.cpp" and engine["gguf"]["format"] == quant[5:].replace("-", "_")
    assert engine["gguf"]["made_in_session"] is not None  # the first session made the file
    assert engine["gguf"]["identity"]["decodegap.card"] == "tiny-qwen" and engine["gguf"]["identity"]["decodegap.seed"] == 0
    fmt = quant[5:].replace("-", "_")
    on_disk = stored_bytes(tmp_path / "gguf" / f"tiny-qwen-{fmt}.gguf")
    assert rec["floor"]["weight_bytes"] == on_disk["tensor_bytes"]
    # tiny-qwen ties its embeddings: the table is the output layer too, so a step reads all of it
    assert on_disk["tied_embeddings"] and rec["floor"]["weight_bytes_no_embedding"] == on_disk["tensor_bytes"]
    assert rec["arms"][0]["prefill"]["device_ms"] is None  # torch's events would time nothing of llama.cpp's process
    assert not _serving_children(), "the session let its llama.cpp process run on past its end"
    if fmt == "q8_0":
        assert "Q8_0" in on_disk["types"] and rec["floor"]["weight_bytes"] < stored_bytes(tmp_path / "gguf" / "tiny-qwen-f16.gguf")["tensor_bytes"]
    rc, again, _ = measure_main(tmp_path, model="tiny-qwen", mode="llamacpp", quant=quant, session=1)
    assert rc == 0 and again["arms"][0]["engine"]["gguf"]["made_in_session"] is None  # the cache's file, not a new one
    assert again["floor"]["weight_bytes"] == rec["floor"]["weight_bytes"]


def test_the_environment_stage_checks_each_gguf_format_with_llamacpp_itself(monkeypatch):
    from decodegap.measure.weights import get_weight_path

    for quant in ("gguf-f16", "gguf-q4-0"):
        assert get_weight_path(quant).check("cpu") is None, quant
    # llama.cpp's process dying (a crash there) is a reason, named, never this process's crash: an
    # invalid cell in a session (CellNotPossible), a path that cannot run in the environment stage
    from decodegap.core.errors import CellNotPossible
    from decodegap.measure.engines.llamacpp import LlamaCppDecoder

    monkeypatch.setattr("sys.executable", "/bin/false")
    with pytest.raises(CellNotPossible, match="llama.cpp's process ended"):
        get_weight_path("gguf-f16").check("cpu")
    monkeypatch.undo()
    with pytest.raises(CellNotPossible, match="EngineError: llama.cpp could not load"):  # llama.cpp's own refusal: data too
        LlamaCppDecoder("/nonexistent.gguf", 64)


def test_llama_cpp_never_loads_beside_torch():
    """Its CUDA build and torch's crash in one process (seen on the H200): the session's side of the
    engine imports no llama_cpp; the engine's process imports no torch."""
    import subprocess
    import sys

    code = ("import sys, decodegap.measure.engines.llamacpp as m, decodegap.measure.weights; "
            "print('llama_cpp' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"  # nothing of ours imports it where torch may be
    code = ("import sys, io; from decodegap.measure.engines import llamacpp as m; "
            "m.serve(io.StringIO('{\"op\": \"info\"}\\n'), io.StringIO()); print('torch' in sys.modules, 'llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
