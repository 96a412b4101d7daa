"""benchmarks/persistent_chain.py, the persistent kernels floor_limit's part `persistent` times: under
Triton's interpreter (one program: a barrier of more would wait forever there) the read chain reads
every word once in each of its forms, the GEMV chain gives float32 torch's result and a chain that
leaves an x unwritten is infinitely wrong, not stale; the grid is refused where a barrier would
hang; and every GPU shape compiles for sm_90 with 128-bit weight loads and stays resident."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO, load_script

pytest.importorskip("triton")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pc():
    return load_script("benchmarks/persistent_chain.py")


@pytest.fixture
def chain(pc):
    return pc.Chain("cpu", 132)


def test_the_read_chain_reads_every_word_once_with_and_without_barriers_and_as_one_launch_a_matrix(pc, chain):
    words = [100, 37, 4100, 1]  # none a whole line: word_starts pads each matrix to one
    starts = pc.word_starts(words, "cpu")
    host = starts.tolist()
    assert host[0] == 0 and all(b % pc.LINE_WORDS == 0 and b - a >= w for a, b, w in zip(host, host[1:], words)) and host[-1] == host[-2]
    buf = torch.randint(0, 7, (host[-1],), dtype=torch.int32)
    small = (64, 2, 1, 1)  # chunks smaller than a matrix: the loop and the chunk loaded ahead both matter
    for run in (lambda: pc.read_chain(chain, buf, starts, pc.CPU_READ_SHAPE, barrier=True),
                lambda: pc.read_chain(chain, buf, starts, small, barrier=True, ahead=True),
                lambda: pc.read_chain(chain, buf, starts, small, barrier=True, ahead=True, counters=1),
                lambda: pc.read_chain(chain, buf, starts, pc.CPU_READ_SHAPE, barrier=False),
                lambda: pc.read_chain_launches(chain, buf, starts, small, host)):  # many programs a launch
        chain.sink.zero_()
        run()
        assert int(chain.sink.sum()) == int(buf.sum())
    pc.read_chain(chain, buf, starts, pc.CPU_READ_SHAPE, barrier=True, counters=4)
    # one arrival a matrix at program 0's group counter (the second line) and one at the top (the first), no barrier gave up
    lines = chain.counter.view(-1, pc.LINE_WORDS)
    assert int(lines[0, 0]) == int(lines[1, 0]) == len(words) and int(chain.counter.sum()) == 2 * len(words) and int(chain.flag) == 0
    chain.check_flag("read chain")
    with pytest.raises(ValueError, match="counters: a power of 2 from 1 to 16 .the barrier.s groups., not 3"):
        pc.read_chain(chain, buf, starts, pc.CPU_READ_SHAPE, barrier=True, counters=3)


def test_the_gemv_chain_matches_float32_torch_persistent_and_launched_and_an_unwritten_x_is_infinitely_wrong(pc, chain, monkeypatch):
    dims = [(40, 32), (37, 32), (70, 32), (48, 64), (29, 48)]  # ragged rows (37, 29) and K past one BK step
    meta, n_w, n_act = pc.gemv_layout(dims, "cpu")
    rows = meta.view(-1, 5).tolist()
    assert all(r[0] % pc.ALIGN_ELEMENTS == 0 and r[3] % pc.ALIGN_ELEMENTS == 0 and r[4] % pc.ALIGN_ELEMENTS == 0 for r in rows)
    assert [r[3] for r in rows[1:]] == [r[4] for r in rows[:-1]]  # each x is the y before
    g = torch.Generator().manual_seed(0)
    w = torch.randn(n_w, generator=g).to(torch.bfloat16)
    act = torch.zeros(n_act)
    act[:32] = torch.randn(32, generator=g)
    shape = (8, 16, 1, 1)
    assert pc.gemv_chain_error(chain, w, meta, act, shape, barrier=True) < 1e-5
    assert pc.gemv_chain_error(chain, w, meta, act, shape, barrier=True, ahead=True) < 1e-5  # first tiles loaded early
    assert pc.gemv_chain_error(chain, w, meta, act, (4, 16, 1, 1), barrier=True, ahead=True) < 1e-5  # several blocks a matrix
    assert pc.gemv_chain_error(chain, w, meta, act, shape, barrier=False, launches=True) < 1e-5
    real = pc.gemv_chain
    monkeypatch.setattr(pc, "gemv_chain", lambda *a, **kw: real(*a, **kw, last=3))  # a chain that stops after 3 of 5
    assert pc.gemv_chain_error(chain, w, meta, act, shape, barrier=True) == float("inf")


def test_a_chain_the_kernels_cannot_index_and_a_grid_that_would_hang_are_refused_by_name(pc, chain):
    with pytest.raises(ValueError, match="matrix 1 takes 64 inputs, the one before gives 40"):
        pc.gemv_layout([(40, 32), (16, 64)], "cpu")
    with pytest.raises(ValueError, match="matrix 0 has 30 columns"):
        pc.gemv_layout([(40, 30)], "cpu")
    starts = pc.word_starts([64], "cpu")
    with pytest.raises(ValueError, match="wait forever"):
        pc.read_chain(chain, torch.ones(64, dtype=torch.int32), starts, pc.CPU_READ_SHAPE, barrier=True, programs=2)
    chain.gpu = True  # the grid's arithmetic as on a GPU: a compiled kernel that fits twice a multiprocessor
    fits_two = SimpleNamespace(n_regs=128, metadata=SimpleNamespace(num_warps=4, shared=0))
    assert chain.programs("k", 2, True, fits_two) == 264
    with pytest.raises(ValueError, match="5 programs a multiprocessor asked, 4 stay resident"):
        chain.programs("k", 5, True, fits_two)
    assert chain.programs("k", 8, False, None) == 8 * 132  # without a barrier nothing waits: any grid


def test_resident_programs_counts_registers_by_the_warp_and_the_tightest_limit():
    pc = load_script("benchmarks/persistent_chain.py")
    assert pc.resident_programs(48, 8, 32) == 5  # 48 x 32 = 1536 a warp, 12288 a block: 5 in 65536
    assert pc.resident_programs(128, 4, 16) == 4
    assert pc.resident_programs(33, 1, 0) == 32  # small blocks: 32 a multiprocessor at most
    assert pc.resident_programs(32, 4, 100 * 1024) == 2  # shared memory: two blocks of 100 KB
    assert pc.resident_programs(255, 16, 0) == 0  # a block that does not fit at all


def test_the_step_chain_is_each_layers_four_gemvs_then_the_output_projection(pc):
    from decodegap.core.config import load_models

    a = load_models()["qwen2.5-7b"].architecture
    shapes = pc.step_shapes(a)
    assert len(shapes) == 4 * 28 + 1 and shapes[0] == ("qkv", 4608, 3584) and shapes[-1] == ("lm_head", a["vocab_size"], 3584)
    assert [s[0] for s in shapes[:4]] == ["qkv", "o", "gate_up", "down"] and shapes[2][1] == 2 * 18944 and shapes[3][2] == 18944
    pc.gemv_layout(pc.gemv_chain_shapes(a, layers=2), "cpu")  # the real widths chain: every x fits the y before


@pytest.mark.slow  # 7 s: Triton's compiler and ptxas for sm_90, in a process without the interpreter
def test_every_gpu_shape_compiles_for_sm90_with_wide_loads_no_spills_and_stays_resident():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/persistent_chain.py"), "--ahead"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert {r["kernel"] for r in rows} == {"read", "gemv"}
    for r in rows:
        assert r["spill_bytes"] == 0 and r["resident"] >= r["per_sm"], r
        assert any(op.startswith("LDG.E.128") for op in r["loads"]), r  # the hints hold: weights in 128-bit loads
