"""No command can lose or change a recorded session or environment record, and no malformed,
copied, foreign or hand-edited input changes a number silently. Each case is run as a user would
run it: the real snakemake or python -m command, on a copy of this repository (what a clone holds:
tracked files plus new, unignored ones), against the real H200 sessions bundled under results/raw/,
as whatever user runs the tests (root in CI).

Most cases need no report: they stop at planning, or build one (gpu, model, ctx) group. Those that
need a report build it for a small config (one model, one context) once per module; the test that
rebuilds the whole bundled report is marked slow (CI runs it).
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, clone

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
CELL = "results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed"
GROUP_STATS = "results/stats/h200/qwen2.5-7b/ctx2048"
CELL_STATS = f"{GROUP_STATS}/sdpa_bf16_graphed/stats.json"
ENV_RECORD = "results/environment/h200.json"


def data_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in ("results/raw", "results/environment") for p in sorted((root / d).rglob("*")) if p.is_file()}


def run(root: Path, *cmd, timeout=900):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(list(cmd), cwd=root, capture_output=True, text=True, env=env, timeout=timeout)


def snakemake(root: Path, *args, timeout=900):
    return run(root, SNAKEMAKE, *args, timeout=timeout)


def python(root: Path, *args):
    return run(root, sys.executable, *args)


def out(proc) -> str:
    return proc.stdout + proc.stderr


def small(root: Path, **changes) -> Path:
    """The clone's config cut to one model and context (the qwen ctx 2048 group): a report in about
    a minute, on the real sessions."""
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config["matrix"].update(gpus=["h200"], models=["qwen2.5-7b"], ctx=[2048], modes=["eager", "static", "graphed"])
    config["ab"] = [dict(config["ab"][1])]  # the launch-tax A/B of Qwen-2.5-7B
    for exp in ("attention", "quantization", "floor", "engines"):
        config[exp]["gpus"] = []
    config.update(changes)
    (root / "config/config.yaml").write_text(yaml.safe_dump(config))
    return root


def listed(root: Path, rel: str) -> None:
    """Append a file's line to the manifest, as a user who edits the manifest by hand would."""
    with open(root / "results/raw.sha256", "a") as f:
        f.write(f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}\n")


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    """A clone with the small config's report built once; tests copy it before changing anything."""
    root = small(clone(tmp_path_factory.mktemp("small")))
    proc = snakemake(root, "--cores", "2", "report/paper_tables.tex")
    assert proc.returncode == 0, out(proc)[-3000:]
    return root


@pytest.fixture
def built(small_report, tmp_path):
    dest = tmp_path / "built"
    shutil.copytree(small_report, dest, symlinks=True)
    return dest


def provenance(root: Path, *args):
    return python(root, "-m", "decodegap.analysis.provenance", *args)


# --- the numbers -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("bundled_report")  # one worker builds it once, for test_paper's bundled test too
def test_the_bundled_report_has_the_numbers_it_had(bundled_report):
    """Every number the report renders from the bundled sessions, against tests/data/: a refactor
    must not move one. After adding sessions or changing a statistic on purpose, rewrite the file:
    python -m decodegap.analysis.provenance keys > tests/data/bundled_report_numbers.tsv"""
    root = bundled_report
    expected = dict(line.split("\t") for line in (REPO / "tests/data/bundled_report_numbers.tsv").read_text().splitlines())
    doc = json.loads((root / "report/provenance.json").read_text())
    got = {key: entry["text"] for key, entry in doc["numbers"].items()}
    assert len(got) >= 144
    moved = {k: (expected.get(k), got.get(k)) for k in set(expected) | set(got) if expected.get(k) != got.get(k)}
    assert not moved, f"{len(moved)} numbers differ (expected, built): {dict(list(moved.items())[:10])}"
    check = provenance(root, "check")
    assert check.returncode == 0, out(check)
    for key in ("anatomy/launch_tax_ms/h200/qwen2.5-7b/ctx2048/sdpa_bf16", "model/h200/coef/c_launch_host",
                "host/per_launch_us_nominal/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-static-graphed/static"):
        lineage = provenance(root, "lineage", key, "--recompute")  # numbers resting on several cells lead to all their files
        assert lineage.returncode == 0 and "-> reproduces" in lineage.stdout, out(lineage)[-1500:]
    model_files = {r["path"] for r in doc["numbers"]["model/h200/coef/c_launch_host"]["raw_files"]}
    assert len({p.rsplit("/", 1)[0] for p in model_files}) >= 20  # the fit rests on every measured H200 cell


