"""The environment stage (issue 12): one record per GPU type, written before its sessions, that
names the stack and decides which configured paths can run; ruled-out cells become invalid
sessions without GPU time; sessions name the record, and lineage shows it."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from decodegap.core import manifest
from decodegap.core.errors import SessionExists
import yaml

from conftest import FAST, REPO, make_workspace, run_snakemake, small_config, dry_run_jobs
from decodegap.core.errors import ConfigError
from decodegap.measure import setup


@pytest.fixture(scope="module")
def cpu_record(tmp_path_factory):
    out = tmp_path_factory.mktemp("env") / "cpu.json"
    assert setup.main(["--gpu", "cpu", "--attn", "sdpa", "sdpa-cudnn", "sdpa-math", "--quant", "bf16", "--out", str(out),
                       "--cache-dir", str(out.parent / "cache")]) == 0
    return out


def test_record_names_the_stack_and_decides_every_configured_path(cpu_record):
    r = setup.read_record(cpu_record)
    assert r["schema"] == setup.SCHEMA and r["gpu"] == "cpu" and r["device"] == "cpu"
    assert r["libraries"]["torch"] and r["libraries"]["transformers"] and r["boot_id"]
    assert set(r["attention"]) == {"sdpa", "sdpa-cudnn", "sdpa-math"} and set(r["weights"]) == {"bf16"}
    for name in ("sdpa", "sdpa-math"):  # the CPU's own kernels run both decode calls and agree with float32
        for form in ("dynamic", "static"):
            c = r["attention"][name]["checks"][form]
            assert c["runs"] and c["reason"] is None and c["max_abs_err"] < 1e-4
    cudnn = r["attention"]["sdpa-cudnn"]
    assert cudnn["package"] == "torch" and cudnn["version"]
    assert not cudnn["checks"]["dynamic"]["runs"] and "No viable backend" in cudnn["checks"]["dynamic"]["reason"]
    assert r["weights"]["bf16"]["runs"] and r["weights"]["bf16"]["version"]
    # the compile caches every session of this GPU type is given
    assert r["cache_variables"]["TORCHINDUCTOR_CACHE_DIR"].endswith("cache/inductor")
    assert r["definition_sha256"] == setup.definition_sha256(["sdpa", "sdpa-cudnn", "sdpa-math"], ["bf16"])
    assert r["definition_sha256"] != setup.definition_sha256(["sdpa"], ["bf16"])


def test_a_foreign_or_broken_record_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "h200.json"
    bad.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ConfigError, match="h200.json: not a decodegap environment record"):
        setup.read_record(bad)
    bad.write_text("{truncated")
    with pytest.raises(ConfigError, match="h200.json: not a readable environment record"):
        setup.read_record(bad)


def test_each_mode_is_ruled_out_by_the_call_it_makes():
    record = {"gpu": "h200", "attention": {"sdpa-flash": {"checks": {"dynamic": {"runs": True, "reason": None},
                                                                     "static": {"runs": False, "reason": "No available kernel"}}}},
              "weights": {"bf16": {"runs": True, "reason": None}, "int4-x": {"runs": False, "reason": "no sm_90 build"}}}
    assert setup.ruled_out(record, "sdpa-flash", "bf16", "eager") is None  # the dynamic cache's call runs
    for mode in ("static", "graphed", "ab-eager-graphed", "ab-static-graphed"):
        assert "static-cache decode call on h200: No available kernel" in setup.ruled_out(record, "sdpa-flash", "bf16", mode)
    assert setup.ruled_out(record, "sdpa", "int4-x", "eager") == "weight path int4-x cannot run on h200: no sm_90 build"
    assert setup.ruled_out(record, "sdpa-unchecked", "bf16", "eager") is None  # never checked: the session finds out


def test_a_ruled_out_cell_is_an_invalid_session_that_never_measures(tmp_path, cpu_record, measure_main):
    rc, rec, path = measure_main(tmp_path, attn="sdpa-cudnn", extra=[*FAST, "--environment", str(cpu_record)])
    assert rc == 0 and rec["status"] == "invalid" and rec["arms"] == [] and rec["floor"] is None
    assert rec["reasons"][0].startswith("ruled out: attention path sdpa-cudnn cannot run its dynamic-cache decode call on cpu")
    assert rec["error"]["kind"] == "ruled out"
    assert not {"build", "prefill", "warmup", "timed"} & set(rec["time"]["phases_s"])  # nothing was built or run
    link = rec["environment"]["environment_record"]
    assert link["path"] == cpu_record.as_posix() and len(link["sha256"]) == 64
    # a path the record lets run measures as usual, under the same record
    rc, rec, _ = measure_main(tmp_path, attn="sdpa-math", extra=[*FAST, "--environment", str(cpu_record)])
    assert rc == 0 and rec["arms"] and rec["environment"]["environment_record"]["sha256"] == link["sha256"]
    # the session compiled into the GPU type's caches, the ones the stage built into
    assert rec["environment"]["compile_caches"] == json.loads(cpu_record.read_text())["cache_variables"]


def test_a_record_of_another_gpu_type_is_refused(tmp_path, cpu_record, measure_main):
    other = tmp_path / "h200.json"
    other.write_text(json.dumps({**json.loads(cpu_record.read_text()), "gpu": "h200"}))
    rc, rec, _ = measure_main(tmp_path, extra=[*FAST, "--environment", str(other)])
    assert rc == 2 and rec is None


def test_the_workflow_runs_the_stage_first_and_gives_ruled_out_jobs_no_gpu(tmp_path, monkeypatch):
    """measure: true on the CPU stand-in: the environment job writes the record, the measurement job
    of a path it rules out asks for no GPU and records the invalid session with the record's reason."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # jobs call `python`
    config = small_config(measure=True)
    config["matrix"].update(gpus=["cpu"], models=["tiny-llama"], ctx=[32], attn=["sdpa-cudnn"], modes=["eager"], sessions=1)
    config["ab"] = []
    config["protocol"].update(warmup_steps=2, timed_steps=40, min_samples=20, min_duration_s=0)
    config["environment"] = {"tune_s": 7, "refine_s": 11}  # the stage's budgets reach its command (a CPU spends neither)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(root, "--cores", "1", "--printshellcmds", "--", "results/receipts/environment/cpu.json",
                         "results/receipts/cpu/tiny-llama/ctx32/sdpa-cudnn_bf16_eager/s00.json")
    receipt = json.loads((root / "results/receipts/environment/cpu.json").read_text())
    assert receipt["record"].startswith("results/environment/cpu@") and receipt["record"] in manifest.read(root)
    record = setup.read_record(root / receipt["record"])
    assert not record["attention"]["sdpa-cudnn"]["checks"]["dynamic"]["runs"]
    session = json.loads((root / "results/raw/cpu/tiny-llama/ctx32/sdpa-cudnn_bf16_eager/s00.json").read_text())
    assert session["status"] == "invalid" and session["reasons"][0].startswith("ruled out: attention path sdpa-cudnn")
    log = proc.stdout + proc.stderr
    assert "--tune-s 7 --refine-s 11" in log[log.index("rule environment:"):log.index("rule measure:")]
    measure_job = log[log.index("rule measure:"):]
    assert "gpu=0" in measure_job.split("\n\n")[0], measure_job[:800]  # the job asked for no GPU


