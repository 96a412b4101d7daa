"""One launch for all of a step's weights: what a persistent kernel streams when its programs wait
for one another at a grid barrier wherever the step's launches end, against one launch per matrix.

floor_limit's ceiling part showed the step's weight reads, one read-only launch per matrix without
PDL, at 4.23-4.27 TB/s (bf16) and the same bytes in one launch at 4.63: about 0.3 ms of a 3.7 ms step
went to launch boundaries even with no arithmetic. A persistent kernel keeps the programs resident and
replaces each boundary by a grid barrier (the step's data dependencies stay: a GEMV needs all of the
one before's output). This module measures that trade:

  read chain   the step's weight bytes (each layer's qkv, o, gate_up, down in the format, then the
               output projection, back to back in one buffer) read by one launch of SMs x k
               programs, a grid barrier after each matrix (`barrier`; `barrier_1counter` with one
               group); the same without the barriers; one launch per matrix of the same kernel; and
               the barrier with each program's first chunk of the next matrix loaded before it waits
               (`barrier_ahead`: the weights do not depend on the barrier, only x does); and a
               barrier's cost alone (`barrier_us`: empty matrices)
  GEMV chain   the same with the arithmetic and the dependency: y = W x in bf16 with float32
               sums, each matrix's x the first K values of the matrix before's y, one persistent
               launch with a barrier per matrix (and with each program's first weight tile loaded
               before it waits) against one launch per matrix of the same kernel; checked against
               float32 torch on NaN-poisoned outputs, so a barrier that lets a program read x before
               it is written fails the check instead of timing

Measured on two H200s (results/benchmarks/README.md): a barrier alone takes 1.56-1.69 us, about what a
launch boundary costs, so the persistent read runs 0.97-0.995x as fast as one launch per matrix (and
under PDL, as the step launches, those are faster still), and the GEMV chain 0.81-0.84x its own
kernel launched once a matrix.

floor_limit.py runs it as its part `persistent` (after steps and ceiling, whose step splits give
the bound: the fastest chain with barriers plus the step's own attention and rest). The kernels run on
a CPU under Triton's interpreter with one program (a barrier of more would wait forever there: the
interpreter runs programs one after another), as tests/test_persistent_chain.py does; `--ahead`
compiles every GPU shape for sm_90 without a GPU.

A grid barrier is only safe when every program is resident at once: `resident_programs` works the
count out of the compiled kernel's registers, shared memory and warps, the launch is refused above
it, and a wait gives up after SPIN_LIMIT polls and raises a flag (reported as an error) rather than
hang the GPU.
"""

from __future__ import annotations

import triton
import triton.language as tl

SPIN_LIMIT = 1 << 22  # polls of the barrier's counter before a program gives up (about 4 s at ~1 us a poll)
LINE_WORDS = 32  # int32 words in a 128-byte line: each matrix of the read chain starts on one, each barrier counter has one
LINE = tl.constexpr(LINE_WORDS)
ALIGN_ELEMENTS = 16  # the GEMV chain's matrices, rows and activations start on 16 elements (32 bytes)
ALIGN = tl.constexpr(ALIGN_ELEMENTS)
# an H100/H200 multiprocessor (sm_90): what bounds how many programs stay resident at once
SM_REGISTERS, SM_WARPS, SM_CTAS, SM_SHARED_BYTES = 65536, 64, 32, 228 * 1024
# (BLOCK int32 words a load, UNROLL loads in flight a loop step, warps, programs a multiprocessor)
READ_SHAPES = ((4096, 2, 8, 2), (2048, 2, 4, 4), (2048, 2, 4, 6), (1024, 4, 4, 8))  # one a multiprocessor streams too little
# (R rows a program at a time, BK columns a loop step, warps, programs a multiprocessor)
GEMV_SHAPES = ((4, 512, 4, 4), (8, 512, 4, 2), (2, 512, 4, 8), (4, 256, 4, 8), (2, 256, 2, 16))
CPU_READ_SHAPE, CPU_GEMV_SHAPE = (4096, 2, 1, 1), (16, 256, 1, 1)  # the interpreter: few, large steps
_SPIN = tl.constexpr(SPIN_LIMIT)
COUNTERS = 8  # the barrier's groups: programs arrive at this many counters (a line apart), the groups at one
MAX_COUNTERS = 16  # groups at most (a power of 2): the top counter and the groups a line each in Chain.counter