def test_bundled_data_match_their_manifest():
    proc = provenance(REPO, "check")
    assert proc.returncode == 0, out(proc)
    lines = (REPO / "results/raw.sha256").read_text().splitlines()
    assert len(lines) == len(data_hashes(REPO)) >= 670 and any(line.endswith(ENV_RECORD) for line in lines)


# --- nothing recorded is ever lost ---------------------------------------------------------


def test_no_snakemake_flag_touches_a_recorded_session_or_environment_record(built):
    root = built
    before = data_hashes(root)
    assert len(before) >= 670 and ENV_RECORD in before
    data = "results/aggregate/sessions.parquet"  # every analysis job reads the sessions; the tables add nothing here
    runs = [
        ("--forceall -k", ["--cores", "2", "--forceall", "-k", data]),
        ("-f on a raw file", ["--cores", "1", "-f", f"{CELL}/s00.json"]),
        ("-f on the environment record", ["--cores", "1", "-f", "--config", "measure=true", "--", ENV_RECORD]),
        ("-R cells", ["--cores", "2", "-R", "cells", "--", data]),
        ("--touch", ["--cores", "1", "--touch", "report/paper_tables.tex"]),
        ("--delete-all-output", ["--cores", "1", "--delete-all-output", "report/paper_tables.tex"]),
        ("measure=true --delete-all-output", ["--cores", "1", "--delete-all-output", "--config", "measure=true", "--", "report/paper_tables.tex"]),
        ("measure=true on the record", ["--cores", "1", "--config", "measure=true", "--", ENV_RECORD]),
    ]
    for label, args in runs:
        snakemake(root, *args)  # their exit status is not the point: the files are
        assert data_hashes(root) == before, f"snakemake {label} changed or removed recorded data"


def test_a_fresh_clone_plans_exactly_the_missing_sessions(tmp_path):
    """measure=true on a fresh clone (every file's mtime new): a job per missing session, the stage
    only for GPU types without any record, never for those whose record is committed (the H200's, the
    H100's)."""
    root = clone(tmp_path)
    proc = snakemake(root, "-n", "--config", "measure=true", "--", "report/paper_tables.tex")
    assert proc.returncode == 0, out(proc)[-2000:]
    text = out(proc)
    from decodegap.core.cells import Plan

    plan = Plan(yaml.safe_load((root / "config/config.yaml").read_text()) | {"measure": True}, root=root)
    staged = {p.name.split("@")[0] for p in (root / "results/environment").glob("*@*.json")}
    assert {"h200", "h100-sxm5"} <= staged
    stages = sorted(line.split("/")[-1] for line in text.splitlines() if line.strip().startswith("output: results/receipts/environment/"))
    assert stages == sorted(f"{g}.json" for g in {c.gpu for c in plan.cells()} - staged) == ["a100-80gb-sxm4.json", "l4.json", "l40s.json"]
    missing = sorted(r for c in plan.cells() for r in plan.receipts(c))
    planned = sorted(line.split("output: ")[1] for line in text.splitlines() if line.strip().startswith("output: results/receipts/h")
                     or line.strip().startswith("output: results/receipts/a") or line.strip().startswith("output: results/receipts/l"))
    planned = [p for p in planned if not p.startswith("results/receipts/environment/")]
    assert planned == missing and missing
    recorded = {p for c in plan.cells() for p in plan.raw_files(c)}
    assert not {paths_of_receipt(p) for p in planned} & recorded


def paths_of_receipt(receipt: str) -> str:
    from decodegap.core.paths import raw_of_receipt

    return raw_of_receipt(receipt)


