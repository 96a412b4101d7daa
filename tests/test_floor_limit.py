"""benchmarks/floor_limit.py, the GPU benchmark of the fused step against the memory's limit, in its
--smoke mode: every part on the CPU under Triton's interpreter (tests/conftest.py switches it on)
with the tiny cards in float32, so the script the lead runs on the H200 cannot rot unseen. Its
numbers mean nothing here; what is checked is that every part runs, checks its kernels, and writes
what the GPU run will write."""

import json

import pytest

from conftest import load_script

pytest.importorskip("triton")


def _benchmark():
    return load_script("benchmarks/floor_limit.py")


@pytest.mark.slow  # 130 s: every part of the benchmark on the CPU (CI runs it: pytest -m slow)
def test_the_floor_limit_benchmark_runs_every_part_in_its_smoke_mode(tmp_path, capsys):
    rc = _benchmark().main(["--smoke", "--out", str(tmp_path), "--deadline-s", "900", "--tune-budget-s", "60"])
    out = capsys.readouterr().out
    got = json.loads((tmp_path / "floor_limit.json").read_text())
    assert rc == 0 and not got["errors"] and not got["skipped"] and not got["checks_failed"], (got["errors"], out[-3000:])
    assert all(err < 1e-4 for err in got["checks"].values()) and "attention 6/2/64 masked in-split" in got["checks"]
    steps = {s["quant"]: s for s in got["steps"]}
    assert set(steps) == {"bf16", "fp8", "int4-triton", "int4-tinygemm"} and all("device_ms" in s for s in steps.values()), steps
    for s in steps.values():
        assert s["check_vs_plain_ops"] < 1e-4 and s["weight_bytes"] > 0 and s["kv_bytes"] == 2 * 2 * 2 * 41 * 64 * 4
        assert {"gemv_ms", "attention_ms", "rest_ms"} <= set(s) and s["launch_calls"]["attention"] == 2
    assert steps["fp8"]["weight_bytes"] < steps["bf16"]["weight_bytes"]  # fp8 layers stream a byte a weight (fp32 here: four)
    assert {r["format"] for r in got["gemv"]} == {"dense", "fp8", "int4"} and all("us" in r for r in got["gemv"])
    assert {a["layout"] for a in got["attention"]} == {"6/2/64", "4/2/64"}
    assert all("us" in v for a in got["attention"] for v in a["ours"].values())
    assert all(set(a["table_parts"]) == {"split", "combine"} and min(a["table_parts"].values()) > 0 for a in got["attention"])
    assert {lv["lever"] for lv in got["levers"]} >= {"table", "tuned"}
    ceiling = {c["format"]: c for c in got["ceiling"]}
    assert set(ceiling) == {"dense", "fp8", "int4"} and all(c["twin_ms"] > 0 and c["launches"] == 2 * 4 + 1 for c in ceiling.values())
    assert ceiling["fp8"]["bytes"] < ceiling["dense"]["bytes"] and "gemv_over_twin" in ceiling["dense"]  # steps ran first
    # persistent: each format's bytes read every way (each read checked to have counted every word), the
    # bf16 GEMV chain checked against float32 both ways, and the bound from the steps of the same run
    reads = {p["format"]: p for p in got["persistent"] if p.get("chain") != "gemv"}
    assert set(reads) == {"dense", "fp8", "int4"} and got["barrier_us"]
    assert all({"launches", "no_barrier", "barrier", "barrier_1counter", "barrier_ahead", "bound_ms"} <= set(p) for p in reads.values())
    assert reads["dense"]["bytes"] >= ceiling["dense"]["bytes"] and reads["dense"]["matrices"] == ceiling["dense"]["launches"]
    (chain,) = [p for p in got["persistent"] if p.get("chain") == "gemv"]
    assert {"launches", "barrier", "barrier_ahead"} <= set(chain) and chain["errors"] and max(chain["errors"].values()) < 1e-4
    # each role's GEMVs of a step alone beside the same role's read-only launches (a packed path's own GEMV has no roles)
    assert all(set(steps[q]["gemv_role_ms"]) == {"qkv", "o", "gate_up", "down", "lm_head"} for q in ("bf16", "fp8", "int4-triton"))
    assert "gemv_role_ms" not in steps["int4-tinygemm"]
    assert all({r: v["launches"] for r, v in c["role_chains"].items()} == {"qkv": 2, "o": 2, "gate_up": 2, "down": 2, "lm_head": 1}
               for c in ceiling.values())
    assert set(ceiling["dense"]["roles_over_read"]) == {"qkv", "o", "gate_up", "down", "lm_head"}
    dense, step = ceiling["dense"], steps["bf16"]  # the bound: the read-only launches plus the step's own attention and rest
    assert dense["bound_ms"] == pytest.approx(dense["twin_ms"] + step["attention_ms"] + step["rest_ms"])
    stages = [g for g in got["stages"] if "us" in g]  # each role at Triton's default depth and each tried one, same result
    assert {g["format"] for g in stages} == {"dense", "fp8", "int4"} and len(stages) == 5 + 4 + 4
    assert all(set(g["us"]) == {"default", "1", "2"} and max(g["check"].values()) < 1e-4 for g in stages)
    layout = {g["role"]: g for g in got["layout"]}  # both layouts of the plain GEMV compute W x, beside the read and the step's kernel
    assert set(layout) == {"qkv", "o", "gate_up", "down", "lm_head"} and all(max(g["check"].values()) < 1e-4 for g in layout.values())
    assert all({"read-only", "R2 row-major", "R2 tiled", "step kernel"} <= set(g["us"]) for g in layout.values())
    prologue = [g for g in got["prologue"] if "us" in g]  # each normed role with the norm per program, as a sum, and apart
    assert sorted((g["format"], g["role"]) for g in prologue) == sorted(
        [(f, r) for f in ("dense", "fp8", "int4") for r in ("qkv", "gate_up")] + [("dense", "lm_head")])
    assert all(set(g["us"]) == {"program", "sum", "none", "read-only"} and max(g["check"].values()) < 1e-4 for g in prologue)
    l2 = {(g["format"], g["role"]): g for g in got["l2"]}  # the tiny card's weights all fit: every role, both ways, checked
    assert len(l2) == 5 + 4 + 4 and all(g["l2_us"] > 0 and g["hbm_us"] > 0 and g["check"] < 1e-4 for g in l2.values())
    # refine: each kernel format's shapes chosen in the whole step (smoke: one candidate for down, always taken),
    # the refined step checked against plain ops beside the table's, and the change a lever that resolves to it
    from decodegap.measure import fused_kernels as fk

    refined = {f["quant"]: f for f in got["refine"]}
    assert set(refined) == {"bf16", "fp8", "int4-triton"}, got["refine"]
    for f in refined.values():
        assert f["chosen"]["down"]["rows"] == 64 and f["steps"]["40"]["check_vs_plain_ops"] < 1e-4 and f["steps"]["40"]["x_table"] > 0
        (read,) = f["change"]["gemv_by_hidden"]["256"]
        assert fk.resolve(f["change"], "cpu").gemv_for(read, "down", 256).rows == 64
    assert "as a lever: '{" in out
    tuned = json.loads((tmp_path / "tuned_launch_shapes.json").read_text())
    assert tuned == got["tuned_launch_shapes"] and {"gemv", "attention"} <= set(tuned)
    assert "== summary" in out and "tuned launch shapes:" in out