@triton.jit
def grid_sync(counter_ptr, flag_ptr, j, pid, n_prog, NC: tl.constexpr):
    """Barrier j (1, 2, ...) of the launch, in two levels: a program arrives at its group's counter
    (program pid in group pid % NC, each counter on a line of its own after the top one at
    counter_ptr), the last of a group to arrive adds one to the top counter, and every program polls
    the top counter until all min(NC, programs) groups have arrived, at most SPIN_LIMIT times (a
    program that gives up raises the flag). The arrivals queue at NC addresses instead of one, and
    the polls contend with NC arrivals, not with every program's. The counters only grow within a
    launch: the launch's caller zeroes them first.
    The block's threads meet before the arrival (one thread arrives for all of them, and its release
    orders only what the block wrote before the meeting) and after the acquire (none of them reads
    what another program wrote before it is visible): CUDA's grid sync does the same. The group
    arrival is acquire-release, so the last arriver's release on the top counter carries the whole
    group's writes."""
    tl.debug_barrier()
    group = pid % NC
    in_group = (n_prog - group + NC - 1) // NC
    got = tl.atomic_add(counter_ptr + (1 + group) * LINE, 1, sem="acq_rel", scope="gpu") + 1
    if got == in_group * j:
        tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
    target = tl.minimum(n_prog, NC) * j
    seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    polls = 0
    while (seen < target) & (polls < _SPIN):
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        polls += 1
    tl.debug_barrier()
    if seen < target:
        tl.atomic_or(flag_ptr, 1)


@triton.jit
def _read_chunk(w_ptr, starts_ptr, m, last, c, SPAN: tl.constexpr):
    """Chunk c (SPAN words) of matrix m as one load, nothing where m is past the last matrix."""
    mm = tl.minimum(m, last - 1)
    start = tl.multiple_of(tl.load(starts_ptr + mm), LINE)
    end = tl.multiple_of(tl.load(starts_ptr + mm + 1), LINE)
    offs = start + c * SPAN + tl.arange(0, SPAN)
    return tl.load(w_ptr + offs, mask=(offs < end) & (m < last), other=0)


@triton.jit
def read_chain_kernel(w_ptr, starts_ptr, first, last, counter_ptr, flag_ptr, out_ptr, BLOCK: tl.constexpr,
                      UNROLL: tl.constexpr, BARRIER: tl.constexpr, AHEAD: tl.constexpr, NC: tl.constexpr):
    """Matrices first..last-1 (words starts[m]..starts[m+1] of w, each starting on a line) read by the
    programs in turn, UNROLL x BLOCK words a loop step, a sum a program added to out[pid] (so the
    loads stay, and the caller can check that every word was read once); with BARRIER a grid barrier
    after each matrix (NC counters), and with AHEAD each program's first chunk of the next matrix
    loaded before it waits (its loads in flight through the wait) and summed after."""
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    ahead = tl.sum(tl.zeros([BLOCK], dtype=tl.int32), axis=0)
    span: tl.constexpr = BLOCK * UNROLL
    pre = tl.zeros([span], dtype=tl.int32)
    if AHEAD:
        pre = _read_chunk(w_ptr, starts_ptr, first, last, pid.to(tl.int64), span)
    m = first
    while m < last:  # while, not range: Triton's interpreter cannot range over a run-time bound
        start = tl.multiple_of(tl.load(starts_ptr + m), LINE)  # word_starts aligns every matrix to a line:
        end = tl.multiple_of(tl.load(starts_ptr + m + 1), LINE)  # the hints let the loads go 128 bits wide
        c = pid.to(tl.int64)
        if AHEAD:
            ahead += tl.sum(pre, axis=0)  # chunk pid, loaded before the barrier
            c += n_prog
        while start + c * span < end:
            base = start + c * span
            for u in tl.static_range(UNROLL):
                offs = base + u * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(w_ptr + offs, mask=offs < end, other=0)
            c += n_prog
        if AHEAD:
            pre = _read_chunk(w_ptr, starts_ptr, m + 1, last, pid.to(tl.int64), span)
        if BARRIER:
            grid_sync(counter_ptr, flag_ptr, m - first + 1, pid, n_prog, NC)
        m += 1
    tl.atomic_add(out_ptr + pid, tl.sum(acc, axis=0) + ahead)  # added, not stored: launches a matrix share the sums


