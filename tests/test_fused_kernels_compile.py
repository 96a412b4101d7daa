"""The fused kernels compiled for the H200 without one (decodegap.measure.fused_kernels.ahead): every
kernel the step launches goes through Triton's compiler and ptxas for sm_90 as a GPU launch would
specialise it, and the cubins say what the interpreter cannot: that it compiles, that nothing spills,
that the weight loads are 128-bit, that PDL emits griddepcontrol's launch option and that the
masked attention's K/V loads are pipelined (cp.async) where the skipping branch's are not. It runs
in a fresh process: the interpreter this suite switches on (tests/conftest.py) must be off there."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("triton")

from decodegap.measure.fused_kernels import ahead  # noqa: E402

# a loop of four instructions (one of them the backward branch) after two straight-line ones, the
# end's branch to itself and padding: the shape cuobjdump -sass prints
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_CTAID.X ;
        /*0020*/                   LDG.E.EF.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   FFMA R8, R4, R5, R8 ;
        /*0040*/                   LOP3.LUT R9, R4, 0xf, RZ, 0xc0, !PT ;
        /*0050*/              @!P0 BRA 0x20 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70;
        /*0080*/                   NOP;
"""


def _compile_ahead(tmp_path, *flags):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "decodegap.measure.fused_kernels.ahead", "--json", str(out), *flags],
                          cwd=REPO / "scripts", env=env, capture_output=True, text=True, timeout=1500)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_the_issue_bound_counts_the_loop_once_a_trip_per_weight():
    """ahead --loops: the loop body is found by its backward branch and counted once a trip, the end's
    branch to itself and the padding not at all; per weight a thread multiplies; and the bandwidth
    the H200 could issue that at. A miscount would move the int4 bound the README draws from it."""
    code = ahead._loop(SASS)
    assert code["loop_ops"] == {"LDG": 1, "FFMA": 1, "LOP3": 1, "BRA": 1} and sum(code["ops"].values()) == 7
    program = ahead.gemv_program("_gate_up_kernel", {"BN": 4, "K": 1024, "BK": 256}, 4)  # 8 rows x 1024 over 128 threads
    assert program == {"weights_per_thread": 64, "trips": 4}
    assert ahead.gemv_program("_gate_up_kernel", {"BN": 4, "K": 1024, "BK": 256, "FROM_Y": True}, 4) is None
    got = ahead.issue_bound({"loop": code, "program": program, "weight_dtype": "bfloat16"})
    assert got["per_weight"] == (7 + 4 * 3) / 64 and got["by_op"]["FFMA"] == 4 / 64 and got["looped"]
    rate = 132 * 4 * 32 * 1.98e9
    assert abs(got["issue_TBps"] - 2 * rate / got["per_weight"] / 1e12) < 1e-9


