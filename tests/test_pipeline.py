"""The workflow end to end on a synthetic store: report, provenance, incremental rebuilds, and
that nothing but a missing session ever asks for a GPU."""

import json
import os
import re
import time

import numpy as np
import pytest

from conftest import SMALL_CELLS, dry_run_jobs, dry_run_outputs, make_workspace, run_snakemake, small_config
from decodegap.analysis import provenance, synthetic
from decodegap.core import manifest
from decodegap.core.record import write_session


def test_report_is_complete(built_workspace):
    root = built_workspace
    tex = (root / "report/paper_tables.tex").read_text()
    for t in ("tables/matrix_h200.tex", "tables/matrix_l4.tex", "tables/ab.tex", "tables/published.tex"):
        assert f"\\input{{{t}}}" in tex
        assert (root / "report" / t).exists()
    for name in ("ladder", "context", "ab"):
        for ext in ("pdf", "png"):
            assert (root / f"report/figures/{name}.{ext}").stat().st_size > 1000
    from PIL import Image

    for png in (root / "report/figures").glob("*.png"):  # as the workflow draws them: no strip, nothing huge
        w, h = Image.open(png).size
        assert max(w, h) <= 3000 and 1 / 3 <= w / h <= 3, (png.name, w, h)
    assert (root / "report/provenance.json").exists()
    assert (root / "results/aggregate/sessions.parquet").exists()


def test_unmeasured_cells_say_so_and_invalid_ones_carry_reasons(built_workspace):
    matrix = (built_workspace / "report/tables/matrix_h200.tex").read_text()
    # ctx 4096 eager was never measured: it is a row entry, not a failure
    row_4096 = next(line for line in matrix.splitlines() if line.startswith("Qwen-2.5-7B & 4096"))
    assert "not measured" in row_4096
    l4 = (built_workspace / "report/tables/matrix_l4.tex").read_text()
    assert "not measured" in l4  # eager on l4
    assert "s02: unstable: eager stdev is 33.7\\% of the mean" in matrix


def test_every_number_in_the_tex_has_a_provenance_key(built_workspace):
    doc = json.loads((built_workspace / "report/provenance.json").read_text())
    rendered = {}
    for tex in (built_workspace / "report/tables").glob("*.tex"):
        for key, text in re.findall(r"\\dgnum\{([^}]*)\}\{([^}]*)\}", tex.read_text()):
            rendered[key] = text
    assert rendered and set(rendered) == set(doc["numbers"])
    for key, text in rendered.items():
        assert doc["numbers"][key]["text"] == text
        assert doc["numbers"][key]["raw_files"], key


def test_lineage_of_a_random_number_reproduces_it_from_the_raw_files(built_workspace, capsys):
    doc = json.loads((built_workspace / "report/provenance.json").read_text())
    keys = sorted(doc["numbers"])
    rng = np.random.default_rng(0)
    cwd = os.getcwd()
    os.chdir(built_workspace)
    try:
        for key in [keys[i] for i in rng.choice(len(keys), size=4, replace=False)] + [k for k in keys if "/speedup_ci_high/" in k][:1]:
            assert provenance.lineage(doc, key, do_recompute=True) == 0, key
            out = capsys.readouterr().out
            assert "reproduces" in out
            for r in doc["numbers"][key]["raw_files"]:
                assert r["path"] in out
                assert r["environment_record"] == {"path": "synthetic", "sha256": "0" * 64}  # the stage each session ran under
            assert "environment record synthetic  sha256 0000000000000000" in out
    finally:
        os.chdir(cwd)


def test_check_fails_when_a_raw_file_changes(tmp_path):
    root = make_workspace(tmp_path)
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        doc = provenance.load("report/provenance.json")
        assert provenance.check(doc) == 0
        victim = root / "results/raw/l4/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/s01.json"
        victim.chmod(0o644)
        victim.write_text(victim.read_text().replace('"seed": 1', '"seed": 7'))
        assert provenance.check(doc) == 1
    finally:
        os.chdir(cwd)


def test_one_new_session_reruns_only_what_depends_on_it(tmp_path):
    root = make_workspace(tmp_path)
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    assert dry_run_jobs(root, "report/paper_tables.tex") == {}
    time.sleep(1.1)  # mtimes must move past the outputs
    cell = SMALL_CELLS[3]  # l4 graphed
    new = root / "results/raw/l4/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/s02.json"
    write_session(synthetic.record(cell, 2, 48, np.random.default_rng(9)), new)
    manifest.add([new], root)  # as the commands that add sessions do
    outputs = dry_run_outputs(root, "report/paper_tables.tex")
    # that cell's group (l4, qwen, ctx 2048), the L4 matrix table, the ladder (l4 is at the headline
    # cell), the context figure, the published, anatomy, host and cost tables and figures, the combined
    # tables and the gathering files: nothing else
    assert outputs == {"results/cells/l4/qwen2.5-7b/ctx2048", "results/aggregate/sessions.parquet", "report/tables/matrix_l4.tex",
                       "report/figures/ladder.pdf", "report/figures/context.pdf", "report/tables/published.tex",
                       "report/tables/anatomy.tex", "report/tables/sensitivity.tex", "report/tables/variance.tex",
                       "report/tables/floors.tex", "report/figures/anatomy.pdf", "report/tables/cost.tex",
                       "report/figures/deployment.pdf", "report/tables/host.tex", "report/tables/model.tex",
                       "report/provenance.json", "report/paper_tables.tex"}