@triton.jit
def _first_tile(w_ptr, meta_ptr, m, last, pid, R: tl.constexpr, BK: tl.constexpr):
    """The first R x BK tile of row block pid of matrix m (nothing where m is past the last)."""
    mm = tl.minimum(m, last - 1)
    w0 = tl.multiple_of(tl.load(meta_ptr + 5 * mm), ALIGN)
    n = tl.load(meta_ptr + 5 * mm + 1).to(tl.int32)
    k = tl.multiple_of(tl.load(meta_ptr + 5 * mm + 2).to(tl.int32), ALIGN)
    rows = pid * R + tl.arange(0, R)
    cols = tl.arange(0, BK)
    return tl.load(w_ptr + w0 + rows[:, None].to(tl.int64) * k + cols[None, :],
                   mask=((rows < n) & (m < last))[:, None] & (cols < k)[None, :], other=0.0)


@triton.jit
def gemv_chain_kernel(w_ptr, meta_ptr, act_ptr, first, last, counter_ptr, flag_ptr, R: tl.constexpr, BK: tl.constexpr,
                      BARRIER: tl.constexpr, AHEAD: tl.constexpr, NC: tl.constexpr):
    """y = W x for matrices first..last-1, each row-major bf16 in w (meta row m: its first element,
    N, K, where its x starts in act and where its y goes in act), float32 sums; R rows a program at
    a time, BK columns a loop step; with BARRIER a grid barrier after each matrix (NC counters), and
    with AHEAD each program's first weight tile of the next matrix loaded before it waits (W does not
    depend on the barrier, only x does). x is loaded past L1 (.cg): another multiprocessor wrote it
    within this launch."""
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols0 = tl.arange(0, BK)
    w_pre = tl.zeros([R, BK], dtype=w_ptr.dtype.element_ty)
    if AHEAD:
        w_pre = _first_tile(w_ptr, meta_ptr, first, last, pid, R, BK)
    m = first
    while m < last:
        # gemv_layout aligns every start and refuses a K off ALIGN: the hints let W's loads go 128 bits wide
        w0 = tl.multiple_of(tl.load(meta_ptr + 5 * m), ALIGN)
        n = tl.load(meta_ptr + 5 * m + 1).to(tl.int32)
        k = tl.multiple_of(tl.load(meta_ptr + 5 * m + 2).to(tl.int32), ALIGN)
        x0 = tl.multiple_of(tl.load(meta_ptr + 5 * m + 3), ALIGN)
        y0 = tl.multiple_of(tl.load(meta_ptr + 5 * m + 4), ALIGN)
        b = pid
        while b * R < n:
            rows = b * R + tl.arange(0, R)
            rmask = rows < n
            w_rows = w_ptr + w0 + rows[:, None].to(tl.int64) * k
            acc = tl.zeros([R, BK], dtype=tl.float32)
            # each step's tile loaded a step ahead (a while loop is not software-pipelined)
            if AHEAD:
                if b == pid:
                    w = w_pre  # loaded before the barrier
                else:
                    w = tl.load(w_rows + cols0[None, :], mask=rmask[:, None] & (cols0 < k)[None, :], other=0.0)
            else:
                w = tl.load(w_rows + cols0[None, :], mask=rmask[:, None] & (cols0 < k)[None, :], other=0.0)
            k0 = 0
            while k0 < k:
                cols = k0 + cols0
                x = tl.load(act_ptr + x0 + cols, mask=cols < k, other=0.0, cache_modifier=".cg")
                nxt = cols + BK
                w_next = tl.load(w_rows + nxt[None, :], mask=rmask[:, None] & (nxt < k)[None, :], other=0.0)
                acc += w.to(tl.float32) * x[None, :]
                w = w_next
                k0 += BK
            tl.store(act_ptr + y0 + rows, tl.sum(acc, axis=1), mask=rmask)
            b += n_prog
        if AHEAD:
            w_pre = _first_tile(w_ptr, meta_ptr, m + 1, last, pid, R, BK)
        if BARRIER:
            grid_sync(counter_ptr, flag_ptr, m - first + 1, pid, n_prog, NC)
        m += 1


