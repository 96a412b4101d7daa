"""No command can lose or change a recorded session, and no malformed record changes a number
silently. Each case is run as the user who found it ran it: the real snakemake command, on a copy
of this repository (what a clone holds: tracked files plus new, unignored ones), against the real
H200 sessions bundled under results/raw/, as whatever user runs the tests (root in CI).
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
CELL = "results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed"
CELL_STATS = "results/stats/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/stats.json"


def clone(dest: Path) -> Path:
    """The repository as a fresh clone has it (tracked and new unignored files), outside the repo."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


def raw_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / "results/raw").rglob("*")) if p.is_file()}


def snakemake(root: Path, *args, timeout=900):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([SNAKEMAKE, *args], cwd=root, capture_output=True, text=True, env=env, timeout=timeout)


def provenance_check(root: Path):
    return subprocess.run([sys.executable, "-m", "decodegap.analysis.provenance", "check"], cwd=root, capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Built once, for the tests that then run every flag against it."""
    return built_clone(tmp_path_factory.mktemp("clone"))


def built_clone(folder: Path) -> Path:
    """A clone with the whole report built from the bundled sessions."""
    root = clone(folder)
    proc = snakemake(root, "--cores", "2", "report/paper_tables.tex")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def bundled_report(tmp_path_factory):
    """Built once and left untouched by the tests."""
    return built_clone(tmp_path_factory.mktemp("bundled"))


def test_the_bundled_report_has_the_numbers_it_had(bundled_report):
    """Every number the report renders from the bundled sessions, against tests/data/: a refactor
    must not move one. After adding sessions or changing a statistic on purpose, rewrite the file:
    python -m decodegap.analysis.provenance keys > tests/data/bundled_report_numbers.tsv"""
    expected = dict(line.split("\t") for line in (REPO / "tests/data/bundled_report_numbers.tsv").read_text().splitlines())
    doc = json.loads((bundled_report / "report/provenance.json").read_text())
    built = {key: entry["text"] for key, entry in doc["numbers"].items()}
    assert len(built) >= 144
    moved = {k: (expected.get(k), built.get(k)) for k in set(expected) | set(built) if expected.get(k) != built.get(k)}
    assert not moved, f"{len(moved)} numbers differ (expected, built): {dict(list(moved.items())[:10])}"


def test_bundled_sessions_match_their_manifest():
    proc = provenance_check(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = (REPO / "results/raw.sha256").read_text().splitlines()
    assert len(listed) == len(raw_hashes(REPO)) >= 101


def test_no_snakemake_flag_touches_a_recorded_session(built):
    root = built
    before = raw_hashes(root)
    assert len(before) >= 101
    victim = f"{CELL}/s00.json"
    runs = [
        ("--forceall -k", ["--cores", "2", "--forceall", "-k", "report/paper_tables.tex"]),
        ("-f on a raw file", ["--cores", "1", "-f", victim]),
        ("-R cell", ["--cores", "2", "-R", "cell", "--", "report/paper_tables.tex"]),
        ("--delete-all-output", ["--cores", "1", "--delete-all-output", "report/paper_tables.tex"]),
        ("measure=true --delete-all-output", ["--cores", "1", "--delete-all-output", "--config", "measure=true", "--", "report/paper_tables.tex"]),
    ]
    for label, args in runs:
        snakemake(root, *args)  # their exit status is not the point: the files are
        assert raw_hashes(root) == before, f"snakemake {label} changed or removed a recorded session"
    assert (root / victim).exists()


def test_measuring_never_remeasures_a_recorded_session(built):
    """measure: true, a changed protocol, changed measurement code, --forceall: no measurement job
    for a session that exists, and every raw file byte-identical."""
    root = built
    before = raw_hashes(root)
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config.update(measure=True)
    config["matrix"].update(gpus=["h200"], modes=["eager", "graphed"])  # every cell here is recorded: nothing is missing
    config["ab"] = [dict(config["ab"][0], gpus=["h200"])]  # the 53-session cuda-graphs A/B
    config["attention"]["gpus"] = []  # its cells still lack sessions
    config["quantization"]["gpus"] = []
    config["floor"]["gpus"] = []  # and the floor experiment's (compiled, fused)
    config["protocol"]["timed_steps"] = 64
    (root / "config/config.yaml").write_text(yaml.safe_dump(config))
    with open(root / "scripts/decodegap/measure/modes.py", "a") as f:
        f.write("\n# a change to the measurement code\n")
    dry = snakemake(root, "-n", "--forceall", "report/paper_tables.tex")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "measure" not in dry.stdout + dry.stderr.replace("measure=true", "")
    proc = snakemake(root, "--cores", "2", "--forceall", "-k", "report/paper_tables.tex")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert raw_hashes(root) == before


def test_measure_jobs_output_receipts_for_missing_sessions_only(tmp_path):
    root = clone(tmp_path)
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config.update(measure=True)
    config["matrix"].update(gpus=["h200"], models=["qwen2.5-7b"], ctx=[2048], modes=["eager", "graphed"], sessions=6)  # s04, s05 missing
    config["ab"] = []
    config["attention"]["gpus"] = []
    config["quantization"]["gpus"] = []
    config["floor"]["gpus"] = []  # and the floor experiment's (compiled, fused)
    (root / "config/config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(root, "-n", "--forceall", "-p", "report/paper_tables.tex")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    measured = sorted(line.split()[-1] for line in out.splitlines() if line.strip().startswith("output: results/receipts/"))
    assert measured == ["results/receipts/h200/qwen2.5-7b/ctx2048/sdpa_bf16_eager/s04.json",
                        "results/receipts/h200/qwen2.5-7b/ctx2048/sdpa_bf16_eager/s05.json",
                        "results/receipts/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/s04.json",
                        "results/receipts/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/s05.json"]
    assert "output: results/raw/" not in out


def _real_record(session: int) -> dict:
    return json.loads((REPO / CELL / "s00.json").read_text()) | {"session": session, "seed": session}


def _truncated(record: dict, n: int) -> dict:
    """The record with n timed steps (every per-step list cut alike), still saying valid."""
    arm = record["arms"][0]
    arm["timed"] = {k: (v[:n] if isinstance(v, list) else v) for k, v in arm["timed"].items()}
    arm["expected_position"] = arm["final_position"] = arm["expected_position"] - (len(record["arms"][0]["timed"]["tokens"]) - n)
    return record


def _nan_text(record: dict) -> str:
    text = json.dumps(record, indent=1)
    first = repr(record["arms"][0]["timed"]["host_ms"][0])
    return text.replace(first, "NaN", 1)


BAD_RECORDS = {
    # name: (file name, content, what the message must say)
    "a copy saved under a second name": ("s001.json", lambda: (REPO / CELL / "s01.json").read_text(), "not a canonical session file name"),
    "NaN step time": ("s04.json", lambda: _nan_text(_real_record(4)), "NaN"),
    "Infinity step time": ("s04.json", lambda: _nan_text(_real_record(4)).replace("NaN", "Infinity"), "Infinity"),
    "valid with 3 samples": ("s04.json", lambda: json.dumps(_truncated(_real_record(4), 3)), "too few samples: graphed has 3 < 64"),
    "zero step time": ("s04.json", lambda: json.dumps(_real_record(4)).replace(repr(_real_record(4)["arms"][0]["timed"]["host_ms"][5]), "0.0", 1), "host_ms"),
    "valid with a reason": ("s04.json", lambda: json.dumps(_real_record(4) | {"reasons": ["unstable: made up"]}), "says valid but lists reasons"),
    "invalid without a reason": ("s04.json", lambda: json.dumps(_real_record(4) | {"status": "invalid"}), "says invalid but gives no reason"),
    "session field and file name disagree": ("s04.json", lambda: json.dumps(_real_record(5)), "whose one file name is s05.json"),
    "unreadable (a folder)": ("s04.json", None, "cannot be read"),
}


@pytest.mark.parametrize("case", list(BAD_RECORDS))
def test_a_bad_record_stops_the_run_naming_the_file(tmp_path, case):
    name, content, message = BAD_RECORDS[case]
    root = clone(tmp_path)
    before = raw_hashes(root)
    bad = root / CELL / name
    if content is None:
        bad.mkdir()
    else:
        bad.write_text(content())
    proc = snakemake(root, "--cores", "1", CELL_STATS)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{CELL}/{name}" in out and message in out, out[-3000:]
    assert "Traceback" not in out
    if case == "a copy saved under a second name":
        assert f"{CELL}/s01.json is the file of session 1" in out  # names both files
    assert {k: v for k, v in raw_hashes(root).items() if k != f"{CELL}/{name}"} == before


def test_provenance_check_catches_any_change_to_any_raw_file(tmp_path):
    root = clone(tmp_path)
    assert provenance_check(root).returncode == 0
    invalid = "results/raw/h200/qwen2.5-7b/ctx16384/sdpa_bf16_eager/s00.json"  # behind no number
    for rel in (f"{CELL}/s01.json", invalid):
        path = root / rel
        original = path.read_bytes()
        path.chmod(0o644)
        i = original.index(b'"seed": ') + 8
        path.write_bytes(original[:i] + bytes([original[i] ^ 1]) + original[i + 1:])  # one byte
        proc = provenance_check(root)
        assert proc.returncode == 1 and f"changed (sha256 differs from results/raw.sha256): {rel}" in proc.stderr
        path.unlink()
        proc = provenance_check(root)
        assert proc.returncode == 1 and f"missing (listed in results/raw.sha256): {rel}" in proc.stderr
        path.write_bytes(original)
    assert provenance_check(root).returncode == 0
    (root / CELL / "s09.json").write_bytes((root / CELL / "s01.json").read_bytes())
    proc = provenance_check(root)
    assert proc.returncode == 1 and f"added (not in results/raw.sha256): {CELL}/s09.json" in proc.stderr


def test_an_interrupted_run_resumes_with_the_same_command(tmp_path):
    """Ctrl-C in the middle of the README's main command; then the same command finishes the report."""
    root = clone(tmp_path)
    before = raw_hashes(root)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.Popen([SNAKEMAKE, "--cores", "1", "report/paper_tables.tex"], cwd=root, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((root / "results/stats").rglob("stats.json")):
        time.sleep(0.2)  # wait until jobs are under way
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's process group
    run.communicate(timeout=120)
    assert not (root / "report/paper_tables.tex").exists(), "the run finished before it could be interrupted"
    again = snakemake(root, "--cores", "2", "report/paper_tables.tex")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert (root / "report/paper_tables.tex").exists()
    assert raw_hashes(root) == before


def test_derived_numbers_of_the_bundled_report_recompute_from_their_raw_files(bundled_report):
    """The numbers that rest on several cells (the anatomy's parts, the step model fitted on every
    H200 cell, the host model) lead to every raw file behind them and recompute from them."""
    env_keys = ["anatomy/launch_tax_ms/h200/qwen2.5-7b/ctx2048/sdpa_bf16", "model/h200/coef/c_launch_host",
                "host/per_launch_us_nominal/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-static-graphed/static"]
    for key in env_keys:
        proc = subprocess.run([sys.executable, "-m", "decodegap.analysis.provenance", "lineage", key, "--recompute"],
                              cwd=bundled_report, capture_output=True, text=True)
        assert proc.returncode == 0 and "-> reproduces" in proc.stdout, proc.stdout[-1500:] + proc.stderr[-1500:]
    doc = json.loads((bundled_report / "report/provenance.json").read_text())["numbers"]
    model_files = {r["path"] for r in doc["model/h200/coef/c_launch_host"]["raw_files"]}
    assert len({p.rsplit("/", 1)[0] for p in model_files}) >= 20  # the fit rests on every measured H200 cell


def test_readme_headline_matches_the_report_it_comes_from():
    """The README's launch-tax sentence quotes the A/B table's headline scope (completed sessions),
    its estimator's value, interval, sessions and machines as the bundled report renders them."""
    numbers = dict(line.split("\t")[:2] for line in (REPO / "tests/data/bundled_report_numbers.tsv").read_text().splitlines() if "\t" in line)
    readme = " ".join((REPO / "README.md").read_text().split())
    for model, display in (("qwen2.5-7b", "Qwen-2.5-7B"), ("mistral-7b-v0.3", "Mistral-7B-v0.3"), ("llama-3.1-8b", "Llama-3.1-8B")):
        cid = f"h200/{model}/ctx2048/sdpa_bf16_ab-static-graphed/completed"
        speedup, lo, hi = (float(numbers[f"ab/{q}/{cid}"]) for q in ("speedup", "speedup_ci_low", "speedup_ci_high"))
        n, m = numbers[f"ab/n_sessions/{cid}"], numbers[f"ab/n_machines/{cid}"]
        said = rf"{speedup:.2f}x (faster )?for {re.escape(display)} \({n} (sessions )?on {m}( machines)?, (95 % CI )?{lo:.2f} to {hi:.2f}\)"
        assert re.search(said, readme), (display, said)
