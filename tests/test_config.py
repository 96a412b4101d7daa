"""The workflow config: schema, defaults, typos, and GPUs added by config alone."""

import pytest
import yaml

from conftest import REPO
from decodegap.measure.attention import PATHS as ATTN
from decodegap.core.config import load_gpus, load_models
from decodegap.core.errors import ConfigError
from decodegap.measure.modes import MODES
from decodegap.analysis.reference import load_reference
from decodegap.core.protocol import Protocol
from decodegap.measure.weights import PATHS as QUANT
from decodegap.core.cells import CONFIG_SCHEMA, Plan, validate_config

CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())


def test_shipped_config_is_valid_and_names_the_bundled_cells():
    plan = Plan(CONFIG, root=REPO)
    assert any(c.gpu == "h200" for c in plan.analysed())
    assert "report/paper_tables.tex" in plan.final_targets()


def test_schema_enums_match_the_code_and_tables():
    """The enums the config is validated against are the tables' keys and the registries' units:
    nothing lists a path or a mode by hand."""
    from decodegap.core.cells import schema_with_keys

    gpus, models = yaml.safe_load((REPO / "config/gpus.yaml").read_text()), load_models()
    schema = schema_with_keys(gpus, models)["$defs"]
    assert set(schema["gpu_key"]["enum"]) == set(gpus)
    assert set(schema["model_key"]["enum"]) == set(models)
    assert set(schema["attn_key"]["enum"]) == set(ATTN)
    assert set(schema["quant_key"]["enum"]) == set(QUANT)
    assert set(schema["mode_key"]["enum"]) == set(MODES)


def test_protocol_defaults_agree_everywhere():
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())["properties"]["protocol"]["properties"]
    p = Protocol()
    for key, spec in schema.items():
        assert getattr(p, key) == spec["default"] == CONFIG["protocol"][key], key


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.update(matrx=c.pop("matrix")), "'matrx' was unexpected"),
        (lambda c: c["matrix"].update(gpus=["h100"]), "matrix.gpus.0: 'h100' is not one of"),
        (lambda c: c["matrix"].update(models=["qwen-7b"]), "matrix.models.0: 'qwen-7b'"),
        (lambda c: c["ab"][0].update(mode="eager"), "ab.0.mode"),
        (lambda c: c["stats"].update(confidence=1.5), "stats.confidence"),
        (lambda c: c["protocol"].update(timed_step=3), "timed_step"),
        (lambda c: c["environment"].update(refine_s=-1), "environment.refine_s"),
        (lambda c: c["environment"].update(tune=60), "tune"),
    ],
)
def test_bad_config_names_the_key(mutate, message):
    import copy

    cfg = copy.deepcopy(CONFIG)
    mutate(cfg)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        validate_config(cfg)


def test_a_gpu_is_added_by_config_alone():
    import copy

    cfg = copy.deepcopy(CONFIG)
    cfg["gpus"] = {"rtx-6000-ada": {"display_name": "RTX 6000 Ada", "b_peak_Bps": 9.6e11, "device_name_match": "RTX 6000 Ada",
                                    "price_usd_per_hour": 1.1, "slurm": {"gpu_model": "rtx6000ada"}},
                   "h200": {"price_usd_per_hour": 4.0}}
    cfg["matrix"]["gpus"] = ["rtx-6000-ada", "h200"]
    plan = Plan(cfg, root=REPO)
    assert plan.gpus["rtx-6000-ada"].b_peak_Bps == 9.6e11
    assert plan.gpus["h200"].price_usd_per_hour == 4.0 and plan.gpus["h200"].b_peak_Bps == 4.8e12  # field by field
    assert plan.gpus["h200"].slurm["gpu_model"] == "h200"


def test_gpu_table_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "gpus.yaml"
    bad.write_text("x100:\n  display_name: X\n  b_peak_Bps: fast\n")
    with pytest.raises(ConfigError, match=r"gpus.yaml: gpu 'x100'.b_peak_Bps must be a number"):
        load_gpus(bad)


def test_reference_figures_are_sourced():
    figures = load_reference()
    assert len(figures) >= 30
    by_key = {f["key"]: f for f in figures}
    assert by_key["r_floor.h100-sxm5.qwen2.5-7b.ctx2048"]["value"] == 0.27
    assert by_key["speedup.h100-sxm5.ctx2048.bf16.ab-eager-graphed"]["value"] == 1.259
    assert all(f["sources"] and all("quote" in s for s in f["sources"]) for f in figures)


