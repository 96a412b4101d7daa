"""The workflow through a real SLURM (the single-node cluster .ci/run brings up): every measurement
job asks for exactly the GPU type its cell names, the report comes out, and a killed job is
measured again on the rerun while no recorded session changes.

Runs where `sinfo` answers and DECODEGAP_SLURM=1 (set by .ci/run after .ci/slurm/up.sh).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.skipif(
    os.environ.get("DECODEGAP_SLURM") != "1" or shutil.which("sinfo") is None,
    reason="needs the local SLURM cluster of .ci/slurm/up.sh (DECODEGAP_SLURM=1)",
)
JOBCOMP = Path("/var/log/slurm/jobcomp.jsonl")
# Quicker status polls and output checks than a real cluster needs; everything else from the profile.
FAST = ["--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "5"]


def slurm_config(timed_steps=40) -> dict:
    """The CI's cluster config (.ci/slurm/config.yaml: CPU stand-ins of two GPU types, tiny cards),
    with the measurement's step count as asked."""
    config = yaml.safe_load((REPO / ".ci/slurm/config.yaml").read_text())
    config["protocol"]["timed_steps"] = timed_steps
    return config


def snakemake(workdir, *args, timeout=600):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(Path(sys.executable).parent / "snakemake"), "--profile", str(REPO / "profiles/slurm"),
           "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "config.yaml"), *FAST, *args]
    return subprocess.run(["timeout", "-k", "10", str(timeout), *cmd], capture_output=True, text=True, env=env, cwd=REPO)


def ended_jobs(run_dir: Path) -> list[dict]:
    jobs = [json.loads(line) for line in JOBCOMP.read_text().splitlines() if line.strip()]
    return [j for j in jobs if j.get("work_dir") == str(run_dir)]


def sha256s(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("s*.json"))}


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm")
    (work / "config.yaml").write_text(yaml.safe_dump(slurm_config()))
    proc = snakemake(work, "--", "report/paper_tables.tex")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return work


def test_report_through_slurm(slurm_run):
    assert (slurm_run / "report/paper_tables.tex").exists() and (slurm_run / "report/provenance.json").exists()
    raw = sorted(p.relative_to(slurm_run).as_posix() for p in (slurm_run / "results/raw").rglob("*.json"))
    assert raw == [
        "results/raw/cpu-as-l4/tiny-llama/ctx32/sdpa_bf16_eager/s00.json",
        "results/raw/cpu/tiny-llama/ctx32/sdpa_bf16_eager/s00.json",
        "results/raw/cpu/tiny-qwen/ctx32/sdpa_bf16_ab-eager-static/s00.json",
        "results/raw/cpu/tiny-qwen/ctx32/sdpa_bf16_ab-eager-static/s01.json",
    ]
    rec = json.loads((slurm_run / raw[0]).read_text())
    assert rec["environment"]["slurm_job_id"]  # measured inside a SLURM job


def test_each_measurement_asked_for_its_cells_gpu(slurm_run):
    jobs = [j for j in ended_jobs(slurm_run) if str(j.get("comment", "")).startswith("rule_measure")]
    assert len(jobs) == 4, jobs
    for job in jobs:
        wanted = "l4" if "cpu-as-l4" in job["comment"] else "cpu"
        assert job["state"] == "COMPLETED"
        assert job["tres_per_job"] == f"gres:gpu:{wanted}:1", job  # what the job asked SLURM for
        assert job["gres_alloc"] == f"gpu:{wanted}:1", job  # what SLURM gave it
    # each GPU type's environment stage ran first, as a job on that GPU type
    stages = [j for j in ended_jobs(slurm_run) if str(j.get("comment", "")).startswith("rule_environment")]
    assert len(stages) == 2, stages
    for job in stages:
        wanted = "l4" if "cpu-as-l4" in job["comment"] else "cpu"
        assert job["state"] == "COMPLETED" and job["tres_per_job"] == f"gres:gpu:{wanted}:1", job
    # analysis ran locally: no other rule was submitted
    assert {j["comment"].split("_wildcards")[0] for j in ended_jobs(slurm_run)} == {"rule_measure", "rule_environment"}


def test_killed_measurement_is_measured_again_and_nothing_else_changes(tmp_path):
    work = tmp_path
    (work / "config.yaml").write_text(yaml.safe_dump(slurm_config(timed_steps=40)))
    first = snakemake(work, "--", "results/receipts/cpu/tiny-llama/ctx32/sdpa_bf16_eager/s00.json")  # a measure job's output
    assert first.returncode == 0, first.stderr[-3000:]
    before = sha256s(work / "results/raw")
    # a long measurement, cancelled while it runs (as a node failure or time limit would)
    # minutes on a CPU within the tiny card's 4,096 positions: a 40 ms CPU probe before and after each step
    cfg = slurm_config(timed_steps=2000)
    cfg["protocol"]["step_probe_iterations"] = 1_000_000
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(Path(sys.executable).parent / "snakemake"), "--profile", str(REPO / "profiles/slurm"), "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(work), "--configfile", str(work / "config.yaml"), *FAST, "--retries", "0", "--",
           "results/receipts/cpu-as-l4/tiny-llama/ctx32/sdpa_bf16_eager/s00.json"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    job_id = None
    deadline = time.time() + 180
    while time.time() < deadline and job_id is None:
        out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %k %Z"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            jid, comment, wd = (line.split() + ["", "", ""])[:3]
            if wd == str(work) and comment.startswith("rule_measure"):
                time.sleep(3)  # let it get into the timed loop
                job_id = jid
        time.sleep(1)
    assert job_id, "the measurement job never started"
    subprocess.run(["scancel", job_id], check=True)
    out, _ = run.communicate(timeout=300)
    assert run.returncode != 0, out[-2000:]
    killed = work / "results/raw/cpu-as-l4/tiny-llama/ctx32/sdpa_bf16_eager/s00.json"
    assert not killed.exists() and not list(killed.parent.glob(".*.tmp"))  # nothing half-written
    assert sha256s(work / "results/raw") == before
    # the rerun measures that session only; the earlier one is untouched
    (work / "config.yaml").write_text(yaml.safe_dump(slurm_config(timed_steps=40)))
    again = snakemake(work, "--", "report/paper_tables.tex")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = sha256s(work / "results/raw")
    assert {k: v for k, v in after.items() if k in before} == before
    assert "cpu-as-l4/tiny-llama/ctx32/sdpa_bf16_eager/s00.json" in after
    measured = [j for j in ended_jobs(work) if str(j.get("comment", "")).startswith("rule_measure")]
    assert sum("cpu-as-l4" in j["comment"] for j in measured) == 2  # the killed attempt and its rerun
    assert sum("cpu_" in j["comment"] and "cpu-as-l4" not in j["comment"] and "tiny-llama" in j["comment"] for j in measured) == 1