def test_measuring_never_remeasures_a_recorded_session(built):
    """measure: true, a changed protocol, changed measurement code, --forceall: no measurement job
    for a session that exists, and every raw file byte-identical."""
    root = built
    before = data_hashes(root)
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config.update(measure=True)
    config["matrix"].update(modes=["eager", "graphed"])
    config["protocol"]["timed_steps"] = 64
    (root / "config/config.yaml").write_text(yaml.safe_dump(config))
    with open(root / "scripts/decodegap/measure/modes.py", "a") as f:
        f.write("\n# a change to the measurement code\n")
    dry = snakemake(root, "-n", "--forceall", "report/paper_tables.tex")
    assert dry.returncode == 0, out(dry)[-2000:]
    assert "rule measure" not in out(dry) and "rule environment" not in out(dry)
    proc = snakemake(root, "--cores", "2", "--forceall", "-k", "results/aggregate/sessions.parquet")
    assert proc.returncode == 0, out(proc)[-2000:]
    assert data_hashes(root) == before


def test_measure_jobs_output_receipts_for_missing_sessions_only(tmp_path):
    root = small(clone(tmp_path), measure=True)
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config["matrix"].update(modes=["eager", "graphed"], sessions=6)  # s04, s05 missing
    config["ab"] = []
    (root / "config/config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(root, "-n", "--forceall", "-p", "report/paper_tables.tex")
    assert proc.returncode == 0, out(proc)[-2000:]
    measured = sorted(line.split()[-1] for line in out(proc).splitlines() if line.strip().startswith("output: results/receipts/h200"))
    assert measured == [f"results/receipts/h200/qwen2.5-7b/ctx2048/sdpa_bf16_{m}/s0{s}.json" for m in ("eager", "graphed") for s in (4, 5)]
    assert "output: results/raw/" not in out(proc) and "output: results/environment/" not in out(proc)


def test_a_listed_session_that_is_missing_stops_the_run_and_is_never_remeasured(tmp_path):
    root = small(clone(tmp_path), measure=True)
    gone = f"{CELL}/s01.json"
    (root / gone).unlink()
    proc = snakemake(root, "-n", "report/paper_tables.tex")
    assert proc.returncode != 0
    assert f"{gone}: listed in results/raw.sha256 but missing" in out(proc) and f"git checkout -- {gone}" in out(proc)
    from decodegap.core.cells import Cell, Plan

    plan = Plan.__new__(Plan)  # the plan's own rule, without its parse-time refusal
    plan._listed = {gone}
    plan.wanted = {Cell("h200", "qwen2.5-7b", 2048, "sdpa", "bf16", "graphed"): 2}
    plan.config, plan._existing = {"measure": True}, {c: [] for c in plan.wanted}
    assert plan.missing_sessions(next(iter(plan.wanted))) == [0]  # s00 is missing here too, s01 is listed: never re-measured


# --- what the analysis refuses, naming the file ----------------------------------------------


def _real_record(session: int) -> dict:
    return json.loads((REPO / CELL / "s00.json").read_text()) | {"session": session, "seed": session}


def _truncated(record: dict, n: int) -> dict:
    """The record with n timed steps (every per-step list cut alike), still saying valid."""
    arm = record["arms"][0]
    arm["timed"] = {k: (v[:n] if isinstance(v, list) else v) for k, v in arm["timed"].items()}
    arm["expected_position"] = arm["final_position"] = arm["expected_position"] - (len(record["arms"][0]["timed"]["tokens"]) - n)
    return record


def _copy_of_s01(change) -> str:
    """s01's record filed as s04, its timed steps changed by `change` (every per-step list alike)."""
    record = json.loads((REPO / CELL / "s01.json").read_text()) | {"session": 4, "seed": 4}
    arm = record["arms"][0]
    n = len(arm["timed"]["host_ms"])
    order = change(list(range(n)))
    arm["timed"] = {k: ([v[i] for i in order] if isinstance(v, list) and len(v) == n else v) for k, v in arm["timed"].items()}
    arm["expected_position"] = arm["final_position"] = arm["expected_position"] - (n - len(order))
    return json.dumps(record)


def _nan_text(record: dict) -> str:
    text = json.dumps(record, indent=1)
    first = repr(record["arms"][0]["timed"]["host_ms"][0])
    return text.replace(first, "NaN", 1)


def _with(record: dict, *path_and_value) -> dict:
    *keys, value = path_and_value
    node = record
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return record


BAD_RECORDS = {
    # name: (file name, content, what the message must say)
    "NaN step time": ("s04.json", lambda: _nan_text(_real_record(4)), "NaN"),
    "Infinity step time": ("s04.json", lambda: _nan_text(_real_record(4)).replace("NaN", "Infinity"), "Infinity"),
    "valid with 3 samples": ("s04.json", lambda: json.dumps(_truncated(_real_record(4), 3)), "too few samples: graphed has 3 < 64"),
    "zero step time": ("s04.json", lambda: json.dumps(_real_record(4)).replace(repr(_real_record(4)["arms"][0]["timed"]["host_ms"][5]), "0.0", 1), "host_ms"),
    "every step 1e300": ("s04.json", lambda: json.dumps(_with(_real_record(4), "arms", 0, "timed", "host_ms", [1e300] * 128)), "absurd number"),
    "a step longer than an hour": ("s04.json", lambda: json.dumps(_with(_real_record(4), "arms", 0, "timed", "device_ms", [4e6] * 128)), "3600000"),
    "a lone surrogate": ("s04.json", lambda: json.dumps(_real_record(4)).replace('"graphed"', '"\\ud800"', 1), "not valid Unicode"),
    "nested 100,000 deep": ("s04.json", lambda: json.dumps(_real_record(4)).replace('"warnings": []', '"warnings": ' + "[" * 100_000 + "]" * 100_000, 1), "nests deeper"),
    "a 20 MB record": ("s04.json", lambda: json.dumps(_with(_real_record(4), "warnings", ["x" * 20_000_000])), "a session file may have"),
    "valid with a reason": ("s04.json", lambda: json.dumps(_real_record(4) | {"reasons": ["unstable: made up"]}), "says valid but lists reasons"),
    "invalid without a reason": ("s04.json", lambda: json.dumps(_real_record(4) | {"status": "invalid"}), "says invalid but gives no reason"),
    "invalid for a made-up reason": ("s04.json", lambda: json.dumps(_real_record(4) | {"status": "invalid", "reasons": ["unstable: graphed stdev is 40.0% of the mean (limit 10%)"]}),
                                     "are not what its samples give"),
    "session field and file name disagree": ("s04.json", lambda: json.dumps(_real_record(5)), "whose one file name is s05.json"),
    "no GPU UUID": ("s04.json", lambda: json.dumps(_with(_real_record(4), "environment", "gpu", "uuid", None)), "no GPU UUID"),
    "a CPU run filed under the H200": ("s04.json", lambda: json.dumps(_with(_real_record(4), "environment", "device_type", "cpu")), "timed on device 'cpu'"),
    "a copy under another number": ("s04.json", lambda: (REPO / CELL / "s01.json").read_text().replace('"session": 1,', '"session": 4,', 1),
                                    "its samples are those of"),
    "a shuffled copy": ("s04.json", lambda: _copy_of_s01(lambda order: order[::-1]), "its samples are those of"),
    "a copy cut short": ("s04.json", lambda: _copy_of_s01(lambda order: order[:120]), "its samples are those of"),
    "a protocol beyond its bounds": ("s04.json", lambda: json.dumps(_with(_real_record(4), "protocol", "max_rel_stdev", 1e9)),
                                     "states a protocol no session runs under: protocol.max_rel_stdev must be"),
    "another cell's arms": ("s04.json", lambda: json.dumps(_with(_real_record(4), "arms", 0, "mode", "static")), "not the arms ['graphed']"),
}


@pytest.mark.parametrize("case", list(BAD_RECORDS))
def test_a_bad_record_stops_the_run_naming_the_file(tmp_path, case):
    """Dropped in by hand, a record is refused at planning (not in the manifest); with its manifest
    line forged too, the analysis refuses it for what it is. Either way the message names the
    file, there is no traceback, and nothing recorded changes."""
    name, content, message = BAD_RECORDS[case]
    root = small(clone(tmp_path))
    before = data_hashes(root)
    bad = root / CELL / name
    bad.write_text(content())
    rel = f"{CELL}/{name}"
    proc = snakemake(root, "--cores", "1", GROUP_STATS)
    assert proc.returncode != 0 and f"{rel}: not in results/raw.sha256" in out(proc) and "Traceback" not in out(proc)
    listed(root, rel)
    proc = snakemake(root, "--cores", "1", GROUP_STATS)
    text = out(proc)
    assert proc.returncode != 0
    assert rel in text and message in text, text[-3000:]
    assert "Traceback" not in text
    if "copy" in case:
        assert f"{CELL}/s01.json" in text  # names both files
    assert {k: v for k, v in data_hashes(root).items() if k != rel} == before


@pytest.mark.parametrize("what", ["a symbolic link to a file outside the tree", "a FIFO", "a stray copy s001.json"])
def test_anything_but_a_listed_regular_session_file_stops_the_run(tmp_path, what):
    root = small(clone(tmp_path))
    outside = tmp_path / "outside.json"
    outside.write_bytes((REPO / CELL / "s01.json").read_bytes())
    target = root / CELL / ("s001.json" if "s001" in what else "s09.json")
    if "link" in what:
        target.symlink_to(outside)
    elif "FIFO" in what:
        os.mkfifo(target)
    else:
        target.write_bytes((REPO / CELL / "s01.json").read_bytes())
    rel = target.relative_to(root).as_posix()
    listed(root, rel) if "FIFO" not in what else None  # a forged manifest line changes nothing
    proc = snakemake(root, "-n", "report/paper_tables.tex")
    assert proc.returncode != 0 and rel in out(proc) and "Traceback" not in out(proc)
    check = provenance(root, "check")
    assert check.returncode == 1 and rel in out(check)


def test_a_record_stating_a_looser_protocol_is_judged_by_the_configured_one(tmp_path):
    """A record whose own protocol lowers min_samples to 2 and raises max_rel_stdev to 1e9 still
    says valid by its own lights; the analysis judges it by the config's protocol: it is invalid
    (too few samples), no number moves, and the verdict says why."""
    root = small(clone(tmp_path))
    base = snakemake(root, "--cores", "1", GROUP_STATS)
    assert base.returncode == 0, out(base)[-2000:]
    before = json.loads((root / CELL_STATS).read_text())
    shutil.rmtree(root / GROUP_STATS)
    rec = _truncated(_real_record(4), 3)
    rec["protocol"].update(min_samples=2, max_rel_stdev=1000.0)
    rec["arms"][0]["timed"]["host_ms"] = [8.0, 80.0, 800.0]  # wildly unstable, and fresh samples
    (root / CELL / "s04.json").write_text(json.dumps(rec))
    listed(root, f"{CELL}/s04.json")
    proc = snakemake(root, "--cores", "1", GROUP_STATS)
    assert proc.returncode == 0, out(proc)[-2000:]
    after = json.loads((root / CELL_STATS).read_text())
    s04 = next(s for s in after["sessions"] if s["session"] == 4)
    assert s04["status"] == "invalid" and "too few samples: graphed has 3 < 64" in s04["reasons"]
    for scope in ("completed", "valid"):
        assert after[scope]["arms"]["graphed"]["median_ms"] == before[scope]["arms"]["graphed"]["median_ms"]
        assert after[scope]["arms"]["graphed"]["ci_low_ms"] == before[scope]["arms"]["graphed"]["ci_low_ms"]


# --- a stale or edited report shows ------------------------------------------------------------


def test_a_new_session_after_touch_makes_the_report_stale(built):
    root = built
    assert provenance(root, "check").returncode == 0
    new = f"{CELL}/s09.json"
    rec = _real_record(9)
    for arm in rec["arms"]:
        arm["timed"]["host_ms"] = [x * 1.001 for x in arm["timed"]["host_ms"]]  # a session of its own
    (root / new).write_text(json.dumps(rec))
    ing = python(root, "-m", "decodegap.measure.ingest", new)
    assert ing.returncode == 0, out(ing)
    touched = snakemake(root, "--cores", "1", "--touch", "report/paper_tables.tex")
    assert touched.returncode == 0, out(touched)[-2000:]
    check = provenance(root, "check")
    assert check.returncode == 1 and "stale report: 1 session(s)" in check.stderr and new in check.stderr


def test_a_number_edited_by_hand_fails_the_check_naming_it(built):
    root = built
    table = root / "report/tables/ab.tex"
    text = table.read_text()
    doc = json.loads((root / "report/provenance.json").read_text())
    key = next(k for k in doc["numbers"] if k.startswith("ab/speedup/"))
    number = doc["numbers"][key]["text"]
    table.write_text(text.replace(f"\\dgnum{{{key}}}{{{number}}}", f"\\dgnum{{{key}}}{{9.999}}", 1))
    check = provenance(root, "check")
    assert check.returncode == 1 and "edited table: report/tables/ab.tex" in check.stderr and f"{key}: '9.999'" in check.stderr
    table.write_text(text)
    figure = root / "report/figures/ab.png"
    drawn = figure.read_bytes()
    figure.write_bytes(drawn[:-16] + bytes(16))  # a figure swapped for another: the same name, other pixels
    check = provenance(root, "check")
    assert check.returncode == 1 and "edited figure: report/figures/ab.png" in check.stderr
    assert "edited table" not in check.stderr
    figure.write_bytes(drawn)
    assert provenance(root, "check").returncode == 0


def test_provenance_check_catches_any_change_to_any_data_file(tmp_path):
    root = clone(tmp_path)
    assert provenance(root, "check").returncode == 0
    invalid = "results/raw/h200/qwen2.5-7b/ctx16384/sdpa_bf16_eager/s00.json"  # behind no number
    for rel in (f"{CELL}/s01.json", invalid, ENV_RECORD):
        path = root / rel
        original = path.read_bytes()
        i = original.index(b'"gpu": ') + 8 if rel == ENV_RECORD else original.index(b'"seed": ') + 8
        path.chmod(0o644)
        path.write_bytes(original[:i] + bytes([original[i] ^ 1]) + original[i + 1:])  # one byte
        proc = provenance(root, "check")
        assert proc.returncode == 1 and f"changed (sha256 differs from results/raw.sha256): {rel}" in proc.stderr
        path.unlink()
        proc = provenance(root, "check")
        assert proc.returncode == 1 and f"missing (listed in results/raw.sha256): {rel}" in proc.stderr
        path.write_bytes(original)
    assert provenance(root, "check").returncode == 0
    (root / CELL / "s09.json").write_bytes((root / CELL / "s01.json").read_bytes())
    proc = provenance(root, "check")
    assert proc.returncode == 1 and f"added (not in results/raw.sha256): {CELL}/s09.json" in proc.stderr
    assert f"copied samples: {CELL}/s09.json holds the step times of {CELL}/s01.json" in proc.stderr


def test_provenance_code_refuses_an_unknown_commit_and_a_missing_folder(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(".venv*", "report", "logs", ".snakemake", "cells", "stats", "aggregate"),
                    symlinks=True)
    missing = provenance(root, "code", "results/raw/h200/no-such-model")
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    one = tmp_path / "one" / CELL
    one.mkdir(parents=True)
    rec = json.loads((REPO / CELL / "s00.json").read_text())
    rec["code"]["commit"] = "0123456789abcdef0123456789abcdef01234567"
    (one / "s00.json").write_text(json.dumps(rec))
    proc = provenance(root, "code", str(tmp_path / "one/results/raw"))
    assert proc.returncode == 1 and "UNKNOWN COMMIT 0123456789abcdef" in proc.stdout


# --- bad input, before any GPU time ------------------------------------------------------------


def _measure(root, *extra):
    return python(root, "-m", "decodegap.measure", "--gpu", "h200", "--model", "qwen2.5-7b", "--ctx", "2048", "--mode", "graphed",
                  "--session", "7", *extra)


@pytest.mark.parametrize("extra,message", [
    (["--gpu-spec", '{"device": "cpu"}'], "an override cannot make it 'cpu'"),
    (["--max-rel-stdev", "inf"], "--max-rel-stdev: protocol.max_rel_stdev must be a finite number"),
    (["--max-rel-stdev", "nan"], "must be a finite number"),
    (["--out", f"results/raw/h200/qwen2.5-7b/ctx2048/sdpa_bf16_eager/s07.json"], "a session goes to its own cell's file"),
    (["--ctx", "200000"], "beyond qwen2.5-7b's 131072 positions"),
])
def test_the_session_command_refuses_bad_input_before_touching_a_gpu(tmp_path, extra, message):
    root = tmp_path
    if extra[0] == "--ctx":
        proc = python(root, "-m", "decodegap.measure", "--gpu", "cpu", "--model", "qwen2.5-7b", "--mode", "graphed", "--session", "7",
                      "--root", str(root), *extra)
    else:
        proc = _measure(root, "--root", str(root), *extra)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (root / "results").exists()


@pytest.mark.parametrize("change,message", [
    (lambda c: c["gpus"].update(h200={"device": "cpu"}), "an override cannot make it 'cpu'"),
    (lambda c: c["gpus"].update(h200={"b_peak_Bps": float("nan")}), "gpus.h200.b_peak_Bps: nan is not a finite number"),
    (lambda c: c["gpus"].update(h200={"b_peak_Bps": float("inf")}), "gpus.h200.b_peak_Bps: inf is not a finite number"),
    (lambda c: c["gpus"].update(h200={"price_usd_per_hour": -1.0}), "price_usd_per_hour"),
    (lambda c: c["gpus"].update(h200={"display_name": "x" * 10_000}), "display_name has 10000 characters; at most 48"),
    (lambda c: c["matrix"].update(ctx=[1_000_000]), "beyond qwen2.5-7b's 131072 positions"),
    (lambda c: c["protocol"].update(max_rel_stdev=float("inf")), "protocol.max_rel_stdev: inf is not a finite number"),
])
def test_a_bad_config_value_fails_at_planning_naming_the_key(tmp_path, change, message):
    root = small(clone(tmp_path))
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    change(config)
    (root / "config/config.yaml").write_text(yaml.dump(config))
    proc = snakemake(root, "-n", "report/paper_tables.tex")
    assert proc.returncode != 0 and message in out(proc), out(proc)[-2000:]
    assert "Traceback" not in out(proc)


def test_an_interrupted_run_resumes_with_the_same_command(tmp_path):
    """Ctrl-C in the middle of the README's main command; then the same command finishes the report."""
    root = small(clone(tmp_path))
    before = data_hashes(root)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # SIGINT's default action in the child, as a terminal's foreground job has it: a test run started in the
    # background (`cmd &`, nohup, some CI runners) inherits SIGINT ignored, and the run would finish uninterrupted
    job = subprocess.Popen([SNAKEMAKE, "--cores", "1", "report/paper_tables.tex"], cwd=root, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = time.time()
    deadline = started + 120
    while time.time() < deadline and not list((root / "results/stats").rglob("stats.json")):
        time.sleep(0.2)  # wait until jobs are under way
    waited_s = time.time() - started
    os.killpg(job.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's process group
    log = job.communicate(timeout=120)[0]
    # the log says when the interrupt came and what snakemake did with it
    assert not (root / "report/paper_tables.tex").exists(), \
        f"the run finished before it could be interrupted (interrupt after {waited_s:.1f} s):\n{log[-3000:]}"
    again = snakemake(root, "--cores", "2", "report/paper_tables.tex")
    assert again.returncode == 0, out(again)[-3000:]
    assert (root / "report/paper_tables.tex").exists()
    assert data_hashes(root) == before


def test_readme_headline_matches_the_report_it_comes_from():
    """The README's launch-tax sentence quotes the A/B table's headline scope (completed sessions),
    its estimator's value, interval, sessions and machines as the bundled report renders them."""
    import re

    numbers = dict(line.split("\t")[:2] for line in (REPO / "tests/data/bundled_report_numbers.tsv").read_text().splitlines() if "\t" in line)
    readme = " ".join((REPO / "README.md").read_text().split())
    for model, display in (("qwen2.5-7b", "Qwen-2.5-7B"), ("mistral-7b-v0.3", "Mistral-7B-v0.3"), ("llama-3.1-8b", "Llama-3.1-8B")):
        cid = f"h200/{model}/ctx2048/sdpa_bf16_ab-static-graphed/completed"
        speedup, lo, hi = (float(numbers[f"ab/{q}/{cid}"]) for q in ("speedup", "speedup_ci_low", "speedup_ci_high"))
        n, m = numbers[f"ab/n_sessions/{cid}"], numbers[f"ab/n_machines/{cid}"]
        said = rf"{speedup:.2f}x (faster )?for {re.escape(display)} \({n} (sessions )?on {m}( machines)?, (95 % CI )?{lo:.2f} to {hi:.2f}\)"
        assert re.search(said, readme), (display, said)