@pytest.mark.parametrize("field,value,message", [
    ("num_hidden_layers", True, "num_hidden_layers must be a positive integer, got True"),
    ("num_hidden_layers", 28.0, "num_hidden_layers must be a positive integer, got 28.0"),
    ("tie_word_embeddings", "no", "tie_word_embeddings must be true or false"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps must be a finite number"),
])
def test_a_card_with_a_bad_shape_names_the_key(tmp_path, field, value, message):
    models = yaml.safe_load((REPO / "config/models.yaml").read_text())
    models["qwen2.5-7b"]["architecture"][field] = value
    path = tmp_path / "models.yaml"
    path.write_text(yaml.dump(models))
    with pytest.raises(ConfigError, match=f"model 'qwen2.5-7b'.architecture.{message}".replace("(", r"\(").replace(".", r"\.")):
        load_models(path)


def test_display_names_are_capped_and_ctx_must_fit_the_card(tmp_path):
    models = yaml.safe_load((REPO / "config/models.yaml").read_text())
    models["qwen2.5-7b"]["display_name"] = "Q" * 49
    path = tmp_path / "models.yaml"
    path.write_text(yaml.dump(models))
    with pytest.raises(ConfigError, match="display_name has 49 characters; at most 48"):
        load_models(path)
    import copy

    cfg = copy.deepcopy(CONFIG)
    cfg["matrix"]["ctx"] = [131072]  # the card's positions, with no room for the steps a session decodes
    with pytest.raises(ConfigError, match=r"cell h200/qwen2\.5-7b/ctx131072/sdpa_bf16_eager: ctx 131072 \(\+\d+ decode positions\) is beyond"):
        Plan(cfg, root=REPO)


def test_a_device_name_gives_its_gpu_type_and_an_unknown_one_a_clear_error(capsys):
    """envs/lent_gpu.sh asks `python -m decodegap.core.config gpu-key` for the type of the device a call
    landed on (a call for an H200 may get an H100): the longest device_name_match wins, and a device no
    entry matches exits 2 naming it, not a session filed under the wrong GPU type."""
    from decodegap.core.config import gpu_key_of_name, main_gpu_key

    assert gpu_key_of_name("NVIDIA H100 80GB HBM3") == "h100-sxm5" and gpu_key_of_name("NVIDIA H200") == "h200"
    assert gpu_key_of_name("NVIDIA L40S") == "l40s" and gpu_key_of_name("NVIDIA L4") == "l4"  # "L4" is in "L40S": the longer match
    assert gpu_key_of_name("NVIDIA B200") is None
    assert main_gpu_key(["gpu-key", "NVIDIA H100 80GB HBM3"]) == 0 and capsys.readouterr().out.strip() == "h100-sxm5"
    assert main_gpu_key(["gpu-key", "NVIDIA B200"]) == 2 and "'NVIDIA B200'" in capsys.readouterr().err
    assert main_gpu_key([]) == 2 and "usage" in capsys.readouterr().err


def test_a_lent_gpu_call_without_a_full_commit_stops_at_once_naming_sha():
    """envs/lent_gpu.sh records SHA as every session's commit: a call without it (a collect call sent
    bare on 2026-12-06) or with a short one stops before touching the device, with exit 2 and a message
    that names SHA, not bash's "unbound variable" halfway through."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "SHA"}
    for sha in (None, "1e3deed", "1e3deed1d84c038ef3c4e13efd8b3cf7f38ad46Z"):
        run = subprocess.run(["bash", "-c", ". envs/lent_gpu.sh; echo reached"], cwd=root, capture_output=True, text=True,
                             env={**env, **({"SHA": sha} if sha else {})}, timeout=30)
        assert run.returncode == 2 and "reached" not in run.stdout, (sha, run)
        assert "SHA=" in run.stderr and "full commit" in run.stderr, run.stderr


def test_a_pinned_tree_holds_the_commits_code_and_this_checkouts_manifest_and_refuses_another_commit():
    """envs/pin_code.sh builds the tree a lent-GPU call runs an earlier commit's code from (a second
    machine for a sources version): the commit's committed sources (what the sessions will record,
    whatever this checkout has edited since), this checkout's manifest (so the batch skips every session
    recorded since) and environment records, no raw sessions; run again, it refreshes the manifest;
    a folder of another commit, an unknown commit or a folder outside .pinned* is refused by name."""
    import shutil
    import subprocess
    import uuid
    from pathlib import Path

    import pytest

    from decodegap.core.sources import _blob_sha256, _committed_sources, source_hashes, sources_sha256

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if len(head) != 40:
        pytest.skip("not a git checkout: nothing to pin")
    name = f".pinned-test-{uuid.uuid4().hex[:8]}"
    pin = lambda *a: subprocess.run(["bash", "envs/pin_code.sh", *a], cwd=root, capture_output=True, text=True, timeout=120)  # noqa: E731
    try:
        run = pin("HEAD", name)
        assert run.returncode == 0, run.stderr
        tree = root / name
        assert (tree / ".pinned_sha").read_text().strip() == head
        assert not (tree / "results" / "raw").exists() and (tree / "envs" / "lent_gpu.sh").is_file()
        assert (tree / "results" / "raw.sha256").read_bytes() == (root / "results" / "raw.sha256").read_bytes()
        assert {p.name for p in (tree / "results" / "environment").glob("*.json")} >= {p.name for p in (root / "results" / "environment").glob("*.json")}
        files = source_hashes(tree)
        committed = {p: _blob_sha256(root, blob) for p, blob in _committed_sources(root, head).items()}
        assert files == committed and sources_sha256(files)[:8] in run.stdout and f'carry=["{name}"]' in run.stdout
        (tree / "results" / "raw.sha256").write_text("")  # a manifest from before the last ingest
        again = pin(head, name)
        assert again.returncode == 0 and (tree / "results" / "raw.sha256").read_bytes() == (root / "results" / "raw.sha256").read_bytes()
        parent = subprocess.run(["git", "-C", str(root), "rev-parse", "-q", "--verify", "HEAD~1"], capture_output=True, text=True).stdout.strip()
        if parent:
            other = pin(parent, name)
            assert other.returncode == 3 and name in other.stderr and head in other.stderr and parent in other.stderr
            assert (tree / ".pinned_sha").read_text().strip() == head  # the folder kept its commit
    finally:
        shutil.rmtree(root / name, ignore_errors=True)
    bad = pin("0" * 40, name)
    assert bad.returncode == 2 and "0" * 40 in bad.stderr and not (root / name).exists()
    outside = pin("HEAD", "results/pinned")
    assert outside.returncode == 2 and "results/pinned" in outside.stderr and not (root / "results" / "pinned").exists()