def test_a_gpu_type_with_a_record_never_stages_again_on_its_own(tmp_path, cpu_record):
    """Records are data: no file time (newer code, newer requirements, a fresh clone's checkout) makes
    the stage run again for a GPU type that has one; asked for by name, a stage writes a new record
    beside the old one, which stays."""
    root = make_workspace(tmp_path, config=small_config(measure=True))
    for gpu in ("h200", "l4"):
        rec = {**json.loads(cpu_record.read_text()), "gpu": gpu}
        setup.write_record(rec, root / f"results/environment/{gpu}.json")
        with pytest.raises(SessionExists):  # never replaced
            setup.write_record({**rec, "libraries": {}}, root / f"results/environment/{gpu}.json")
    jobs = dry_run_jobs(root, "report/paper_tables.tex")
    assert "environment" not in jobs and jobs.get("measure")
    code, requirements = REPO / "scripts/decodegap/measure/setup.py", REPO / "envs/measure-requirements.txt"
    saved = {p: p.stat() for p in (code, requirements)}
    try:
        later = time.time() + 60
        for p in (code, requirements):
            os.utime(p, (later, later))
        jobs = dry_run_jobs(root, "report/paper_tables.tex")
        assert "environment" not in jobs and jobs.get("measure")
    finally:
        for p, st in saved.items():
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    asked = dry_run_jobs(root, "results/receipts/environment/h200.json")
    assert asked == {"environment": 1}
    assert setup.record_path(root / "results/environment", "h200", "2026-12-01T16:20:00+00:00").name == "h200@20261201T162000Z.json"


def test_the_stage_refuses_a_machine_that_is_not_its_gpu_type(tmp_path, capsys):
    """An h200 job that landed on a host without CUDA would record the CPU's verdicts as the H200's."""
    out = tmp_path / "h200.json"
    assert setup.main(["--gpu", "h200", "--attn", "sdpa", "--quant", "bf16", "--out", str(out)]) == 1
    assert not out.exists() and "gpu 'h200' needs CUDA" in capsys.readouterr().err