def test_analysis_changes_never_trigger_a_measurement(tmp_path):
    root = make_workspace(tmp_path, config=small_config(measure=True))
    # with measure on, each wanted session missing from the store is one measurement job
    missing = [dict(SMALL_CELLS[0], ctx=4096), dict(SMALL_CELLS[3], mode="eager"),
               dict(SMALL_CELLS[3], mode="eager", ctx=4096), dict(SMALL_CELLS[3], ctx=4096)]
    jobs = dry_run_jobs(root, "report/paper_tables.tex")
    assert jobs.get("measure") == 2 * len(missing)
    # fill them (as if measured), build, then change analysis params and protocol
    synthetic.write_store(root, missing, 2, 48, seed=5)
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    cfg = small_config(measure=True)
    cfg["stats"]["n_resamples"] = 300
    cfg["protocol"]["timed_steps"] = 64
    (root / "config.yaml").write_text(__import__("yaml").safe_dump(cfg))
    jobs = dry_run_jobs(root, "report/paper_tables.tex")
    assert "measure" not in jobs and jobs.get("cells")  # stats rerun, nothing measured


def test_config_typo_fails_fast_naming_the_key(tmp_path):
    cfg = small_config()
    cfg["matrix"]["modles"] = cfg["matrix"].pop("models")
    root = make_workspace(tmp_path, config=cfg)
    t = time.perf_counter()
    proc = run_snakemake(root, "-n", check=False)
    assert proc.returncode != 0 and time.perf_counter() - t < 30
    out = proc.stdout + proc.stderr
    assert "matrix" in out and "modles" in out


def test_corrupt_raw_file_stops_the_run_naming_it(tmp_path):
    root = make_workspace(tmp_path)
    bad = root / "results/raw/h200/qwen2.5-7b/ctx4096/sdpa_bf16_graphed/s01.json"
    bad.chmod(0o644)
    bad.write_text(bad.read_text()[:500])
    proc = run_snakemake(root, "--cores", "1", "--", "report/paper_tables.tex", check=False)
    assert proc.returncode != 0
    # the bytes are not the ones the manifest lists: refused before they are parsed, naming the file
    assert f"{bad.relative_to(root)}: its sha256" in proc.stdout + proc.stderr and "git checkout --" in proc.stdout + proc.stderr


def test_an_overridden_b_peak_is_the_one_every_artifact_divides_by(tmp_path):
    """A user corrects the H200's datasheet bandwidth in the config: the Parquet files, the
    statistics, the tables and the provenance all show floors and R_floor at that bandwidth, while
    the sessions keep what the measurement saw."""
    import pandas as pd

    b_peak = 2.4e12  # config/gpus.yaml says 4.8e12, which the synthetic sessions recorded
    root = make_workspace(tmp_path, config=small_config(gpus={"h200": {"b_peak_Bps": b_peak}}))
    run_snakemake(root, "--cores", "2", "--", "report/paper_tables.tex")
    for table in ("results/aggregate/sessions.parquet", *map(str, root.glob("results/cells/h200/**/sessions.parquet"))):
        df = pd.read_parquet(root / table)
        df = df[(df["gpu"] == "h200") & df["weight_bytes"].notna()]
        assert len(df) and (df["b_peak_Bps"] == b_peak).all() and (df["measured_b_peak_Bps"] == 4.8e12).all(), table
        assert np.allclose(df["t_floor_s"], (df["weight_bytes"] + df["kv_bytes"]) / b_peak), table
        assert np.allclose(df["measured_t_floor_s"], (df["weight_bytes"] + df["kv_bytes"]) / 4.8e12), table
    sessions = pd.read_parquet(root / "results/aggregate/sessions.parquet")
    numbers = json.loads((root / "report/provenance.json").read_text())["numbers"]
    checked = 0
    for stats_file in root.glob("results/stats/h200/**/stats.json"):
        stats = json.loads(stats_file.read_text())
        for arm, a in stats["completed"]["arms"].items():
            cell = stats["cell"]
            row = sessions[(sessions["ctx"] == cell["ctx"]) & (sessions["mode"] == cell["mode"]) & (sessions["arm"] == arm)].iloc[0]
            assert a["b_peak_Bps"] == b_peak
            assert a["t_floor_ms"] == pytest.approx(row["t_floor_s"] * 1e3)  # stats.json agrees with the Parquet
            assert a["r_floor"] == pytest.approx(a["t_floor_ms"] / a["median_ms"])
            key = f"matrix_h200/r_floor/h200/{cell['model']}/ctx{cell['ctx']}/{cell['attn']}_{cell['quant']}_{cell['mode']}/completed"
            if key in numbers:  # the table renders it, and provenance records the same value
                assert numbers[key]["value"] == pytest.approx(a["r_floor"]) and numbers[key]["text"] == f"{a['r_floor']:.3f}"
                assert f"\\dgnum{{{key}}}{{{a['r_floor']:.3f}}}" in (root / "report/tables/matrix_h200.tex").read_text()
                checked += 1
    assert checked >= 3
    assert r"2400\,GB/s" in (root / "report/tables/matrix_h200.tex").read_text()  # the bandwidth the table names