def _saved_run(tmp_path):
    """A floor_limit.json as the GPU writes it, one step and its format's ceiling (the figures of a real run's
    Qwen-2.5-7B fp8 row), the ceiling saved before the bound was kept."""
    step = {"model": "qwen2.5-7b", "quant": "fp8", "ctx": 2048, "device_ms": 2.375, "host_ms": 2.425, "weight_bytes": 7_621_000_000,
            "kv_bytes": 117_497_856, "TBps": 3.26, "copy_fraction": 0.78, "gemv_ms": 2.086, "attention_ms": 0.163, "rest_ms": 0.126}
    ceiling = {"model": "qwen2.5-7b", "format": "fp8", "bytes": 7_624_000_000, "launches": 113, "twin_ms": 1.892, "twin_TBps": 4.03,
               "one_launch_ms": 1.651, "one_launch_TBps": 4.62, "copy_TBps": 4.19, "roles": {}}
    path = tmp_path / "floor_limit.json"
    path.write_text(json.dumps({"skipped": [], "errors": [], "steps": [step], "ceiling": [ceiling]}))
    return path, step, ceiling


def test_the_read_only_bound_is_the_read_only_launches_plus_the_steps_attention_and_rest(tmp_path):
    """What one launch per matrix lets the step stream at most, as it is built: were the attention or the
    rest left out, the bound would flatter the step and a target it cannot reach would look reachable."""
    m = _benchmark()
    _, step, ceiling = _saved_run(tmp_path)
    got = m.read_only_bound(ceiling, step)
    assert got["bound_ms"] == pytest.approx(1.892 + 0.163 + 0.126)
    assert got["bound_TBps"] == pytest.approx((7_621_000_000 + 117_497_856) / 2.181e-3 / 1e12)  # 3.55 TB/s
    assert got["target_step_ms"] == pytest.approx((7_621_000_000 + 117_497_856) / 3.5e12 * 1e3)
    assert got["gemv_over_twin"] == pytest.approx(2.086 / 1.892)
    # launched under PDL (as the step is), the read-only launches may be faster: the bound takes the fastest,
    # or it would call a target unreachable that launches could reach
    pdl = m.read_only_bound({**ceiling, "twin_pdl_ms": 1.850, "twin_pdl_ahead_ms": 1.861}, step)
    assert pdl["twin_best_ms"] == 1.850 and pdl["bound_ms"] == pytest.approx(1.850 + 0.163 + 0.126)