def test_only_a_missing_kernel_rules_a_path_out():
    """A passing failure (out of memory, a CUDA error) must not become a permanent verdict: the
    stage stops and writes nothing, instead of ruling cells out for good."""
    assert setup._verdict(RuntimeError("No available kernel. Aborting execution."), "x").startswith("RuntimeError: No available kernel")
    assert setup._verdict(NotImplementedError("int4 on sm_80"), "x") == "NotImplementedError: int4 on sm_80"
    # Inductor finding no kernel template for flex's call in the model (H200, torch 2.11) is a verdict too
    lowering = RuntimeError("LoweringException: NoValidChoicesError: No choices to select. Provided reason: No choices exist for backend.")
    assert "NoValidChoicesError" in setup._verdict(lowering, "attention flex (dynamic) in the model")
    with pytest.raises(setup.StageError, match="weights bf16: OutOfMemoryError: CUDA out of memory"):
        class OutOfMemoryError(RuntimeError):
            pass
        setup._verdict(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "weights bf16")


def test_a_weight_kernel_that_does_not_build_is_a_verdict_about_its_path(tmp_path, monkeypatch):
    """A third-party weight kernel (vLLM's Marlin, ExLlamaV2's extension) that fails to compile for
    this torch and CUDA is the finding for that path: the stage records it and goes on, and still
    stops on a failure of our own call."""
    from decodegap.measure import weights

    path = weights.get_weight_path("gptq-exllamav2")

    def broken_build(device):
        raise RuntimeError("Error building extension 'exllamav2_ext'")

    monkeypatch.setattr(path, "build", broken_build, raising=False)
    monkeypatch.setattr(weights, "get_weight_path", lambda name: path)
    record = setup.build_record("cpu", ["sdpa"], ["gptq-exllamav2"], tmp_path / "c")
    verdict = record["weights"]["gptq-exllamav2"]
    assert not verdict["runs"] and verdict["reason"] == "exllamav2's kernel fails here: RuntimeError: Error building extension 'exllamav2_ext'"

    def our_bug(device):
        raise TypeError("make_q_matrix(): incompatible function arguments")

    monkeypatch.setattr(path, "build", our_bug, raising=False)
    with pytest.raises(setup.StageError, match="weights gptq-exllamav2: TypeError"):
        setup.build_record("cpu", ["sdpa"], ["gptq-exllamav2"], tmp_path / "c")


def test_a_gpu_type_the_user_defines_in_the_config_is_known_to_the_stage(tmp_path):
    """The workflow passes the merged GPU table (config `gpus:` overrides), as it does to sessions."""
    out = tmp_path / "cpu-as-l4.json"
    spec = {"display_name": "CPU as L4", "device": "cpu", "b_peak_Bps": 2.0e10, "memory_bytes": None, "compute_capability": None,
            "bandwidth_source": "test", "device_name_match": None}
    argv = ["--gpu", "cpu-as-l4", "--attn", "sdpa", "--quant", "bf16", "--out", str(out), "--cache-dir", str(tmp_path / "c")]
    assert setup.main(argv) == 2 and not out.exists()  # unknown without the spec
    assert setup.main([*argv, "--gpu-spec", json.dumps(spec)]) == 0
    assert setup.read_record(out)["gpu"] == "cpu-as-l4"


def test_a_stage_can_take_another_machines_launch_shapes_and_refuses_a_record_that_cannot_give_them(tmp_path, cpu_record, capsys):
    """--shapes-from: the new record runs the earlier record's launch shapes (a cell's sessions on two
    machines then share them) and names that record by path and sha256; a missing file, a record of
    another GPU type, one without shapes and one whose shapes do not parse are refused naming the file,
    and no record is written."""
    from decodegap.core.sources import sha256_file
    from decodegap.measure import fused_kernels as fk

    earlier = json.loads(cpu_record.read_text())
    shapes = fk.resolve(None, "cpu").as_dict()
    shapes["gemv"]["dense"]["down"] = {"rows": 2, "block_k": 64, "warps": 4, "x_tile": True}  # not the table's
    source = tmp_path / "cpu@earlier.json"
    source.write_text(json.dumps(dict(earlier, launch_shapes=shapes)))
    argv = ["--gpu", "cpu", "--attn", "sdpa", "--quant", "bf16", "--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "new.json"
    assert setup.main([*argv, "--out", str(out), "--shapes-from", str(source)]) == 0
    got = json.loads(out.read_text())
    assert got["launch_shapes_from"] == {"record": source.as_posix(), "sha256": sha256_file(source)}
    assert fk.resolve(got["launch_shapes"], "cpu").gemv_for("dense", "down", 256) == fk.GemvConfig(2, 64, 4, True)
    assert "taken from cpu@earlier.json" in got["launch_shapes"]["source"]

    bad = {"missing": None, "other type": dict(earlier, gpu="h200", launch_shapes=shapes),
           "no shapes": dict(earlier, launch_shapes=None), "broken shapes": dict(earlier, launch_shapes={"gemv": {"dense": {"down": {"rows": 0}}}})}
    for name, content in bad.items():
        path = tmp_path / f"{name}.json"
        if content is not None:
            path.write_text(json.dumps(content))
        target = tmp_path / f"out {name}.json"
        capsys.readouterr()
        assert setup.main([*argv, "--out", str(target), "--shapes-from", str(path)]) == 2, name
        assert not target.exists() and str(path) in capsys.readouterr().err, name
