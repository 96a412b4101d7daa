"""The README says what the report says: its findings block is rendered from the bundled report's
numbers (tests/data/bundled_report_numbers.tsv, which test_pipeline's slow test compares with a
fresh build), and every command and path it names exists."""

import json
import sys
import re
from pathlib import Path

import pytest

from decodegap.analysis import readme
from decodegap.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
TEXT = (REPO / "README.md").read_text()


def bundled():
    return readme.numbers_of_tsv(REPO / "tests/data/bundled_report_numbers.tsv")


def test_findings_block_is_what_the_bundled_report_renders():
    block = readme.render(bundled()).strip("\n")
    ours = readme.block_of(TEXT)
    if ours != block:
        first = next(i for i, (a, b) in enumerate(zip(ours.splitlines() + [""], block.splitlines() + [""])) if a != b)
        pytest.fail(f"README findings line {first + 1} differs from the report's numbers; run "
                    f"`python -m decodegap.analysis.readme` after `make report`:\n  README: "
                    f"{(ours.splitlines() + [''])[first]}\n  report: {(block.splitlines() + [''])[first]}")


def test_a_changed_report_number_changes_the_rendered_findings():
    numbers = bundled()
    key = "ab/speedup/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-static-graphed/completed"
    assert f"[[{key}|.2f]]" in readme.TEMPLATE.read_text()
    before = readme.render(numbers)
    after = readme.render({**numbers, key: "9.876"})
    assert "9.88x faster for Qwen-2.5-7B" in after and "9.88x" not in before


def test_a_key_the_report_lacks_is_named():
    with pytest.raises(ConfigError, match="no/such/key"):
        readme.render(bundled(), "the speedup is [[no/such/key]]x")
    with pytest.raises(ConfigError, match=r"\[\[k\|\.2f\]\]"):
        readme.render({"k": "n/a"}, "[[k|.2f]]")


def test_check_names_the_first_differing_line(tmp_path, monkeypatch, capsys):
    prov = tmp_path / "provenance.json"
    prov.write_text(json.dumps({"numbers": {k: {"text": v} for k, v in bundled().items()}}))
    monkeypatch.setattr(readme, "README", tmp_path / "README.md")
    (tmp_path / "README.md").write_text(TEXT)
    assert readme.main(["--provenance", str(prov), "--check"]) == 0
    (tmp_path / "README.md").write_text(TEXT.replace("graphs are 3.39x faster", "graphs are 4.39x faster"))
    assert readme.main(["--provenance", str(prov), "--check"]) == 1
    assert "4.39x" in capsys.readouterr().err
    assert readme.main(["--provenance", str(prov)]) == 0  # rewrites the block
    assert (tmp_path / "README.md").read_text() == TEXT


def test_paths_the_readme_names_exist():
    """Every repository path in backticks that looks like one (a folder/file with an extension, or
    a folder ending in /) exists, so a rename cannot leave the README pointing nowhere."""
    missing = []
    for path in set(re.findall(r"`((?:scripts|workflow|config|envs|benchmarks|tests|profiles|\.ci|results/benchmarks)/[^`*<>{} ]+)`", TEXT)):
        if not (REPO / path).exists() and not (REPO / "scripts" / path).exists():
            missing.append(path)
    for path in set(re.findall(r"`(decodegap/[^`*<>{} ]+)`", TEXT)):
        if not (REPO / "scripts" / path).exists():
            missing.append(path)
    assert not missing, missing


def test_benchmarks_the_readme_lists_exist_and_every_benchmark_is_listed():
    listed = set(re.findall(r"python (benchmarks/[a-z0-9_]+\.py)", TEXT))
    present = {f"benchmarks/{p.name}" for p in (REPO / "benchmarks").glob("*.py")}
    assert listed == present, (sorted(present - listed), sorted(listed - present))


def test_make_targets_the_readme_names_exist():
    makefile = (REPO / "Makefile").read_text()
    for target in set(re.findall(r"make ([a-z][a-z-]+)", TEXT)):
        if target in ("report", "test", "test-all"):
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_python_module_commands_the_readme_gives_exist():
    for module in set(re.findall(r"python -m (decodegap(?:\.[a-z_]+)+)", TEXT)):
        rel = Path("scripts", *module.split("."))
        assert (REPO / rel).with_suffix(".py").exists() or (REPO / rel / "__main__.py").exists(), module


def engine_ms(numbers, card, ctx, cell, arm):
    """The engines table's ms/step of an arm: the fused step's from its newest code where its cell spans
    versions (tables_common.arm_scope), every other from the completed sessions."""
    key = f"engines/ms_per_step/h200/{card}/ctx{ctx}/sdpa_{cell}/{arm}"
    return float(numbers.get(f"{key}/newest_code") or numbers[f"{key}/completed"])


ENGINE_CELLS = [(card, ctx) for card in ("qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b") for ctx in (2048, 16384)]