def test_each_format_is_held_to_the_target_named_for_its_context():
    """bf16 is named 3.9 TB/s at ctx 2048 and 3.7 at 16384: a 16384 step held to 3.9 would look further
    from its target than it is. Contexts between take the nearer named one's (in log2)."""
    m = _benchmark()
    assert [m.target_TBps("dense", c) for c in (2048, 4096, 8192, 16384, 32768)] == [3.9, 3.9, 3.7, 3.7, 3.7]
    assert {m.target_TBps("fp8", c) for c in (2048, 16384)} == {3.5} and m.target_TBps("int4", 16384) == 2.9


def test_the_summary_of_a_saved_run_prints_the_bound_without_a_gpu(tmp_path, capsys):
    m = _benchmark()
    path, _, _ = _saved_run(tmp_path)
    assert m.main(["--summary", str(path)]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("qwen2.5-7b       fp8 ")][-1]  # the ceiling table
    assert line.split()[-3:] == ["3.55", "3.50", "3.26"]  # bound, target and the step, TB/s
    (tmp_path / "other.json").write_text(json.dumps([1, 2]))
    assert m.main(["--summary", str(tmp_path / "other.json")]) == 2
    assert "is not a floor_limit.json" in capsys.readouterr().err
    assert m.main(["--summary", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit):
        m.main(["--parts", "steps"])  # measuring needs --out
    assert "--out is required" in capsys.readouterr().err


def test_each_roles_gemvs_are_held_against_the_fastest_read_only_launches_of_that_role(tmp_path, capsys):
    """Where the step's GEMVs lose time to a read: each role's launches alone against the read-only launches
    of the same bytes, launched the fastest way (under PDL where that is faster), or the excess is overstated."""
    m = _benchmark()
    path, step, ceiling = _saved_run(tmp_path)
    step = {**step, "gemv_role_ms": {"qkv": 0.210, "o": 0.170, "gate_up": 1.100, "down": 0.560, "lm_head": 0.046}}
    chains = {"qkv": {"ms": 0.200, "pdl_ms": 0.190, "pdl_ahead_ms": 0.195, "launches": 28}, "o": {"ms": 0.150, "launches": 28},
              "gate_up": {"ms": 1.000, "pdl_ms": 1.010, "launches": 28}, "down": {"ms": 0.500, "launches": 28}}
    got = m.read_only_bound({**ceiling, "role_chains": chains}, step)["roles_over_read"]
    assert set(got) == {"qkv", "o", "gate_up", "down"}  # lm_head has no read-only chain here: no ratio invented for it
    assert got["qkv"]["read_ms"] == 0.190 and got["qkv"]["x_read"] == pytest.approx(0.210 / 0.190)
    assert got["gate_up"]["excess_ms"] == pytest.approx(0.100) and got["o"]["x_read"] == pytest.approx(0.170 / 0.150)
    assert "roles_over_read" not in m.read_only_bound(ceiling, step)  # a ceiling saved before the split: no per-role row
    path.write_text(json.dumps({"skipped": [], "errors": [], "steps": [step], "ceiling": [{**ceiling, "role_chains": chains}]}))
    assert m.main(["--summary", str(path)]) == 0
    rows = {ln.split()[2]: ln.split()[3:] for ln in capsys.readouterr().out.splitlines() if ln.startswith("qwen2.5-7b       fp8    ")
            and len(ln.split()) == 7}
    assert rows["gate_up"] == ["1.100", "1.000", "1.10", "0.100"] and rows["qkv"][:3] == ["0.210", "0.190", "1.11"]


@pytest.mark.parametrize("n_words", [1, 4095, 4096 * 4 + 7, 50_000])
def test_the_read_only_kernel_reads_every_word_once(n_words):
    """The ceiling's kernel: were it to skip words, its bandwidth would flatter every bound drawn from it."""
    import torch

    fl = _benchmark()
    for shape in ((4096, 4, 1), (2048, 1, 4)):
        buf = torch.arange(1, n_words + 1, dtype=torch.int32)
        out = torch.zeros(1 << 12, dtype=torch.int32)
        fl.read_launch(buf, out, shape)
        programs = -(-n_words // (shape[0] * shape[1]))
        assert int(out[:programs].sum()) == n_words * (n_words + 1) // 2 and not out[programs:].any()
    with pytest.raises(ValueError, match="programs, a sum each, and room for 1"):  # never a store past its sums' buffer
        fl.read_launch(torch.ones(3 * 4096, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), (4096, 1, 1))


def test_the_layout_parts_plain_gemv_computes_w_x_in_either_layout():
    """The layout part's two kernels must do the same arithmetic on the same weights, or the time
    between them is not the layout's."""
    import torch

    fl = _benchmark()
    for n, k, rows in ((16, 384, 2), (32, 1024, 8)):
        w, x = torch.randn(n, k), torch.randn(k)
        tiles = fl.tile_weight(w, rows, fl.layout_block_k(k))
        assert tiles.shape == (n // rows, k // fl.layout_block_k(k), rows, fl.layout_block_k(k))
        for weight, tiled in ((w, False), (tiles, True)):
            y = torch.empty(n)
            fl.plain_gemv(weight, x, y, rows, tiled)
            torch.testing.assert_close(y, w @ x, rtol=1e-5, atol=1e-4)
    assert fl.layout_block_k(18944) == fl.layout_block_k(3584) == 512 and fl.layout_block_k(384) == 128
    with pytest.raises(ValueError, match="not whole tiles of 4 x 128"):
        fl.tile_weight(torch.randn(6, 128), 4, 128)


def test_a_lever_given_as_json_runs_that_change_and_a_bad_one_is_refused_by_name():
    """Shapes the lever list does not name (a role's shape tried in the whole step) are given as a
    launch-shapes change; one that launch.resolve refuses must stop the run before any GPU time is spent."""
    import torch

    from decodegap.measure import fused_kernels as fk

    m, cpu = _benchmark(), torch.device("cpu")
    shape = {"rows": 4, "block_k": 256, "warps": 4, "x_tile": False}
    name = json.dumps({"down": shape})
    got = m.chosen_levers(["norm sum", name], cpu)
    assert list(got) == ["table", "norm sum", name] and got[name] == {"down": shape} and got["norm sum"] == {"norm": "sum"}
    resolved = fk.resolve(got[name], cpu)
    for hidden in (None, 4096):  # the change is what runs on every card width, not only where the table has no width's own
        assert resolved.gemv_for("dense", "down", hidden).as_dict()["block_k"] == 256
    with pytest.raises(SystemExit, match="downn"):
        m.chosen_levers(['{"gemv": {"dense": {"downn": {"rows": 4, "block_k": 256, "warps": 4}}}}'], cpu)
    with pytest.raises(SystemExit, match="no launch-shapes change"):
        m.chosen_levers(['{"down": '], cpu)
    with pytest.raises(SystemExit, match="unknown lever"):
        m.chosen_levers(["norm summ"], cpu)


def test_a_saved_refine_runs_changes_come_back_as_levers_and_a_file_without_them_is_named(tmp_path, capsys):
    """--levers-from: the refine part's changes, chosen on one machine, run as levers on another; a file
    that is not a floor_limit.json with a refine part stops the run before any GPU time, naming the file."""
    import torch

    m, cpu = _benchmark(), torch.device("cpu")
    change = {"gemv_by_hidden": {"4096": {"dense": {"o": {"rows": 4, "block_k": 1024, "warps": 4, "x_tile": False}}}}}
    saved = tmp_path / "floor_limit.json"
    saved.write_text(json.dumps({"skipped": [], "refine": [{"model": "llama-3.1-8b", "quant": "bf16", "change": change},
                                                           {"model": "qwen2.5-7b", "quant": "bf16", "change": {}}]}))
    got = m.refined_levers([saved], cpu)
    assert got == {"refined llama-3.1-8b bf16": change}  # an unchanged card is no lever
    # such a lever runs only on steps it changes: its card width, and its format (dense: lm_head in every format)
    assert m.lever_applies(change, "dense", 4096) and not m.lever_applies(change, "dense", 3584)
    assert not m.lever_applies(change, "fp8", 4096)  # a bf16 o shape: fp8's step reads o its own way
    head = {"gemv_by_hidden": {"4096": {"dense": {"lm_head": {"rows": 2, "block_k": 512, "warps": 4}}}}}
    assert m.lever_applies(head, "int4", 4096)
    assert m.lever_applies({"gemv_by_hidden": {"4096": {"fp8_pairs": {"down": {"rows": 8, "block_k": 2048, "warps": 8}}}}}, "fp8", 4096)
    with pytest.raises(SystemExit, match="missing.json"):
        m.refined_levers([tmp_path / "missing.json"], cpu)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"skipped": [], "steps": []}))
    with pytest.raises(SystemExit, match="other.json holds no refine part"):
        m.refined_levers([other], cpu)
    # on the command line: refused before any part runs (no floor_limit.json written), and only with the levers part
    with pytest.raises(SystemExit, match="other.json holds no refine part"):
        m.main(["--smoke", "--out", str(tmp_path / "run"), "--parts", "checks", "levers", "--levers-from", str(other)])
    assert not (tmp_path / "run" / "floor_limit.json").exists()
    with pytest.raises(SystemExit):
        m.main(["--smoke", "--out", str(tmp_path / "run"), "--parts", "steps", "--levers-from", str(saved)])
    assert "add levers to --parts" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"refine": [{"model": "x", "quant": "bf16", "change": {"gemv_by_hidden": {"wide": {}}}}]}))
    with pytest.raises(SystemExit, match="bad.json: refined x bf16's change"):
        m.refined_levers([bad], cpu)
