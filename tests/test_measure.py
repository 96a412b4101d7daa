"""A real measured session end to end on the CPU with tiny cards, and every invalid path."""

import json

import pytest
import torch

from conftest import FAST as FAST_ARGS
from conftest import run_measure
from decodegap.measure import session as measure
from decodegap.core.config import load_models
from decodegap.core.record import read_session, schema_errors

CARD = load_models()["tiny-llama"]


def test_fresh_process_session_end_to_end(tmp_path):
    proc = run_measure(tmp_path, mode="eager", ctx=48, session=2)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "results/raw/cpu/tiny-llama/ctx48/sdpa_bf16_eager/s02.json"
    rec = read_session(path)  # parses and validates against the schema
    assert schema_errors(rec) == []
    assert rec["status"] == "valid", rec["reasons"]
    assert rec["cell"] == {"gpu": "cpu", "model": "tiny-llama", "ctx": 48, "attn": "sdpa", "quant": "bf16", "mode": "eager"}
    assert rec["seed"] == 2 and rec["session"] == 2
    (arm,) = rec["arms"]
    assert len(arm["timed"]["host_ms"]) == 40 and len(arm["warmup"]["host_ms"]) == 2
    assert arm["timed"]["device_ms"] is None  # a CPU has no device clock
    assert len(arm["timed"]["tokens"]) == 40 and all(0 <= t < 512 for t in arm["timed"]["tokens"])
    assert arm["final_position"] == arm["expected_position"] == 48 + 2 + 40
    # The host side of each step: thread CPU time per step, a CPU-speed probe before each block.
    cpu, host = arm["timed"]["host_cpu_ms"], arm["timed"]["host_ms"]
    assert len(cpu) == 40 and all(c > 0 for c in cpu)
    assert sum(cpu) <= 1.2 * sum(host) + 1.0  # a thread cannot run longer than the wall clock
    block_steps = rec["protocol"]["ab_block_steps"]
    assert arm["timed"]["block"] == [i // block_steps for i in range(40)]
    assert len(rec["cpu_probe"]["ms_before_block"]) == -(-40 // block_steps)
    assert all(ms > 0 for ms in rec["cpu_probe"]["ms_before_block"])
    probes = rec["protocol"]["step_probe_iterations"]
    assert probes > 0 and len(arm["timed"]["cpu_probe_before_ms"]) == len(arm["timed"]["cpu_probe_after_ms"]) == 40
    for snap in ("host_start", "host_before_timed", "host_end"):
        assert {"steal_s", "run_delay_ms", "cpu_affinity"} <= set(rec["environment"][snap])  # None where the kernel hides them
    # the machine the statistics resample: this host's boot (the GPU's UUID where there is one)
    from decodegap.core.record import machine_id

    with open("/proc/sys/kernel/random/boot_id") as f:
        assert rec["environment"]["boot_id"] == f.read().strip()
    assert machine_id(rec["environment"]).endswith("/" + rec["environment"]["boot_id"])
    floor = rec["floor"]
    assert floor["param_count"] == CARD.param_count()
    assert floor["weight_bytes"] == 2 * CARD.param_count()
    assert floor["weight_bytes_no_embedding"] == 2 * (CARD.param_count() - CARD.embedding_params())
    assert floor["kv_bytes"] == 48 * CARD.kv_bytes_per_token()
    assert floor["t_floor_s"] == pytest.approx((floor["weight_bytes"] + floor["kv_bytes"]) / 2.0e10)
    assert floor["copy_bandwidth_Bps"] > 0
    files = rec["code"]["files"]
    assert rec["code"]["sources_sha256"] and files["scripts/decodegap/measure/session.py"] and files["scripts/decodegap/core/record.py"]
    assert not any(f.startswith("scripts/decodegap/analysis/") for f in files)  # analysis code never decides a measured number
    assert rec["environment"]["libraries"]["torch"] == torch.__version__.split("+")[0] or rec["environment"]["libraries"]["torch"]
    phases = rec["time"]["phases_s"]
    assert {"imports", "build", "prefill", "warmup", "timed", "outside_timed_loop"} <= set(phases)
    # one progress line per phase on stderr
    for phase in ("bandwidth:", "build:", "prefill [eager]", "warm-up:", "timed [eager]", "valid:"):
        assert phase in proc.stderr
    assert oct(path.stat().st_mode & 0o777) == "0o444"


def test_ab_session_alternates_arms_and_static_matches_eager_tokens(tmp_path, measure_main):
    rc, rec, _ = measure_main(tmp_path, model="tiny-qwen", mode="ab-eager-static", session=1)
    assert rc == 0 and rec["status"] == "valid", rec["reasons"]
    assert rec["block_order"] == ["eager", "static", "static", "eager"] * 2
    eager, static = rec["arms"]
    assert [eager["mode"], static["mode"]] == ["eager", "static"]
    assert len(eager["timed"]["host_ms"]) == len(static["timed"]["host_ms"]) == 4 * 6
    assert eager["timed"]["block"][:6] == [0] * 6 and static["timed"]["block"][:6] == [1] * 6
    assert len(rec["cpu_probe"]["ms_before_block"]) == len(rec["block_order"])
    # Same weights, same prompt: the static-cache step must compute the same tokens as eager.
    assert eager["warmup"]["tokens"] + eager["timed"]["tokens"] == static["warmup"]["tokens"] + static["timed"]["tokens"]


def test_generate_times_transformers_own_loop_and_decodes_the_static_steps_tokens(tmp_path, measure_main):
    """The fast-path cell: transformers' generate runs the loop, the session times each step inside it
    (token to token on the host), and greedy generate must produce the same tokens as our static step."""
    rc, rec, _ = measure_main(tmp_path, model="tiny-qwen", mode="generate", session=1)
    assert rc == 0 and rec["status"] == "valid", rec["reasons"]
    (arm,) = rec["arms"]
    assert arm["mode"] == "generate" and "anatomy" not in arm  # no step of ours to profile
    timed = arm["timed"]
    assert len(timed["host_ms"]) == 40 and len(arm["warmup"]["host_ms"]) == 2 and timed["device_ms"] is None
    assert all(0 < ms < 10_000 for ms in timed["host_ms"])
    assert all(0 <= c <= 1.2 * h + 1.0 for c, h in zip(timed["host_cpu_ms"], timed["host_ms"]))
    block_steps = rec["protocol"]["ab_block_steps"]
    assert timed["block"] == [i // block_steps for i in range(40)]
    assert len(rec["cpu_probe"]["ms_before_block"]) == -(-40 // block_steps)
    assert len(timed["cpu_probe_before_ms"]) == len(timed["cpu_probe_after_ms"]) == 40
    assert all(ms > 0 for ms in timed["cpu_probe_before_ms"] + timed["cpu_probe_after_ms"])
    assert arm["final_position"] == arm["expected_position"] == 32 + 2 + 40  # one generate call: prefill, warm-up, timed
    two = arm["engine"]["two_lengths"]
    assert two["new_tokens"] == [8, 40] and two["ms_per_token"] > 0 and all(len(v) == 3 for v in two["call_ms"].values())
    rc, static, _ = measure_main(tmp_path, model="tiny-qwen", mode="static", session=1)
    assert rc == 0
    (s_arm,) = static["arms"]
    assert arm["warmup"]["tokens"] + timed["tokens"] == s_arm["warmup"]["tokens"] + s_arm["timed"]["tokens"]


def test_graphed_on_cpu_is_an_invalid_record_not_a_crash(tmp_path, measure_main):
    rc, rec, _ = measure_main(tmp_path, mode="graphed")
    assert rc == 0
    assert rec["status"] == "invalid" and rec["arms"] == []
    assert rec["error"]["kind"] == "not possible"
    assert any("needs CUDA graphs" in r for r in rec["reasons"])
    assert schema_errors(rec) == []


def test_backend_without_kernel_is_an_invalid_record(tmp_path, measure_main):
    rc, rec, _ = measure_main(tmp_path, attn="sdpa-efficient")  # no efficient-attention kernel on a CPU
    assert rc == 0 and rec["status"] == "invalid" and rec["error"]["kind"] == "no kernel"


def test_too_few_samples_and_too_short_are_invalid(tmp_path, measure_main):
    rc, rec, _ = measure_main(tmp_path, extra=["--timed-steps", "5", "--min-samples", "20", "--min-duration-s", "30"])
    assert rc == 0 and rec["status"] == "invalid"
    assert any(r.startswith("too few samples: eager has 5 < 20") for r in rec["reasons"])
    assert any(r.startswith("too short:") for r in rec["reasons"])
    assert len(rec["arms"][0]["timed"]["host_ms"]) == 5  # the samples are kept


def test_out_of_memory_is_an_invalid_record(tmp_path, measure_main, monkeypatch):
    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr("decodegap.measure.cards.build_model", oom)
    rc, rec, _ = measure_main(tmp_path)
    assert rc == 0 and rec["status"] == "invalid"
    assert rec["reasons"] == ["out of memory: CUDA out of memory. Tried to allocate 20.00 GiB"]


def test_unexpected_error_writes_nothing_and_propagates(tmp_path, measure_main, monkeypatch):
    def bug(*a, **k):
        raise ValueError("a bug")

    monkeypatch.setattr("decodegap.measure.cards.build_model", bug)
    with pytest.raises(ValueError, match="a bug"):
        measure_main(tmp_path)
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))


def test_unexpected_error_exits_nonzero_with_traceback(tmp_path):
    # A corrupt models file is unexpected at measurement time: the process must fail loudly.
    bad = tmp_path / "models.yaml"
    bad.write_text("tiny-llama: [unclosed")
    proc = run_measure(tmp_path, extra=["--models", str(bad)])
    assert proc.returncode == 2 and "not valid YAML" in proc.stderr and str(bad) in proc.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_existing_session_is_refused_before_measuring(tmp_path, measure_main):
    rc, rec, path = measure_main(tmp_path)
    before = path.read_bytes()
    rc2 = measure.main(["--root", str(tmp_path), "--gpu", "cpu", "--model", "tiny-llama", "--ctx", "32", "--mode", "eager", "--session", "0"])
    assert rc2 == 3 and path.read_bytes() == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu", "h100"], "unknown gpu 'h100'.*did you mean"),
        (["--model", "qwen-7b"], "unknown model 'qwen-7b'"),
        (["--attn", "fa9"], "unknown attn 'fa9'"),
        (["--quant", "int3"], "unknown quant 'int3'"),
        (["--mode", "turbo"], "unknown mode 'turbo'"),
        (["--mode", "ab-graphed-generate"], "generate runs its own decode loop"),
        (["--gpu", "h200"], "needs CUDA"),
    ],
)
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, args, message):
    base = {"--gpu": "cpu", "--model": "tiny-llama", "--ctx": "32", "--mode": "eager", "--session": "0"}
    base.update(dict(zip(args[::2], args[1::2])))
    argv = ["--root", str(tmp_path)] + [x for kv in base.items() for x in kv]
    assert measure.main(argv) == 2
    import re

    assert re.search(message, capsys.readouterr().err)
    assert not list(tmp_path.rglob("*.json"))


def test_ab_block_order_is_counterbalanced():
    order = measure.ab_block_order(["eager", "graphed"], 4)
    assert order == ["eager", "graphed", "graphed", "eager"] * 2
    assert order.count("eager") == order.count("graphed") == 4
    assert measure.ab_block_order(["eager"], 4) == []


def test_a_recorded_session_gets_its_manifest_line_and_receipt(tmp_path, measure_main):
    from decodegap.core import manifest
    from decodegap.core.sources import sha256_file

    receipt = tmp_path / "results/receipts/x.json"
    rc, rec, path = measure_main(tmp_path, extra=[*FAST_ARGS, "--receipt", str(receipt)])
    assert rc == 0
    rel = path.relative_to(tmp_path).as_posix()
    assert manifest.read(tmp_path) == {rel: sha256_file(path)}  # the command that adds a session lists it
    assert json.loads(receipt.read_text()) == {"raw_path": path.as_posix(), "sha256": sha256_file(path), "status": rec["status"]}
    assert measure_main(tmp_path)[0] == 3  # recorded: refused, nothing measured, manifest unchanged
    assert manifest.read(tmp_path) == {rel: sha256_file(path)}