@pytest.mark.parametrize("card,ctx", ENGINE_CELLS)
def test_the_engines_verdict_holds_in_every_cell_of_the_bundled_report(card, ctx):
    """The README's verdict (section "Engines at batch 1", and the findings' paragraph) is an ordering
    written in words: new sessions that overturn it fail here, naming the cell, rather than leave the
    words standing beside numbers that contradict them."""
    n = bundled()
    ms = {name: engine_ms(n, card, ctx, cell, arm) for name, (cell, arm) in {
        "generate": ("bf16_generate", "generate"),
        "compiled": ("bf16_ab-graphed-compiled", "compiled"),
        "fused bf16": ("bf16_ab-graphed-fused", "fused"),
        "fused fp8": ("fp8_ab-graphed-fused", "fused"),
        "llama.cpp f16": ("gguf-f16_llamacpp", "llamacpp"),
        "llama.cpp q8_0": ("gguf-q8-0_llamacpp", "llamacpp"),
        "llama.cpp q4_K_M": ("gguf-q4-k-m_llamacpp", "llamacpp")}.items()}
    faster = [("compiled", "generate"), ("llama.cpp f16", "generate"), ("llama.cpp f16", "compiled"),
              ("fused bf16", "llama.cpp f16"), ("fused fp8", "llama.cpp q8_0"), ("fused fp8", "llama.cpp q4_K_M"),
              ("llama.cpp q4_K_M", "llama.cpp f16")]
    wrong = [f"{a} {ms[a]:.2f} ms is not faster than {b} {ms[b]:.2f} ms" for a, b in faster if not ms[a] < ms[b]]
    assert not wrong, f"{card} ctx {ctx}: " + "; ".join(wrong)
    # "saves far less time than bytes": the quantized files stream fewer bytes per second than the f16 file
    tbps = {q: float(n[f"engines/streamed_TBps/h200/{card}/ctx{ctx}/sdpa_{q}_llamacpp/llamacpp/completed"])
            for q in ("gguf-f16", "gguf-q8-0", "gguf-q4-k-m")}
    assert tbps["gguf-q4-k-m"] < tbps["gguf-q8-0"] < tbps["gguf-f16"], (card, ctx, tbps)


def test_the_engines_verdict_check_fails_on_a_contradicting_number(monkeypatch):
    numbers = bundled()
    key = "engines/ms_per_step/h200/qwen2.5-7b/ctx2048/sdpa_gguf-f16_llamacpp/llamacpp/completed"
    monkeypatch.setattr(sys.modules[__name__], "bundled", lambda: {**numbers, key: "9.99"})
    with pytest.raises(AssertionError, match="llama.cpp f16 9.99 ms is not faster than generate"):
        test_the_engines_verdict_holds_in_every_cell_of_the_bundled_report("qwen2.5-7b", 2048)


def gap_ms(numbers, part, quant, ctx=2048, card="qwen2.5-7b"):
    return float(numbers[f"gap/{part}_ms/h200/{card}/ctx{ctx}/sdpa_{quant}_ab-graphed-fused/newest_code"])


def gap_claims(numbers) -> list[str]:
    """The README's reading of the gap table (findings, "Closing the gap to the floor"), as checks:
    each string names a claim the numbers contradict."""
    wrong = []
    over = {q: {p: gap_ms(numbers, p, q) - gap_ms(numbers, f"{p}_at_copy", q) for p in ("gemv", "attention")}
            for q in ("bf16", "fp8", "int4-triton")}
    if not over["bf16"]["attention"] > over["bf16"]["gemv"]:  # "attention's fixed cost per layer more than the GEMVs"
        wrong.append(f"bf16: attention over its bytes {over['bf16']['attention']:.3f} ms is not more than the GEMVs' {over['bf16']['gemv']:.3f} ms")
    for ctx in (2048, 8192, 16384):  # "Where the limit is": "0.20-0.23 ms over its bytes at ctx 2048-16384 for Qwen-2.5-7B"
        excess = gap_ms(numbers, "attention", "bf16", ctx) - gap_ms(numbers, "attention_at_copy", "bf16", ctx)
        if not 0.195 <= excess < 0.235:
            wrong.append(f"bf16 ctx {ctx}: attention over its bytes {excess:.3f} ms is not 0.20-0.23 ms")
        for card in ("llama-3.1-8b", "mistral-7b-v0.3"):  # "0.23-0.30 ms for the 32/8 cards"
            excess = (gap_ms(numbers, "attention", "bf16", ctx, card) - gap_ms(numbers, "attention_at_copy", "bf16", ctx, card))
            if not 0.225 <= excess < 0.305:
                wrong.append(f"{card} bf16 ctx {ctx}: attention over its bytes {excess:.3f} ms is not 0.23-0.30 ms")
    q = "int4-triton"  # "The int4 step is held by its GEMVs"
    if not over[q]["gemv"] > max(over[q]["attention"], gap_ms(numbers, "other", q), gap_ms(numbers, "outside", q)):
        wrong.append(f"{q}: the GEMVs over their bytes, {over[q]['gemv']:.3f} ms, are not the largest part of the gap")
    # "The fp8 step's GEMVs now come as close to their bytes as its attention does to its own": within 25 % of each other
    if not 0.8 <= over["fp8"]["gemv"] / over["fp8"]["attention"] <= 1.25:
        wrong.append(f"fp8: the GEMVs over their bytes ({over['fp8']['gemv']:.3f} ms) and attention over its own "
                     f"({over['fp8']['attention']:.3f} ms) are not alike")
    return wrong


def test_the_gap_reading_holds_in_the_bundled_report():
    """New sessions that turn the gap table's order round fail here rather than leave the README's words
    beside numbers that contradict them."""
    assert not gap_claims(bundled())


def test_the_gap_reading_check_fails_on_a_contradicting_number():
    numbers = dict(bundled())
    numbers["gap/gemv_ms/h200/qwen2.5-7b/ctx2048/sdpa_bf16_ab-graphed-fused/newest_code"] = "3.9"
    assert gap_claims(numbers) and "bf16: attention over its bytes" in gap_claims(numbers)[0]
