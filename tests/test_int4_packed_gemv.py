"""benchmarks/int4_packed_gemv.py, the experiment of a 4-bit GEMV in packed f16x2 arithmetic: what the
CPU can check of it. The inline PTX runs only on a GPU, so its arithmetic is checked here as torch
reproduces it bit for bit (the and-or under 0x6400, the shift by 8, the pairs and the zeros' halves),
and the kernel's layout (which word, nibble, x pair and zero meet) under Triton's interpreter with the
same arithmetic in float32. The GPU run checks the PTX itself against float32 torch (its `check`)."""


import pytest
import torch

from conftest import load_script

pytest.importorskip("triton")


def _benchmark():
    return load_script("benchmarks/int4_packed_gemv.py")


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(torch.randint(0, 2**31, ()).item())  # fresh inputs each run


def _case(m, n, k, gen):
    op = m.random_int4(n, k, "cpu")
    x = (torch.randn(k, generator=gen) * 3).to(torch.bfloat16)
    from decodegap.measure.fused_kernels.ops import dequantize

    return op, x, dequantize(op), m.x_pairs(x)


def test_the_packed_halves_compute_each_words_dot_with_its_zero(gen):
    """Every word's (q - z) x summed over its eight nibbles, as the PTX's f16 pairs compute it, equals
    the dequantized weights' products before the group's scale, to f16's rounding; a wrong mask,
    shift or pairing would mix columns and miss by far more."""
    m = _benchmark()
    op, x, _, xp = _case(m, 16, 384, gen)
    got = m.ptx_reference(op.weight, xp, op.zero)
    n, k = op.n, op.k
    shifts = torch.arange(0, 32, 4, dtype=torch.int32).view(1, 1, 8, 1)
    q = (op.weight.view(n, k // 128, 1, 16) >> shifts) & 15  # row, group, nibble j, word i: column 128 g + 16 j + i
    z = op.zero.float().view(n, k // 128, 1, 1)
    terms = (q.float() - z) * x.float().view(1, k // 128, 8, 16)
    want = terms.sum(2).view(n, k // 8)
    # f16 rounds each half's four products and three sums (2^-11 of each): bounded by 8 roundings of the terms' size
    bound = 8 * 2.0**-11 * terms.abs().sum(2).view(n, k // 8)
    assert ((got - want).abs() <= bound).all(), float(((got - want).abs() / bound).max())
    assert (got - want).abs().max() < 0.01 * want.abs().max()


def test_x_pairs_hold_each_words_columns_and_the_odd_ones_over_16():
    m = _benchmark()
    x = torch.arange(256, dtype=torch.float32).to(torch.bfloat16)
    xp = m.x_pairs(x)
    assert xp.shape == (2, 4, 16) and xp.dtype == torch.int32
    halves = xp.contiguous().view(torch.float16).view(2, 4, 16, 2).float()
    # group 1, pair 1, word 3: nibbles 1 and 5 of the word, columns 128 + 16 + 3 and 128 + 80 + 3, over 16
    assert halves[1, 1, 3].tolist() == [(128 + 19) / 16, (128 + 83) / 16]
    assert halves[0, 2, 5].tolist() == [37.0, 101.0]  # pair 2: nibbles 2 and 6, as they are
    with pytest.raises(ValueError, match="not whole groups of 128"):
        m.x_pairs(torch.zeros(200))


def test_the_packed_kernel_reads_the_words_zeros_and_pairs_it_should(gen):
    """The Triton kernel (its arithmetic in float32 under the interpreter) against float32 torch on
    the dequantized weights: rows not a multiple of the program's, several loop steps and a ragged
    last one (K = 640: 5 groups, 2 a step)."""
    m = _benchmark()
    op, x, w, xp = _case(m, 45, 640, gen)
    out = torch.full((45,), float("nan"), dtype=torch.bfloat16)
    m.packed_gemv(op, xp, out, 4, 256, 4, emulate=True)
    ref = w @ x.float()
    assert float((out.float() - ref).norm() / ref.norm()) < 1e-2
    with pytest.raises(ValueError, match=r"x pairs must be int32 of shape \(5, 4, 16\)"):
        m.packed_gemv(op, xp[:4], out, 4, 256, 4, emulate=True)


def test_x_dot_order_puts_each_words_nibbles_side_by_side():
    """Position 8 i + n of a group holds x[16 n + i], the column of nibble n of word i (gemv.py's format)."""
    m = _benchmark()
    xq = m.x_dot_order(torch.arange(256, dtype=torch.float32))
    assert xq.dtype == torch.float16 and xq.shape == (256,)
    assert xq[8 * 3 + 5].item() == 16 * 5 + 3 and xq[128 + 8 * 15 + 7].item() == 128 + 16 * 7 + 15
    with pytest.raises(ValueError, match="not whole groups of 128"):
        m.x_dot_order(torch.zeros(200))


@pytest.mark.parametrize("rows, groups, split, w_second", [(32, 1, 1, 0), (16, 2, 1, 1), (16, 1, 5, 1), (32, 2, 5, 1)])
def test_the_tensor_core_kernel_matches_float32_on_the_steps_own_words(gen, rows, groups, split, w_second):
    """tl.dot on the dequantized tile (1024 + q, the zero and 1024 taken off once a group) against float32
    torch on the same weights: ragged rows (45), 10 groups, W as either operand, K split with atomics.
    A wrong nibble order, zero or scale would miss by far more than f16's rounding of x."""
    m = _benchmark()
    op, x, w, _ = _case(m, 45, 1280, gen)
    out = torch.full((45,), float("nan"))
    m.dot_gemv(op, m.x_dot_order(x), out, rows, groups, split, 4, 2, w_second)
    ref = w @ x.float()
    assert float((out - ref).norm() / ref.norm()) < 1e-3


def test_the_tensor_core_kernel_refuses_what_it_cannot_run(gen):
    m = _benchmark()
    op, x, _, _ = _case(m, 16, 640, gen)
    xq, out = m.x_dot_order(x), torch.empty(16)
    with pytest.raises(ValueError, match=r"x must be float16 of shape \(640,\)"):
        m.dot_gemv(op, xq[:512], out, 16, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="out must be float32"):
        m.dot_gemv(op, xq, out.to(torch.bfloat16), 16, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="5 groups do not split into 2 spans"):
        m.dot_gemv(op, xq, out, 16, 1, 2, 4, 2)