# ----------------------------------------------------------------------------- host side


def resident_programs(n_regs: int, warps: int, shared_bytes: int) -> int:
    """Programs of a compiled kernel one sm_90 multiprocessor holds at once: registers (allocated per
    warp in 256s of 8-register steps), warps and shared memory (plus the 1 KB the driver reserves a
    block), at most SM_CTAS."""
    per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = SM_REGISTERS // (-(-per_warp // 256) * 256 * warps)
    by_warps = SM_WARPS // warps
    by_shared = SM_SHARED_BYTES // (shared_bytes + 1024) if shared_bytes else SM_CTAS
    return max(0, min(by_regs, by_warps, by_shared, SM_CTAS))


class Chain:
    """What a chain launch needs besides its matrices: the barrier's counter and flag, a sum a program,
    the multiprocessors, and whether the launch runs on a GPU (else Triton's interpreter, one program)."""

    def __init__(self, device, sm_count: int):
        import torch

        self.device, self.sm_count = torch.device(device), sm_count
        self.gpu = self.device.type == "cuda"
        self.counter = torch.zeros((1 + MAX_COUNTERS) * LINE_WORDS, dtype=torch.int32, device=device)
        self.flag = torch.zeros(1, dtype=torch.int32, device=device)
        self.sink = torch.zeros(1 << 20, dtype=torch.int32, device=device)
        self._resident: dict = {}

    def programs(self, kernel_key, per_sm: int, barrier: bool, compiled=None) -> int:
        """The persistent grid: per_sm programs a multiprocessor, refused (ValueError) with a barrier
        above what stays resident (`compiled`: the kernel as compiled, its registers and shared memory);
        one program off a GPU (the interpreter runs programs one at a time: a second would wait forever
        at a barrier; refuse_on_cpu turns down a grid asked for outright)."""
        if not self.gpu:
            return 1
        if barrier and compiled is not None:
            if getattr(compiled, "n_regs", None) is None and hasattr(compiled, "_init_handles"):
                compiled._init_handles()  # Triton loads a kernel (and learns its registers) on its first launch
            fits = resident_programs(compiled.n_regs, compiled.metadata.num_warps, compiled.metadata.shared)
            self._resident[kernel_key] = fits
            if per_sm > fits:
                raise ValueError(f"{per_sm} programs a multiprocessor asked, {fits} stay resident "
                                 f"({compiled.n_regs} registers, {compiled.metadata.shared} B shared): a barrier would hang")
        return per_sm * self.sm_count

    def grid(self, key, per_sm: int, barrier: bool, compile_fn, programs: int | None = None) -> int:
        """`programs` where the caller gives the grid, else the persistent grid (programs): a kernel with a
        barrier is compiled first (compile_fn: as it will launch, not run) to check it stays resident,
        once per `key`."""
        if programs is not None:
            return programs
        compiled = compile_fn() if barrier and self.gpu and key not in self._resident else None
        return self.programs(key, per_sm, barrier, compiled)

    def refuse_on_cpu(self, barrier: bool, programs: int | None) -> None:
        if barrier and not self.gpu and programs not in (None, 1):
            raise ValueError(f"a grid barrier of {programs} programs would wait forever under Triton's interpreter "
                             "(it runs programs one after another): one program off a GPU")

    def check_flag(self, what: str) -> None:
        """A RuntimeError when a barrier gave up (a program never arrived: not every program was resident)."""
        if int(self.flag.item()):
            self.flag.zero_()
            raise RuntimeError(f"{what}: a grid barrier gave up after {SPIN_LIMIT} polls (programs not all resident)")