def _check(proc, rows):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert rows and all("error" not in r and r["spill_bytes"] == 0 for r in rows)
    by = {(r["case"], r["kernel"]): r for r in rows}
    o = by[("qwen2.5-7b dense o", "_linear_kernel")]
    assert any(op.startswith("LDG.E.EF.128") for op in o["loads"]), o  # the weights stream in 128-bit loads, evict-first
    assert by[("qwen2.5-7b dense o pdl", "_linear_kernel")]["options"].get("launch_pdl") is True
    # PDL waits once; with pdl_prefetch every GEMV and the attention split prefetch their first loop
    # steps into L2 before that wait (the interpreter runs no PTX: only the cubin shows it)
    assert by[("qwen2.5-7b dense o pdl", "_linear_kernel")]["pdl"] == {"waits": 1, "prefetches": 0, "prefetches_before_wait": 0}
    for case, kernel in (("qwen2.5-7b dense o pdl prefetch", "_linear_kernel"), ("qwen2.5-7b dense qkv pdl prefetch", "_qkv_rope_kernel"),
                         ("qwen2.5-7b dense gate_up pdl prefetch", "_gate_up_kernel"),
                         ("qwen2.5-7b attention ctx 16384 table pdl prefetch", "_attention_split_kernel")):
        pdl = by[(case, kernel)]["pdl"]
        assert pdl["waits"] == 1 and pdl["prefetches"] == pdl["prefetches_before_wait"] > 0, (case, pdl)
    assert by[("qwen2.5-7b dense o", "_linear_kernel")]["pdl"]["prefetches"] == 0  # without PDL nothing is prefetched
    # l2_ahead: the split programs' share of the o weight is prefetched before the wait too, on top of nothing
    for ctx in (2048, 16384):  # at the start, before the wait; at the end, after it (behind the split's own loads)
        ahead_pdl = by[(f"qwen2.5-7b attention ctx {ctx} table pdl l2 ahead start", "_attention_split_kernel")]["pdl"]
        assert ahead_pdl["waits"] == 1 and ahead_pdl["prefetches"] == ahead_pdl["prefetches_before_wait"] > 0, ahead_pdl
        at_end = by[(f"qwen2.5-7b attention ctx {ctx} table pdl l2 ahead end", "_attention_split_kernel")]["pdl"]
        assert at_end["waits"] == 1 and at_end["prefetches"] == ahead_pdl["prefetches"] and at_end["prefetches_before_wait"] == 0, at_end
        assert by[(f"qwen2.5-7b attention ctx {ctx} table pdl", "_attention_split_kernel")]["pdl"]["prefetches"] == 0
    masked = by[("qwen2.5-7b attention ctx 16384 masked", "_attention_split_kernel")]["loads"]
    skipping = by[("qwen2.5-7b attention ctx 16384 skipping", "_attention_split_kernel")]["loads"]
    assert by[("qwen2.5-7b attention ctx 16384 masked in-split", "_attention_split_kernel")]  # the lever compiles for sm_90
    assert any(op.startswith("LDGSTS") for op in masked) and not any(op.startswith("LDGSTS") for op in skipping)
    # every GEMV gets an issue bound; 4-bit weights take the most instructions a weight, and normalising
    # x apart (the H200 table's int4 norm) takes the norm's arithmetic out of the int4 kernel
    issue = {r["case"]: r["issue"] for r in rows if r.get("issue")}
    assert issue["qwen2.5-7b int4 gate_up"]["per_weight"] > issue["qwen2.5-7b fp8 gate_up"]["per_weight"]
    assert issue["qwen2.5-7b int4 gate_up"]["per_weight"] < issue["qwen2.5-7b int4 gate_up norm program"]["per_weight"]
    # the lever x_fp32: an int4 loop that converts no input executes fewer instructions a weight
    for role in ("qkv", "gate_up", "down"):
        assert issue[f"qwen2.5-7b int4 {role} x fp32"]["per_weight"] < issue[f"qwen2.5-7b int4 {role}"]["per_weight"] - 0.5
    # the lever x_pairs: two weights an instruction, about 4 instructions a weight where the float32 loop takes 6-8
    for role in ("qkv", "gate_up", "down"):
        assert issue[f"qwen2.5-7b int4 {role} x pairs"]["per_weight"] < issue[f"qwen2.5-7b int4 {role}"]["per_weight"] - 1.5
    # the lever load_ahead, flipped from the table on each read, compiles (a loop ptxas keeps: one more weight load in it)
    ahead_on = by[("qwen2.5-7b int4 gate_up x pairs load ahead on", "_gate_up_kernel")]
    assert ahead_on["loads"]["LDG.E.EF.128"] == by[("qwen2.5-7b int4 gate_up x pairs", "_gate_up_kernel")]["loads"]["LDG.E.EF.128"] + 1
    assert "qwen2.5-7b dense down load ahead on" in issue and "qwen2.5-7b fp8 down load ahead on" in issue
    # f16_words 4: four words' halves summed in f16 before float32, fewer instructions a weight in every pair read
    for role in ("qkv", "gate_up", "down"):
        assert issue[f"qwen2.5-7b int4 {role} x pairs f16 words 4"]["per_weight"] < issue[f"qwen2.5-7b int4 {role} x pairs"]["per_weight"]
        # fp8's halves likewise: 2 words' sums in f16 fewer than 1, 4 fewer than 2
        fp8 = [issue[f"qwen2.5-7b fp8 {role} x pairs{tag}"]["per_weight"] for tag in ("", " f16 words 2", " f16 words 4")]
        assert fp8[0] > fp8[1] > fp8[2], fp8
    # o_pairs: fp8's o on the attention's halves, about half the instructions a weight of its float32 loop,
    # and the combine that writes them compiles (its store scaled and rounded to f16)
    assert issue["qwen2.5-7b fp8 o x pairs f16 words 4"]["per_weight"] < issue["qwen2.5-7b fp8 o"]["per_weight"] - 2
    assert by[("qwen2.5-7b attention ctx 16384 table halves out", "_attention_combine_kernel")]["spill_bytes"] == 0
    # loop_stages pipelines the loop over K (Triton's pipeliner, which the launch option `stages` never
    # applied to these dot-free loops): the weight tiles come in by cp.async (LDGSTS), the plain loop's by LDG
    for case, kernel in (("qwen2.5-7b int4 gate_up x pairs", "_gate_up_kernel"), ("qwen2.5-7b dense down", "_linear_kernel"),
                         ("qwen2.5-7b fp8 down x pairs", "_linear_kernel")):
        piped = by[(f"{case} loop stages 3", kernel)]
        assert any(op.startswith("LDGSTS") for op in piped["loads"]), (case, piped["loads"])
        assert not any(op.startswith("LDGSTS") for op in by[(case, kernel)]["loads"]), case
    bounds = {(b["card"], b["format"]): b for b in ahead.step_issue_bounds(rows)}
    # int4's step bound takes the pairs where the H200 table reads them: above the float32 loop's 3.24 TB/s
    assert 4 < bounds[("qwen2.5-7b", "int4")]["issue_TBps"] and bounds[("qwen2.5-7b", "fp8")]["issue_TBps"] < 10
    assert abs(bounds[("qwen2.5-7b", "dense")]["stored_GB"] - 14.14) < 0.01  # the ceiling's bytes: the real card's weights


@pytest.mark.slow  # 25 s on a fast machine: every kernel through ptxas for sm_90 (CI runs it: pytest -m slow)
def test_every_kernel_compiles_for_the_h200_without_spilling(tmp_path):
    _check(*_compile_ahead(tmp_path, "--quick"))


# every variant of both head layouts: over 16 minutes on a slow 2-core machine, past what CI's 90 can
# hold beside the rest; run it with DECODEGAP_ALL_VARIANTS=1 pytest -m slow after changing a kernel
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DECODEGAP_ALL_VARIANTS"), reason="every variant: DECODEGAP_ALL_VARIANTS=1 (over 16 min on 2 slow cores)")
def test_every_kernel_variant_of_both_layouts_compiles_for_the_h200(tmp_path):
    proc, rows = _compile_ahead(tmp_path)
    _check(proc, rows)
    assert {r["case"].split()[0] for r in rows} == {"qwen2.5-7b", "llama-3.1-8b"}