def _up(n: int, to: int) -> int:
    return -(-int(n) // to) * to


def word_starts(words: list, device):
    """`starts` for read_chain_kernel: each matrix's first word in one buffer (each rounded up to a
    128-byte line, so that the kernel's loads are 128 bits wide), its end, and one entry more (the
    end again), which the last matrix's look at the next one reads."""
    import torch

    starts = [0]
    for w in words:
        starts.append(starts[-1] + _up(w, LINE_WORDS))
    starts.append(starts[-1])
    return torch.tensor(starts, dtype=torch.int64, device=device)


def read_chain(chain: Chain, buf, starts, shape, *, barrier: bool, ahead: bool = False, counters: int = COUNTERS, first: int = 0,
               last: int | None = None, programs: int | None = None) -> None:
    """One read_chain_kernel launch over matrices first..last-1 of `buf` (int32 words; `starts` from
    word_starts): shape (BLOCK, UNROLL, warps, programs a multiprocessor); `programs` overrides the
    grid (one launch a matrix gives each of its chunks a program). Zeroes the counters first."""
    block, unroll, warps, per_sm = shape
    last = starts.numel() - 2 if last is None else last
    check_counters(counters)
    chain.refuse_on_cpu(barrier, programs)
    if barrier:
        chain.counter.zero_()
    args = (buf, starts, first, last, chain.counter, chain.flag, chain.sink)
    opts = dict(BLOCK=block, UNROLL=unroll, BARRIER=barrier, AHEAD=ahead, NC=counters, num_warps=warps)
    programs = chain.grid(("read", shape, barrier, ahead, counters), per_sm, barrier,
                          lambda: read_chain_kernel.warmup(*args, grid=(1,), **opts), programs)
    read_chain_kernel[(programs,)](*args, **opts)


def check_counters(counters: int) -> None:
    if counters < 1 or counters > MAX_COUNTERS or counters & (counters - 1):
        raise ValueError(f"counters: a power of 2 from 1 to 16 (the barrier's groups), not {counters}")


def barrier_us(chain: Chain, barriers: int, shape, time_ms, counters: int = COUNTERS) -> float:
    """Microseconds a grid barrier takes alone: `barriers` empty matrices read with a barrier after each,
    one launch, minus the same launch without the barriers; time_ms(fn): milliseconds a call of fn
    takes (the caller's timer)."""
    import torch

    starts = torch.zeros(barriers + 2, dtype=torch.int64, device=chain.device)
    buf = torch.zeros(LINE_WORDS, dtype=torch.int32, device=chain.device)
    with_ms = time_ms(lambda: read_chain(chain, buf, starts, shape, barrier=True, counters=counters))
    chain.check_flag("barrier alone")
    without_ms = time_ms(lambda: read_chain(chain, buf, starts, shape, barrier=False))
    return (with_ms - without_ms) * 1e3 / barriers


def read_chain_launches(chain: Chain, buf, starts, shape, host_starts: list) -> None:
    """The same reads as one launch a matrix, each a program per chunk (the step's way); `host_starts`:
    starts as a list (read once, outside any graph capture)."""
    block, unroll, _, _ = shape
    s = host_starts
    for m in range(len(s) - 2):
        chunks = -(-(s[m + 1] - s[m]) // (block * unroll))
        read_chain(chain, buf, starts, shape, barrier=False, first=m, last=m + 1, programs=max(1, chunks))


def gemv_layout(shapes: list, device):
    """meta (int64, 5 a matrix: first element in w, N, K, x's start and y's start in act), the elements
    w holds, and act's size, for a chain of (N, K) shapes in which x of matrix m+1 is the first K
    values of matrix m's y (act[0:K0] holds the first x). Every start is rounded up to
    ALIGN_ELEMENTS; a K larger than the y before, or not a multiple of ALIGN_ELEMENTS, is refused."""
    import torch

    meta, w_at, act_at, x_at = [], 0, _up(shapes[0][1], ALIGN_ELEMENTS), 0
    for m, (n, k) in enumerate(shapes):
        if m and k > shapes[m - 1][0]:
            raise ValueError(f"gemv_layout: matrix {m} takes {k} inputs, the one before gives {shapes[m - 1][0]}")
        if k % ALIGN_ELEMENTS:
            raise ValueError(f"gemv_layout: matrix {m} has {k} columns; the kernel's rows start on {ALIGN_ELEMENTS} elements")
        meta += [w_at, n, k, x_at, act_at]
        x_at = act_at
        w_at += _up(n * k, ALIGN_ELEMENTS)
        act_at += _up(n, ALIGN_ELEMENTS)
    return torch.tensor(meta, dtype=torch.int64, device=device), w_at, act_at


def gemv_chain(chain: Chain, w, meta, act, shape, *, barrier: bool, ahead: bool = False, counters: int = COUNTERS, first: int = 0,
               last: int | None = None, programs: int | None = None) -> None:
    """One gemv_chain_kernel launch (shape: R, BK, warps, programs a multiprocessor)."""
    r, bk, warps, per_sm = shape
    last = meta.numel() // 5 if last is None else last
    check_counters(counters)
    chain.refuse_on_cpu(barrier, programs)
    if barrier:
        chain.counter.zero_()
    opts = dict(R=r, BK=bk, BARRIER=barrier, AHEAD=ahead, NC=counters, num_warps=warps)
    args = (w, meta, act, first, last, chain.counter, chain.flag)
    programs = chain.grid(("gemv", shape, barrier, ahead, counters), per_sm, barrier,
                          lambda: gemv_chain_kernel.warmup(*args, grid=(1,), **opts), programs)
    gemv_chain_kernel[(programs,)](*args, **opts)


def gemv_chain_launches(chain: Chain, w, meta, act, shape, rows: list) -> None:
    """The same GEMVs as one launch a matrix, a program per R rows (the step's way); `rows`: each
    matrix's N as a list (read once, outside any graph capture)."""
    r = shape[0]
    for m, n in enumerate(rows):
        gemv_chain(chain, w, meta, act, shape, barrier=False, first=m, last=m + 1, programs=-(-n // r))


def chain_reference(w, meta, act0):
    """The chain in float32 torch: the last matrix's y, from x = act0."""
    import torch

    x = act0.float()
    for w0, n, k, _, _ in meta.view(-1, 5).tolist():
        x = w[w0:w0 + n * k].view(n, k).float() @ x[:k]
    return x


def gemv_chain_error(chain: Chain, w, meta, act, shape, *, barrier: bool, launches: bool = False, ahead: bool = False,
                     counters: int = COUNTERS) -> float:
    """Relative L2 of the chain's last y against float32 torch, everything after the first x poisoned
    with NaN first (a program that reads an x before it is written gives NaN, not a stale value)."""
    import torch

    k0 = int(meta[2])
    act[k0:] = float("nan")
    (gemv_chain_launches(chain, w, meta, act, shape, meta.view(-1, 5)[:, 1].tolist()) if launches else gemv_chain(chain, w, meta, act, shape, barrier=barrier, ahead=ahead, counters=counters))
    if chain.gpu:
        torch.cuda.synchronize()
    chain.check_flag("gemv chain")
    n_last, y_last = int(meta[-4]), int(meta[-1])
    got = act[y_last:y_last + n_last].float()
    want = chain_reference(w, meta, act[:k0])
    err = float((got - want).norm() / want.norm())
    return err if err == err else float("inf")  # NaN (an x read before it was written): infinitely wrong


def step_shapes(arch: dict, layers: int | None = None) -> list:
    """The step's GEMVs as (role, N, K) in its order: each layer's qkv, o, gate_up, down, then the
    output projection (fused_kernels' role shapes)."""
    from decodegap.measure.fused_kernels.tune import role_shapes

    shapes = role_shapes(arch)
    roles = ("qkv", "o", "gate_up", "down")
    n_layers = arch["num_hidden_layers"] if layers is None else layers
    return [(r, *shapes[r]) for _ in range(n_layers) for r in roles] + [("lm_head", *shapes["lm_head"])]


def gemv_chain_shapes(arch: dict, layers: int | None = None) -> list:
    """The step's GEMVs as a chain (N, K) whose every x fits in the y before: gate_up's y is 2 x
    intermediate wide and down takes the intermediate, the rest take the hidden size."""
    return [(n, k) for _, n, k in step_shapes(arch, layers)]


def compile_ahead(arch: int = 90) -> list:
    """Every GPU shape of both kernels with the barrier (and each with AHEAD) compiled for sm_<arch>
    without a GPU (decodegap.measure.fused_kernels.ahead): registers, spills, the loads' widths and how
    many programs a multiprocessor holds, against the shape's programs a multiprocessor. Needs
    Triton's compiler (TRITON_INTERPRET unset)."""
    import torch

    from decodegap.measure.fused_kernels import ahead as aot

    i32, i64 = torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int64)
    cases = [("read", shape, read_chain_kernel, (i32, i64, 0, 2, i32, i32, i32),
              dict(BLOCK=shape[0], UNROLL=shape[1], BARRIER=True, AHEAD=ahead, NC=COUNTERS, num_warps=shape[2]))
             for shape in READ_SHAPES for ahead in (False, True)]
    cases += [("gemv", shape, gemv_chain_kernel, (torch.zeros(16, dtype=torch.bfloat16), i64, torch.zeros(16), 0, 2, i32, i32),
               dict(R=shape[0], BK=shape[1], BARRIER=True, AHEAD=ahead, NC=COUNTERS, num_warps=shape[2]))
              for shape in GEMV_SHAPES for ahead in (False, True)]
    rows = []
    for kind, shape, fn, args, kwargs in cases:
        compiled, _ = aot._compile(fn, args, dict(kwargs), arch)
        got = aot._inspect(compiled.asm["cubin"])
        rows.append({"kernel": kind, "shape": list(shape), "ahead": kwargs["AHEAD"], "registers": got["registers"],
                     "spill_bytes": got["spill_bytes"], "loads": got["loads"], "per_sm": shape[3],
                     "resident": resident_programs(got["registers"], kwargs["num_warps"], compiled.metadata.shared)})
    return rows


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="the persistent chain's kernels compiled for sm_90 without a GPU "
                                             "(the measurement is floor_limit.py --parts steps persistent)")
    ap.add_argument("--ahead", action="store_true", help="compile every GPU shape and print a JSON row each")
    a = ap.parse_args(argv)
    if not a.ahead:
        ap.error("nothing to do: --ahead (the measurement runs as floor_limit.py's part persistent)")
    print(json.dumps(compile_ahead()))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
