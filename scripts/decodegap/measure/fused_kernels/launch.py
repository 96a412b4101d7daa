"""Launch shapes of the fused kernels, keyed by GPU type, and the switches (levers) a benchmark turns.

A launch shape is how a kernel's work is cut into programs (CUDA thread blocks): the GEMVs' rows and
columns per program and warps, attention's positions per loop step, programs per multiprocessor,
warps and pipeline stages. The best shape depends on the GPU and, for a GEMV, on the matrix's width:
the shapes live in one table keyed by the GPU types of config/gpus.yaml (`LAUNCH_SHAPES`, with a
"default" for any other), each entry with GEMV shapes for every card and, where a card width reads
best with others, that width's own (`gemv_by_hidden`); a session picks its GPU's entry
(`launch_shapes_for`) and its card's width in it, unless it is handed shapes that
`decodegap.measure.fused_kernels.tune.tune_launch_shapes` measured on its machine (`resolve`).

GEMV shapes are per weight storage format as the kernels read it ("dense": bf16 or float32 as
stored; "fp8": e4m3 with a scale per row; "int4": 4-bit words with a scale and zero per group) and
per role in the step:

  qkv      the joined q/k/v projection (rows: pairs of rows, RoPE's two halves)
  o        the attention output projection, added into the residual
  gate_up  the joined gate/up projection (rows: gate rows, each with its up row)
  down     the MLP's down projection, added into the residual
  lm_head  the output projection (always dense: the paths keep it in bf16)

Levers (each switchable, so benchmarks/floor_limit.py measures it on and off side by side):

  pdl                  programmatic dependent launch (Hopper and newer): each kernel may start while
                       the one before drains, and waits for its results in `griddepcontrol.wait`; true
                       or false for every step, or per weight format (true, or the card widths it is on
                       for): a step is one setting, its format's at its width (the stage decides it per
                       step: on the H100 2026-12-06 Qwen-2.5-7B's bf16 step declined it at 0.992x while
                       with its prefetch it had run the int4 steps 1.013x faster on another machine); a
                       packed path's step (int4-tinygemm: GEMVs of its own) takes the "dense" setting
  pdl_prefetch         per weight format, with pdl, loop steps of W (of K and V for attention) each of
                       a kernel's first pdl_prefetch_per_sm x multiprocessors programs prefetches into
                       L2 before that
                       wait: what it reads first does not depend on the kernel before, so it streams
                       while that kernel drains (0: none; pdl alone only hides the launch). Only the
                       first programs: a later one, started after the kernel before ended, would pay
                       the prefetch's round trip before its own loads
  attention.skip_empty attention skips whole blocks past the step's position with a branch (the
                       measured H200 default) instead of masking them, which lets Triton pipeline
                       the K/V loads across loop steps
  attention.combine    "separate": the splits' combine is its own launch; "in_split": the last split
                       program of each KV head to finish combines (one launch instead of two)
  attention.combine_cols  the separate combine's columns of a query head per program (0: the whole
                       head in one program; 32: four programs a 128-wide head, each reading a
                       quarter of every split's weighted V)
  x_fp32               per weight format (true, or the card widths it is on for), the inputs the step
                       writes for its GEMVs (x normalised apart, the MLP's SiLU(gate) * up) stored as
                       float32 holding their bf16 values, so a GEMV's loop converts no input (ahead
                       --loops: 6.5-7.8 instructions a weight to 5.1-6.3 for Qwen-2.5-7B's int4 qkv,
                       gate_up and down); the numbers are the same
  x_pairs              per weight format (int4 and fp8; true, or the card widths it is on for), with the
                       norm apart: the inputs the step writes for its qkv, gate_up and down GEMVs stored as
                       f16 pairs (add_norm, gate_up's epilogue), which those GEMVs read two weights an
                       instruction in packed halves: for int4 in the words' order (int4_pairs.py: about
                       two SASS instructions a weight against 4.6-7.8), for fp8 x / 16 in column order
                       (fp8_pairs.py: seven instructions for four weights, a float32 accumulator a word);
                       o reads the attention's output as before (fp8: see o_pairs). Its GEMV shapes are the table's
                       "int4_pairs" / "fp8_pairs" ones (else the format's). The numbers differ from the
                       float32 loop's by f16's rounding of x and of two- to four-product sums
  o_pairs              per weight format (fp8 only; true, or the card widths it is on for), with x_pairs
                       on: the o projection reads the attention's output as fp8_pairs' f16 halves too,
                       which the attention's combine writes (split_attention.py), at the "fp8_pairs" o
                       shape (else fp8's); without it o is the one fp8 GEMV left in the float32 loop
  load_ahead           per read (READS) the roles whose GEMV loop loads each step's weight tile (for
                       int4 its scales and zeros too) one step ahead, into registers, so its loads are
                       in flight while the step before is multiplied. Triton's launch option does not
                       pipeline these loads (their stages change nothing, floor_limit_stages_h200.txt;
                       the shape's loop_stages does, through shared memory, and ran every int4 role
                       1.21-1.43x slower, floor_limit_loop_stages_h200.txt); ptxas
                       hoists them only where it unrolls the loop over K (a few trips), so it is a
                       lever per role: a loop it keeps waits out each step's load latency with no
                       other load of the warp's outstanding
  l2_ahead             per weight format, with pdl, the L2 priority ("evict_last" or "evict_normal") with
                       which the attention's split programs prefetch the o projection's weight into L2
                       before their wait, each its share (absent: off). Attention waits on latencies
                       (a query, the splits' combine) while the memory idles; the prefetch streams
                       the weight the kernel after it reads in that time, and o reads it from L2.
                       Off on the H200: every variant ran the steps at 0.92-1.008x the table's speed
                       (floor_limit.py --parts levers, 2026-12-05, code 47fb8b7, GPU-6f60ca8e;
                       results/benchmarks/floor_limit_l2_ahead_h200.txt)
  l2_ahead_mib         per weight format, with l2_ahead on: MiB of gate_up's weight the attention prefetches
                       after o's, its first rows (half of them gate rows, half up rows: its first
                       programs' rows), so the MLP's first programs read from L2 too (0 where absent)
  l2_ahead_at          where the split programs prefetch: "start" (before PDL's wait, while the kernel
                       before drains) or "end" (after their partials are stored, while the combine and
                       the handover to o run: their own K and V loads are not queued behind it)
  norm                 per weight format, how the RMSNorm before qkv, gate_up and lm_head is done:
                       "program" (every GEMV program sums x's squares and normalises each x value it
                       multiplies: a pass over x from L2 and the norm's arithmetic, per program),
                       "sum" (as "program", but the o and down GEMVs add the squares of the rows they
                       write into one float32 a norm, which the next GEMV reads: one load instead of
                       the pass; the float32 sum's order varies run to run, so the last bit of a
                       step's normalised x may too), "apart" (a one-program launch writes the
                       normalised x before each of those GEMVs, which read it as it is: a launch more
                       per norm, no norm arithmetic in the GEMVs)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

ROLES = ("qkv", "o", "gate_up", "down", "lm_head")
PAIRS_ROLES = ("qkv", "gate_up", "down")  # the roles whose input the step writes as f16 pairs under x_pairs
FORMATS = ("dense", "fp8", "int4")  # the weight storage formats the GEMV kernels read (gemv.WeightOperand)
# how the GEMVs read them: each format as stored, and int4 and fp8 against x as f16 pairs (the lever x_pairs),
# whose shapes a table may give apart (a read without its own shapes takes its format's)
READS = FORMATS + ("int4_pairs", "fp8_pairs")
COMBINES = ("separate", "in_split")
NORMS = ("program", "sum", "apart")
L2_AHEAD_PRIORITIES = {"evict_normal": 1, "evict_last": 2}  # the lever l2_ahead's priorities: the split kernel's L2_PRI
L2_AHEAD_AT = ("start", "end")  # where in the split programs it prefetches: before PDL's wait, after the partials' stores
DEFAULT_SM_COUNT = 132  # multiprocessors assumed where there is no GPU to ask (the CPU's interpreter): the H200's


def _check_norm(norm, where: str) -> None:
    if not isinstance(norm, dict):
        raise ValueError(f"{where}: norm must be {{format: one of {', '.join(NORMS)}}}, not {norm!r}")
    for fmt, mode in norm.items():
        _check_format(fmt, f"{where}: norm")
        if mode not in NORMS:
            raise ValueError(f"{where}: norm {mode!r} for {fmt}: one of {', '.join(NORMS)}")


def _check_whole(name: str, value, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"launch shapes: {name} must be a whole number >= {least}, not {value!r}")


def _check_format(fmt, where: str, known=FORMATS) -> None:
    if fmt not in known:
        raise ValueError(f"{where}: unknown format {fmt!r}; formats are {', '.join(known)}")


def width_lever_on(lever: dict, fmt: str, hidden: int | None) -> bool:
    """Whether a lever given per format as true, false or card widths is on for `fmt` at width `hidden`."""
    on = lever.get(fmt, False)
    return hidden in on if isinstance(on, list) else on


def _check_roles_lever(value, name: str) -> None:
    """A lever given per read (READS) as the roles it is on for (load_ahead)."""
    if not isinstance(value, dict) or not all(isinstance(v, (list, tuple)) for v in value.values()):
        raise ValueError(f"launch shapes: {name} must be {{read: [roles]}}, not {value!r}")
    for fmt, roles in value.items():
        _check_format(fmt, f"launch shapes: {name}", READS)
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ValueError(f"launch shapes: {name}[{fmt!r}]: unknown role(s) {', '.join(map(repr, unknown))}; roles are {', '.join(ROLES)}")


def _check_widths_lever(value, name: str) -> None:
    """A lever given per format as true, false or the card widths it is on for (pdl, x_fp32, x_pairs, o_pairs)."""
    ok = lambda v: isinstance(v, bool) or (isinstance(v, list) and all(isinstance(h, int) and not isinstance(h, bool) for h in v))  # noqa: E731
    if not isinstance(value, dict) or not all(ok(v) for v in value.values()):
        raise ValueError(f"launch shapes: {name} must be {{format: true, false or [card widths]}}, not {value!r}")
    for fmt in value:
        _check_format(fmt, f"launch shapes: {name}")


@dataclass(frozen=True)
class GemvConfig:
    """One GEMV role's launch shape: `rows` of W per program (pairs of rows for qkv, gate rows each
    with its up row for gate_up), `block_k` columns of W per loop step (a multiple of 128 for int4:
    whole groups), `warps` per program, `x_tile`: the input chunk loaded as a tile of W's shape
    instead of a vector (gemv.py's docstring says what that trades), and `stages`: Triton's software
    pipelining depth for the loop over K (how many loop steps' loads may be in flight; None leaves
    Triton's default, 3 on CUDA, which every shape had before this field; a launch option, which
    pipelines only loops with a dot: the GEMVs' loops it leaves as they are, floor_limit_stages_h200.txt),
    `load_ahead`: each loop step's weights loaded one step ahead (the lever of that name;
    LaunchShapes.gemv_for sets it), `loop_stages`: the loop over K written as
    tl.range(num_stages=loop_stages), which Triton's pipeliner does apply to a loop without a dot: each
    step's loads become cp.async copies into shared memory issued loop_stages - 1 steps ahead, so that
    many steps' bytes are in flight a program without holding registers (None: the plain loop),
    `f16_words`: for the pair reads (int4_pairs.py, fp8_pairs.py), how many of a thread's adjacent words
    of one row (and, for int4, group) have their halves summed in f16 before the one conversion to
    float32 (1: each word's own; 2 or 4: fewer instructions a weight, and f16's range for x shrinks by
    as much)."""

    rows: int
    block_k: int
    warps: int
    x_tile: bool = False
    stages: int | None = None
    load_ahead: bool = False
    loop_stages: int | None = None
    f16_words: int = 1

    def __post_init__(self):
        if self.stages is not None and (isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 1):
            raise ValueError(f"GEMV launch shape: stages must be a whole number >= 1 or None (Triton's default), not {self.stages!r}")
        if self.loop_stages is not None and (isinstance(self.loop_stages, bool) or not isinstance(self.loop_stages, int)
                                             or self.loop_stages < 2):
            raise ValueError(f"GEMV launch shape: loop_stages must be a whole number >= 2 (steps pipelined) or None "
                             f"(the plain loop), not {self.loop_stages!r}")
        if isinstance(self.f16_words, bool) or self.f16_words not in (1, 2, 4, 8, 16):
            raise ValueError(f"GEMV launch shape: f16_words must be 1, 2, 4, 8 or 16 (words of a group of 16 "
                             f"summed in f16), not {self.f16_words!r}")

    def as_dict(self) -> dict:
        out = {"rows": self.rows, "block_k": self.block_k, "warps": self.warps, "x_tile": self.x_tile}
        if self.stages is not None:  # absent = Triton's default: shapes recorded before this field read the same
            out["stages"] = self.stages
        if self.load_ahead:  # absent when off: shapes recorded before this field read the same
            out["load_ahead"] = True
        if self.loop_stages is not None:  # absent when off: shapes recorded before this field read the same
            out["loop_stages"] = self.loop_stages
        if self.f16_words != 1:  # absent when 1: shapes recorded before this field read the same
            out["f16_words"] = self.f16_words
        return out


@dataclass(frozen=True)
class AttentionConfig:
    """The split decode attention's launch shape: `block_t` cache positions per loop step (a block_t x
    head_dim tile of K and of V), `programs_per_sm` split programs to aim for per multiprocessor (all
    KV heads together), `warps` and `stages` (Triton's software pipelining depth) per program, and
    the levers `skip_empty`, `combine` and `combine_cols` (module docstring)."""

    block_t: int = 32
    programs_per_sm: int = 2
    warps: int = 4
    stages: int = 2
    skip_empty: bool = True
    combine: str = "separate"
    combine_cols: int = 0

    def __post_init__(self):
        if self.combine not in COMBINES:
            raise ValueError(f"attention combine {self.combine!r}: one of {', '.join(COMBINES)}")
        if self.block_t < 16 or self.block_t & (self.block_t - 1):
            raise ValueError(f"attention block_t {self.block_t}: a power of 2, at least 16 (tl.dot's smallest tile)")
        if self.combine_cols and (self.combine_cols < 16 or self.combine_cols & (self.combine_cols - 1)):
            raise ValueError(f"attention combine_cols {self.combine_cols}: 0 (a head's every column in one program) "
                             "or a power of 2, at least 16")

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if not self.combine_cols:  # absent = one combine program a query head: shapes recorded before this field read the same
            del out["combine_cols"]
        return out


@dataclass(frozen=True)
class LaunchShapes:
    """Every launch shape and lever of the fused step on one GPU type: `gemv[format][role]`,
    `gemv_by_hidden[hidden size][format][role]` (a card width's own shapes where they differ: the
    same role reads 3584- and 4096-wide cards best with different shapes on the H200), `attention`,
    the levers `pdl`, `pdl_prefetch` ({format: loop steps}, 0 where absent) with
    `pdl_prefetch_per_sm`, and `norm` ({format: how its GEMVs get the norm}, "program" where absent;
    module docstring), and where they came from (`source`)."""

    gemv: dict = field(default_factory=dict)
    attention: AttentionConfig = AttentionConfig()
    pdl: bool | dict = False
    source: str = ""
    gemv_by_hidden: dict = field(default_factory=dict)
    norm: dict = field(default_factory=dict)
    pdl_prefetch: dict = field(default_factory=dict)
    pdl_prefetch_per_sm: int = 2
    x_fp32: dict = field(default_factory=dict)
    x_pairs: dict = field(default_factory=dict)
    load_ahead: dict = field(default_factory=dict)
    o_pairs: dict = field(default_factory=dict)
    l2_ahead: dict = field(default_factory=dict)
    l2_ahead_mib: dict = field(default_factory=dict)
    l2_ahead_at: str = "start"

    def __post_init__(self):
        _check_norm(self.norm, "launch shapes")
        if not isinstance(self.pdl, bool):
            _check_widths_lever(self.pdl, "pdl")
        if not isinstance(self.pdl_prefetch, dict):
            raise ValueError(f"launch shapes: pdl_prefetch must be {{format: loop steps}}, not {self.pdl_prefetch!r}")
        for fmt, steps in self.pdl_prefetch.items():
            _check_format(fmt, "launch shapes: pdl_prefetch")
            _check_whole("pdl_prefetch", steps, 0)
        _check_whole("pdl_prefetch_per_sm", self.pdl_prefetch_per_sm, 1)
        _check_widths_lever(self.x_fp32, "x_fp32")
        _check_widths_lever(self.x_pairs, "x_pairs")
        _check_roles_lever(self.load_ahead, "load_ahead")
        for fmt, on in self.x_pairs.items():
            if on and fmt not in ("int4", "fp8"):
                raise ValueError(f"launch shapes: x_pairs is a lever of int4 and fp8 weights only, not {fmt}")
        _check_widths_lever(self.o_pairs, "o_pairs")
        for fmt, on in self.o_pairs.items():  # the combine writes fp8's halves (column order) only
            if on and fmt != "fp8":
                raise ValueError(f"launch shapes: o_pairs is a lever of fp8 weights only, not {fmt}")
        if not isinstance(self.l2_ahead, dict):
            raise ValueError(f"launch shapes: l2_ahead must be {{format: L2 priority}}, not {self.l2_ahead!r}")
        for fmt, priority in self.l2_ahead.items():
            _check_format(fmt, "launch shapes: l2_ahead")
            if priority not in L2_AHEAD_PRIORITIES:
                raise ValueError(f"launch shapes: l2_ahead[{fmt!r}] is {priority!r}; one of {', '.join(L2_AHEAD_PRIORITIES)}")
        if self.l2_ahead_at not in L2_AHEAD_AT:
            raise ValueError(f"launch shapes: l2_ahead_at {self.l2_ahead_at!r}: one of {', '.join(L2_AHEAD_AT)}")
        if not isinstance(self.l2_ahead_mib, dict):
            raise ValueError(f"launch shapes: l2_ahead_mib must be {{format: MiB}}, not {self.l2_ahead_mib!r}")
        for fmt, mib in self.l2_ahead_mib.items():
            _check_format(fmt, "launch shapes: l2_ahead_mib")
            _check_whole(f"l2_ahead_mib[{fmt!r}]", mib, 0)

    def pdl_for(self, fmt: str, hidden: int | None = None) -> bool:
        """Whether the step whose GEMVs read `fmt` ("dense" for bf16), in a card of width `hidden`, launches
        its kernels with programmatic dependent launch (the lever pdl: one setting, or per format and width)."""
        return self.pdl if isinstance(self.pdl, bool) else width_lever_on(self.pdl, fmt, hidden)

    def pdl_anywhere(self) -> bool:
        """Whether any step runs under PDL (a device without it cannot run these shapes)."""
        return any(bool(v) for v in self.pdl_by_format().values())

    def pdl_by_format(self) -> dict:
        """The lever pdl as {format: true, false or [card widths]} for every format (one bool: every format's;
        a format absent from a dict: off), the form a width lever's change merges into."""
        if isinstance(self.pdl, bool):
            return {fmt: self.pdl for fmt in FORMATS}
        return {fmt: list(v) if isinstance(v, list) else v for fmt, v in ((f, self.pdl.get(f, False)) for f in FORMATS)}

    def x_fp32_for(self, fmt: str, hidden: int | None = None) -> bool:
        """Whether the step whose GEMVs read `fmt`, in a card of width `hidden`, writes their inputs as
        float32 (the lever x_fp32)."""
        return width_lever_on(self.x_fp32, fmt, hidden)

    def x_pairs_for(self, fmt: str, hidden: int | None = None) -> bool:
        """Whether the step whose GEMVs read `fmt`, in a card of width `hidden`, writes their inputs as
        f16 pairs (the lever x_pairs; it takes the norm apart, whose launch writes them)."""
        return width_lever_on(self.x_pairs, fmt, hidden) and self.norm_for(fmt) == "apart"

    def o_pairs_for(self, fmt: str, hidden: int | None = None) -> bool:
        """Whether the o projection of the step whose GEMVs read `fmt` reads the attention's output as
        f16 halves (the lever o_pairs; on only where x_pairs is)."""
        return width_lever_on(self.o_pairs, fmt, hidden) and self.x_pairs_for(fmt, hidden)

    def reads_pairs(self, fmt: str, role: str, hidden: int | None = None) -> bool:
        """Whether the step launches `role`'s GEMV for weights stored as `fmt`, in a card of width
        `hidden`, on f16 pairs (the read "<fmt>_pairs"): qkv, gate_up and down under x_pairs, o under
        o_pairs. The one place the step, the tuner and the benchmarks learn it from."""
        if role in PAIRS_ROLES:
            return self.x_pairs_for(fmt, hidden)
        return role == "o" and self.o_pairs_for(fmt, hidden)

    def l2_ahead_for(self, fmt: str, hidden: int | None = None) -> str | None:
        """The L2 priority with which the attention prefetches the o weight of a step whose GEMVs read
        `fmt` (the lever l2_ahead), or None: off. Only under PDL (the prefetch goes before its wait)."""
        return self.l2_ahead.get(fmt) if self.pdl_for(fmt, hidden) else None

    def l2_ahead_bytes_for(self, fmt: str, hidden: int | None = None) -> int:
        """Bytes of gate_up's first rows the attention prefetches after o's weight (l2_ahead_mib), where
        l2_ahead is on for `fmt`; else 0."""
        return self.l2_ahead_mib.get(fmt, 0) * 2**20 if self.l2_ahead_for(fmt, hidden) else 0

    def prefetch_for(self, fmt: str) -> int:
        """Loop steps the programs of a step whose GEMVs read `fmt` prefetch under PDL (the lever pdl_prefetch)."""
        return self.pdl_prefetch.get(fmt, 0)

    def prefetching(self, sm_count: int) -> int:
        """How many of a kernel's first programs prefetch under pdl_prefetch."""
        return self.pdl_prefetch_per_sm * sm_count

    def norm_for(self, fmt: str) -> str:
        """How the GEMVs of weights stored as `fmt` get their norm (the lever `norm`)."""
        return self.norm.get(fmt, "program")

    def gemv_for(self, fmt: str, role: str, hidden: int | None = None) -> GemvConfig:
        """The shape of `role` for weights read as `fmt` (READS) in a card of width `hidden`: the width's
        own shape, else the GPU's; a read without its own shapes takes its storage format's
        ("int4_pairs": int4's), a format without its own the dense ones (lm_head is always dense);
        with load_ahead set where the lever is on for the read and role."""
        own = self.gemv_by_hidden.get(hidden, {})
        base = fmt.split("_")[0]
        for table in (own.get(fmt), self.gemv.get(fmt), own.get(base), self.gemv.get(base), own.get("dense"), self.gemv["dense"]):
            if table and role in table:
                shape = table[role]
                if role in self.load_ahead.get(fmt, ()) and not shape.load_ahead:
                    shape = dataclasses.replace(shape, load_ahead=True)
                return shape
        raise KeyError(f"launch shapes: no GEMV shape for role {role!r}")

    def replace(self, **changes) -> "LaunchShapes":
        """A copy with some fields changed; `attention` may be a dict of AttentionConfig's fields to change."""
        if isinstance(changes.get("attention"), dict):
            changes["attention"] = dataclasses.replace(self.attention, **changes["attention"])
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """The JSON form `resolve` reads back (tune_launch_shapes returns it, a session records it)."""
        out = {"gemv": {fmt: {role: c.as_dict() for role, c in roles.items()} for fmt, roles in self.gemv.items()},
               "attention": self.attention.as_dict(), "source": self.source,
               # per format, every one written (a format absent here is off; resolve would give it the table's)
               "pdl": self.pdl if isinstance(self.pdl, bool) else self.pdl_by_format()}
        if self.norm:  # absent when every format's is "program": records made before the lever read the same
            out["norm"] = dict(self.norm)
        if any(self.pdl_prefetch.values()):  # absent when 0: records made before the lever read the same
            out["pdl_prefetch"] = dict(self.pdl_prefetch)
            out["pdl_prefetch_per_sm"] = self.pdl_prefetch_per_sm
        if any(self.x_fp32.values()):  # absent when off: records made before the lever read the same
            out["x_fp32"] = {fmt: list(v) if isinstance(v, list) else v for fmt, v in self.x_fp32.items()}
        if any(self.x_pairs.values()):  # absent when off: records made before the lever read the same
            out["x_pairs"] = {fmt: list(v) if isinstance(v, list) else v for fmt, v in self.x_pairs.items()}
        if any(self.o_pairs.values()):  # absent when off: records made before the lever read the same
            out["o_pairs"] = {fmt: list(v) if isinstance(v, list) else v for fmt, v in self.o_pairs.items()}
        if self.l2_ahead:  # absent when off: records made before the lever read the same
            out["l2_ahead"] = dict(self.l2_ahead)
        if any(self.l2_ahead_mib.values()):  # absent when 0: records made before the lever read the same
            out["l2_ahead_mib"] = dict(self.l2_ahead_mib)
        if self.l2_ahead_at != "start":  # absent at the start: records made before the lever read the same
            out["l2_ahead_at"] = self.l2_ahead_at
        if any(self.load_ahead.values()):  # absent when off: records made before the lever read the same
            out["load_ahead"] = {fmt: list(roles) for fmt, roles in self.load_ahead.items() if roles}
        if self.gemv_by_hidden:  # absent when empty: records made before it read the same
            out["gemv_by_hidden"] = {str(h): {fmt: {role: c.as_dict() for role, c in roles.items()} for fmt, roles in fmts.items()}
                                     for h, fmts in self.gemv_by_hidden.items()}
        return out


def _gemv_table(table: dict) -> dict:
    return {role: shape if isinstance(shape, GemvConfig) else GemvConfig(*shape) for role, shape in table.items()}


# Chosen on the H200 by tune_launch_shapes (benchmarks/floor_limit.py on 2026-12-01, code 464a612;
# results/benchmarks/floor_limit_h200.txt): each role's least time over
# Qwen-2.5-7B's, Mistral-7B-v0.3's and Llama-3.1-8B's shapes, graph-replayed launches cycling past
# L2. With them the bf16 Qwen step at ctx 2048 took 3.91 ms against 4.79 ms with the shapes before
# (gate_up was (8, 256, 4)); fp8 and int4 rows hold half and a quarter of a bf16 row's bytes, so they
# take more columns per loop step. x_tile (o and down: no norm prologue) loads x in the weight tile's
# shape, which drops a shared-memory barrier per loop step on sm_90.
_H200_DENSE_PROGRAM = {"qkv": (4, 512, 4), "o": (2, 512, 4), "gate_up": (2, 512, 4), "down": (2, 512, 4, True), "lm_head": (4, 512, 4)}
# With x normalised apart (the norm lever below) the bf16 roles after a norm read x as a tile too: tuned
# so on Qwen-2.5-7B alone (floor_limit.py --parts tune --tune-norm apart, 2026-12-02, code b8dee89,
# GPU-87bd064c; results/benchmarks/floor_limit_tune_bf16_apart_h200.txt) its bf16 step at ctx 2048 ran
# 3.840 ms against 3.918 ms with the shapes above and the per-program norm (1.020x)
_H200_DENSE = {"qkv": (4, 512, 4, True), "o": (2, 512, 4, True), "gate_up": (2, 512, 4), "down": (2, 512, 4, True),
               "lm_head": (2, 512, 4, True)}
# The 4096-wide cards (Llama-3.1-8B, Mistral-7B-v0.3) read best with longer loop steps: tuned on each
# alone (floor_limit.py --parts tune, 2026-12-02, code d7e5465, GPU-5f6b5afc; results/benchmarks/
# floor_limit_retune_{llama,mistral}_h200.txt), both chose these (gate_up 58.2 us against 71.4 us with
# the shapes above, lm_head 243 against 285 us for Llama), and their bf16 steps at ctx 2048 took 4.462
# and 4.261 ms against 4.758 and 4.534 ms with the table (1.066x, 1.064x). That step also ran the
# tuner's attention (8 programs a multiprocessor, 2 stages: 8.73 against 9.58 us a layer alone, about
# 0.03 ms of the step), which the table does not take: it was measured at ctx 2048 only.
# Tuned again on Llama-3.1-8B alone with x normalised apart (same command and machine; results/benchmarks/
# floor_limit_tune_bf16_apart_llama_h200.txt): its step ran 4.415 against 4.417 ms (1.001x), so the
# 4096-wide cards lose nothing by the norm apart with these shapes (with the shapes before it they ran
# 0.959-0.982x). Mistral-7B-v0.3 takes them by its width, not measured with them.
# o and down (the two roles that add the residual, 1.25-1.52x their read-only time: floor_limit_roles_h200.txt)
# were then tried in the whole step as levers (floor_limit.py --parts levers, bf16, ctx 2048 and 16384).
# down 2 rows, block_k 512, x as a tile, with o 4 rows, block_k 1024, ran the 4096-wide cards' steps
# 1.020-1.033x the shapes above on two machines, twice each: code 86a66b6, GPU-91cfa4ff,
# floor_limit_o_down_confirm{,_again}_h200.txt (1.020-1.030x); code 4613448, GPU-25bde832,
# floor_limit_o_down_machine2{,_again}_h200.txt (1.023-1.033x; Llama-3.1-8B at ctx 2048 4.193 -> 4.085 ms).
# down with 4 rows and 8 warps ran 0.2-0.3 % faster still on the second machine but was measured with
# o on that one only. Qwen-2.5-7B's width keeps its shapes: none of 20 beat them (floor_limit_o_down_shapes_h200.txt).
_H200_DENSE_4096 = {"qkv": (4, 512, 4, True), "o": (4, 1024, 4), "gate_up": (1, 1024, 4), "down": (2, 512, 4, True),
                    "lm_head": (1, 1024, 4)}
# fp8 and int4 with x normalised apart (the norm lever below), tuned on Qwen-2.5-7B and Llama-3.1-8B
# (floor_limit.py --parts tune, 2026-12-02, code 12acda8, GPU-0e26c2db; results/benchmarks/
# floor_limit_tune_norm_h200.txt): with no norm arithmetic left in them the int4 kernels read x as a
# tile (x_tile) at every width, and against the shapes tuned with the norm inside, the int4 steps ran
# 1.125-1.130x (Qwen-2.5-7B, ctx 2048 and 16384) and 1.085-1.108x (Llama-3.1-8B), the fp8 ones
# 1.001-1.002x and 1.013-1.015x.
_H200_FP8_4096 = {"qkv": (2, 1024, 4, True), "o": (2, 2048, 4), "gate_up": (4, 1024, 4), "down": (4, 1024, 4)}
_H200_INT4_4096 = {"qkv": (4, 1024, 4, True), "o": (4, 2048, 4, True), "gate_up": (4, 1024, 4, True), "down": (4, 2048, 4, True)}
_H200_BY_HIDDEN = {4096: {"dense": _gemv_table(_H200_DENSE_4096), "fp8": _gemv_table(_H200_FP8_4096),
                          "int4": _gemv_table(_H200_INT4_4096)}}
# The norm lever per format (floor_limit.py --parts prologue levers, 2026-12-02, code c1eee80, GPU-e4092a36;
# results/benchmarks/floor_limit_norm_h200.txt): with x normalised by a launch of its own, the int4 steps
# at ctx 2048 and 16384 ran 1.048-1.058x the per-program norm's on all three cards (the int4 loop is
# bound by its instructions, and the norm's arithmetic is in it) and the fp8 steps 1.002-1.011x; the
# bf16 steps 1.007-1.009x for Qwen-2.5-7B but 0.959-0.982x for the 4096-wide cards with the bf16 shapes
# tuned under the per-program norm; with bf16 shapes tuned under this norm (above) every format takes it.
_H200_NORM = {"dense": "apart", "fp8": "apart", "int4": "apart"}
# Programmatic dependent launch (floor_limit.py --parts levers, 2026-12-02; results/benchmarks/): with every
# program prefetching its first loop steps before PDL's wait, the steps ran 0.86-0.99x (code f29de20,
# GPU-db402272, floor_limit_pdl_every_program_h200.txt: a program that starts after the kernel before has
# ended pays the prefetch's round trip); with the first 2 programs a multiprocessor prefetching one loop
# step (code 9ed2bc8, GPU-1e636023, floor_limit_pdl_h200.txt) the bf16 and int4 steps of all three cards ran
# 1.007-1.035x the table without PDL at ctx 2048 and 16384, PDL alone 0.999-1.032x; the fp8 steps ran
# 1.010-1.028x with PDL alone but 0.940-0.955x with the prefetch on the 4096-wide cards (1.026-1.033x on
# Qwen-2.5-7B), so fp8 takes PDL without it.
_H200_PDL_PREFETCH = {"dense": 1, "int4": 1}
# The lever x_fp32 (floor_limit.py --parts levers, 2026-12-02, code dc0ae08, GPU-d85aaa91; results/benchmarks/
# floor_limit_x32_h200.txt): the int4 steps of the 4096-wide cards ran 1.027-1.050x with their GEMVs' inputs in
# float32, Qwen-2.5-7B's 0.974-0.993x (its int4 shapes were tuned reading bf16 x), the bf16 steps 0.968-0.997x
# and the fp8 ones 0.829-0.863x: int4 takes it at width 4096 only.
_H200_X_FP32 = {"int4": [4096]}
# The lever x_pairs: int4's qkv, gate_up and down read their inputs as f16 pairs, two weights an instruction
# (int4_pairs.py). Its shapes are each role's best in benchmarks/int4_packed_gemv.py (2026-12-03, code 76c848b,
# GPU-515172d2; results/benchmarks/int4_packed_gemv_h200.txt: there 1.23-1.45x the float32 loop's time on these
# roles) over Qwen-2.5-7B's and Llama-3.1-8B's shapes, as the kernels count rows (qkv and gate_up: half the tile's).
# For fp8 (fp8_pairs.py, floor_limit.py --parts levers tune --quant fp8 --tune-x-pairs fp8 --no-tune-attention,
# 2026-12-03, code 4f976dc, one machine; results/benchmarks/floor_limit_fp8_pairs_h200.txt): with the fp8 shapes
# the fp8 steps of all three cards ran 1.069-1.122x at ctx 2048 and 16384, and with the shapes the tuner then
# chose for the halves (_H200_FP8_PAIRS, same process) 1.096-1.136x.
_H200_X_PAIRS = {"int4": True, "fp8": True}
# The lever load_ahead (floor_limit.py --parts levers, 2026-12-03, code 665ad93, GPU-b3357425; results/
# benchmarks/floor_limit_levers_ahead_h200.txt): only the 4096-wide cards' int4 pairs down takes it (their
# int4 steps 1.014-1.022x faster at ctx 2048 and 16384); with it Qwen-2.5-7B's pairs down and gate_up, the
# 4096-wide gate_up, int4 o and the bf16 roles ran 0.97-1.01x, and fp8's 0.72-0.84x (ptxas spends 2.5 more
# instructions a weight on fp8's loop with it). The H200 table lists no read for it: that down's shape has it.
_H200_LOAD_AHEAD: dict = {}
_H200_INT4_PAIRS = {"qkv": (2, 512, 4), "gate_up": (4, 512, 4), "down": (8, 1024, 8)}
# The int4 pair reads' f16_words (floor_limit.py --parts levers tune --quant int4-triton, 2026-12-03, code 7a7f626,
# GPU-a437602c; results/benchmarks/floor_limit_f16_words_h200.txt): at the table's shapes 2 or 4 words summed in
# f16 ran the 4096-wide cards' int4 steps 1.002-1.021x and Qwen-2.5-7B's 0.936-0.984x; the tuner's 4096-wide
# choice below (gate_up 4 words at 8 rows with load_ahead, down 2 words) ran them 1.019-1.030x the table's.
_H200_INT4_PAIRS_4096 = {"gate_up": GemvConfig(8, 1024, 8, load_ahead=True, f16_words=4),
                         "down": GemvConfig(8, 1024, 8, load_ahead=True, f16_words=2)}
# fp8's halves sum 4 words in f16 before float32 (f16_words; floor_limit.py --parts levers tune --quant fp8
# --tune-x-pairs fp8 --levers "fp8 pairs f16 words 2" "fp8 pairs f16 words 4", 2026-12-04, code b242a33,
# GPU-22babb70; results/benchmarks/floor_limit_fp8_words_h200.txt): at the earlier shapes 4 words ran the fp8
# steps of all three cards 1.007-1.034x, 2 words 1.011-1.018x; the tuner then chose 4 words at every role and
# width, below, which ran them 1.012-1.031x the earlier table (under ncu, gemv_stalls_fp8_{table,words}_h200.txt:
# Qwen-2.5-7B's qkv + gate_up + down 1.07x the read-only kernel, were 1.12x; gate_up 34.9 against 38.1 us).
# o then read the attention's output as halves too (the lever o_pairs, floor_limit.py --parts levers --quant fp8
# --levers "fp8 o pairs f16 words 1" "fp8 o pairs f16 words 4" "fp8 o pairs f16 words 4 qkv shape", 2026-12-04,
# code d06a704, GPU-205de29b; results/benchmarks/floor_limit_fp8_o_pairs_h200.txt): at the halves' qkv shape of
# each width with 4 words the fp8 steps of all three cards ran 1.014-1.026x at ctx 2048 and 16384; at fp8's o
# shape 1.003-1.021x (4 words) and 1.003-1.006x (1 word). o was the one fp8 GEMV left in the float32 loop, and
# the slowest against its read-only time (floor_limit_fp8_gap_h200.txt: 6.42 against 4.79 us for Qwen-2.5-7B).
_H200_O_PAIRS = {"fp8": True}
_H200_FP8_PAIRS = {role: GemvConfig(4, 2048, 4, f16_words=4) for role in ("qkv", "o", "gate_up", "down")}
_H200_FP8_PAIRS_4096 = {"qkv": GemvConfig(4, 1024, 4, f16_words=4), "o": GemvConfig(4, 1024, 4, f16_words=4),
                        "gate_up": GemvConfig(4, 2048, 4, f16_words=4), "down": GemvConfig(8, 2048, 8, f16_words=4)}
_H200_FP8 = {"qkv": (8, 512, 4), "o": (2, 2048, 4), "gate_up": (8, 512, 4), "down": (4, 1024, 4)}
_H200_INT4 = {"qkv": (4, 1024, 4, True), "o": (4, 2048, 4, True), "gate_up": (8, 512, 4), "down": (4, 2048, 4, True)}

# The separate combine spread over each head's columns, 32 a program (floor_limit.py --parts attention,
# 2026-12-03, code 0cf9af3, GPU-977b40ef; results/benchmarks/floor_limit_attention_cols_h200.txt): alone, the
# combine took 2.4-3.7 us a layer of the table's 6.4-23.6 (one program a query head, each reading every
# split's 128 columns); with 32 columns a program the attention ran 0.36-2.08 us a layer faster at every
# context but Qwen-2.5-7B's 2048 (0.32 us slower), and ahead of SDPA's best kernel in all eight cells
# (28/4 and 32/8 heads, ctx 2048-16384; 32/8 at 16384: 23.25 against cuDNN's 23.57 us). In whole steps
# (floor_limit_levers_cols{,2}_h200.txt, two machines) the steps ran 0.984-1.026x as fast as with the
# combine by head, faster in 11 of 18 on each: in 8-9 of the 9 at ctx 2048, 3-4 of the 9 at 16384.
_H200_ATTENTION = AttentionConfig(block_t=32, programs_per_sm=4, warps=4, stages=3, skip_empty=False, combine="separate",
                                  combine_cols=32)

_H200_BY_HIDDEN[4096]["int4_pairs"] = _gemv_table(_H200_INT4_PAIRS_4096)
_H200_BY_HIDDEN[4096]["fp8_pairs"] = _gemv_table(_H200_FP8_PAIRS_4096)

LAUNCH_SHAPES = {
    "h200": LaunchShapes(gemv={"dense": _gemv_table(_H200_DENSE), "fp8": _gemv_table(_H200_FP8), "int4": _gemv_table(_H200_INT4),
                               "int4_pairs": _gemv_table(_H200_INT4_PAIRS), "fp8_pairs": _gemv_table(_H200_FP8_PAIRS)},
                         attention=_H200_ATTENTION,
                         pdl=True, source="LAUNCH_SHAPES['h200']: tuned on the H200 2026-12-01/03 (benchmarks/floor_limit.py; norm apart, PDL with prefetch, x_fp32, int4 and fp8 x pairs, fp8 o pairs, load ahead, combine by 32 columns)",
                         gemv_by_hidden=_H200_BY_HIDDEN, norm=_H200_NORM, pdl_prefetch=_H200_PDL_PREFETCH, pdl_prefetch_per_sm=2,
                         x_fp32=_H200_X_FP32, x_pairs=_H200_X_PAIRS, load_ahead=_H200_LOAD_AHEAD, o_pairs=_H200_O_PAIRS),
    # any other GPU: the H200's GEMV shapes, and attention with masked (pipelinable) blocks of 64
    # positions at 4 programs per multiprocessor, the shape a memory-bound split should favour
    "default": LaunchShapes(gemv={"dense": _gemv_table(_H200_DENSE), "fp8": _gemv_table(_H200_FP8), "int4": _gemv_table(_H200_INT4)},
                            attention=AttentionConfig(block_t=64, programs_per_sm=4, warps=4, stages=2, skip_empty=False,
                                                      combine="separate"),
                            pdl=False, source="LAUNCH_SHAPES['default']: not measured on this GPU type",
                            gemv_by_hidden=_H200_BY_HIDDEN, norm=_H200_NORM),  # the fp8 and int4 shapes were tuned with it
}
# The CPU runs the kernels under Triton's interpreter (tests), where a program costs numpy calls, not
# bandwidth: few programs with large tiles keep it fast. Tests that want several programs and loop
# steps per kernel pass small shapes themselves.
_CPU = {"qkv": (64, 2048, 4), "o": (256, 2048, 4), "gate_up": (256, 2048, 4), "down": (256, 2048, 4), "lm_head": (256, 2048, 4)}
LAUNCH_SHAPES["cpu"] = LaunchShapes(gemv={fmt: _gemv_table(_CPU) for fmt in FORMATS}, attention=AttentionConfig(),
                                    source="LAUNCH_SHAPES['cpu']: Triton's interpreter (tests)")
GEMV_CONFIGS = _gemv_table(_H200_DENSE_PROGRAM)  # the bf16 roles' shapes, as earlier sessions recorded them


# The GPU type whose levers (PDL and its prefetch, x_fp32, the pair reads, ...) floor_limit.py measured one by
# one: a stage's refinement on another GPU type tries each in its own step (tune_step.lever_changes), since
# the default table has every lever off.
LEVERS_FROM = "h200"


def launch_shapes_for(gpu_key: str | None) -> LaunchShapes:
    """The table's entry for a GPU type (a key of config/gpus.yaml), or the default one."""
    return LAUNCH_SHAPES.get(gpu_key or "default", LAUNCH_SHAPES["default"])


def gpu_key_of(device) -> str | None:
    """The config/gpus.yaml key whose `device_name_match` the device's name contains (the longest
    match: "L40S" is not an "L4"); "cpu" on the CPU; None for a device the table does not know."""
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"  # config/gpus.yaml's stand-in for tests: the interpreter's shapes
    if device.type != "cuda":
        return None
    from decodegap.core.config import gpu_key_of_name

    return gpu_key_of_name(torch.cuda.get_device_name(device))


def sm_count_of(device) -> int:
    """Multiprocessors of a CUDA device; DEFAULT_SM_COUNT elsewhere (the CPU's interpreter)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return DEFAULT_SM_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


def _gemv_from_json(table: dict, where: str) -> dict:
    out = {}
    known = [f.name for f in dataclasses.fields(GemvConfig)]
    for role, shape in table.items():
        if role not in ROLES:
            raise ValueError(f"{where}: unknown role(s) {role}; roles are {', '.join(ROLES)}")
        if isinstance(shape, dict) and set(shape) - set(known):
            raise ValueError(f"{where}: role {role}: unknown key(s) {', '.join(sorted(set(shape) - set(known)))}; "
                             f"a GEMV shape has {', '.join(known)}")
        required = [f.name for f in dataclasses.fields(GemvConfig) if f.default is dataclasses.MISSING]
        if isinstance(shape, dict) and set(required) - set(shape):
            raise ValueError(f"{where}: role {role}: missing key(s) {', '.join(k for k in required if k not in shape)}; "
                             f"a GEMV shape needs {', '.join(required)}")
        if not isinstance(shape, (dict, GemvConfig)):
            raise ValueError(f"{where}: role {role}: a GEMV shape is a mapping of {', '.join(known)}, not {shape!r}")
        out[role] = shape if isinstance(shape, GemvConfig) else GemvConfig(**shape)
    return out


def resolve(spec, device, gpu_key: str | None = None) -> LaunchShapes:
    """The launch shapes a fused model runs with, from what it was given (`spec`):

      None                       the table's entry for the device's GPU type (or `gpu_key`)
      a LaunchShapes             as it is
      {role: shape}              the dense roles' shapes changed (the form of benchmarks'
                                 --gemv-configs files), shape a GemvConfig or its dict
      {"gemv": {format: {role: shape}}, "attention": {...}, "pdl": ..., "pdl_prefetch": ...}
                                 the form tune_launch_shapes returns (and LaunchShapes.as_dict),
                                 each part over the table's entry

    An unknown role, format or key is a ValueError that names it."""
    base = launch_shapes_for(gpu_key if gpu_key is not None else gpu_key_of(device))
    if spec is None:
        return base
    if isinstance(spec, LaunchShapes):
        return spec
    if not isinstance(spec, dict):
        raise ValueError(f"gemv_configs: a dict or LaunchShapes, not {type(spec).__name__}")
    if not spec.keys() & {"gemv", "attention", "pdl", "pdl_prefetch", "pdl_prefetch_per_sm", "x_fp32", "x_pairs", "o_pairs", "load_ahead", "l2_ahead", "l2_ahead_mib", "l2_ahead_at", "gemv_by_hidden", "norm"}:  # {role: shape}: dense overrides, for every width
        given = _gemv_from_json(spec, "gemv_configs")
        return base.replace(gemv={**base.gemv, "dense": {**base.gemv["dense"], **given}},
                            gemv_by_hidden=_without(base.gemv_by_hidden, {"dense": given}),
                            source=f"{base.source}; dense roles {', '.join(sorted(spec))} given")
    unknown = sorted(set(spec) - {"gemv", "gemv_by_hidden", "attention", "pdl", "pdl_prefetch", "pdl_prefetch_per_sm", "x_fp32", "x_pairs", "o_pairs", "load_ahead", "l2_ahead", "l2_ahead_mib", "l2_ahead_at", "norm", "source", "gpu", "device_name", "sm_count",
                                  "timings_us", "budget_s", "spent_s", "skipped"})
    if unknown:
        raise ValueError(f"gemv_configs: unknown key(s) {', '.join(unknown)}")
    gemv = {fmt: dict(roles) for fmt, roles in base.gemv.items()}
    for fmt, roles in (spec.get("gemv") or {}).items():
        _check_format(fmt, "gemv_configs['gemv']", READS)
        gemv.setdefault(fmt, {}).update(_gemv_from_json(roles, f"gemv_configs['gemv'][{fmt!r}]"))
    # a shape given for every width replaces the table's width-specific one (what is given is what runs)
    by_hidden = _without(base.gemv_by_hidden, spec.get("gemv") or {})
    for hidden, fmts in (spec.get("gemv_by_hidden") or {}).items():
        where = f"gemv_configs['gemv_by_hidden'][{hidden!r}]"
        if not str(hidden).isdigit():
            raise ValueError(f"{where}: a card's hidden size (a whole number), not {hidden!r}")
        own = by_hidden.setdefault(int(hidden), {})
        for fmt, roles in fmts.items():
            _check_format(fmt, where, READS)
            own[fmt] = {**own.get(fmt, {}), **_gemv_from_json(roles, f"{where}[{fmt!r}]")}
    attention = base.attention
    if spec.get("attention"):
        given = spec["attention"]
        attention = given if isinstance(given, AttentionConfig) else dataclasses.replace(base.attention, **given)
    norm = dict(base.norm)
    given = spec.get("norm", {})
    norm.update({fmt: given for fmt in FORMATS} if isinstance(given, str) else given)  # a string: every format's
    _check_norm(norm, "gemv_configs")
    prefetch = dict(base.pdl_prefetch)
    given = spec.get("pdl_prefetch", {})
    prefetch.update({fmt: given for fmt in FORMATS} if not isinstance(given, dict) else given)  # a number: every format's
    x_fp32 = dict(base.x_fp32)
    given = spec.get("x_fp32", {})
    x_fp32.update({fmt: given for fmt in FORMATS} if not isinstance(given, dict) else given)  # true or false: every format's
    x_pairs = dict(base.x_pairs)
    given = spec.get("x_pairs", {})
    x_pairs.update({"int4": given} if not isinstance(given, dict) else given)  # true or false alone: int4's (fp8's by {"fp8": ...})
    o_pairs = dict(base.o_pairs)
    given = spec.get("o_pairs", {})
    o_pairs.update({"fp8": given} if not isinstance(given, dict) else given)  # true or false alone: fp8's
    load_ahead = {**base.load_ahead, **spec.get("load_ahead", {})}  # a read given replaces the table's roles for it
    l2_ahead = dict(base.l2_ahead)
    given = spec.get("l2_ahead", {})
    if not isinstance(given, dict):
        raise ValueError(f"gemv_configs: l2_ahead must be {{format: L2 priority or null (off)}}, not {given!r}")
    l2_ahead.update(given)
    l2_ahead = {fmt: p for fmt, p in l2_ahead.items() if p is not None}
    l2_ahead_mib = dict(base.l2_ahead_mib)
    given = spec.get("l2_ahead_mib", {})
    l2_ahead_mib.update({fmt: given for fmt in FORMATS} if not isinstance(given, dict) else given)  # a number: every format's
    given = spec.get("pdl", base.pdl)
    if isinstance(given, dict):  # per format (true, false or widths), over the table's: a bool there is every format's
        pdl = {**base.pdl_by_format(), **given}
    elif isinstance(given, (bool, int)):
        pdl = bool(given)
    else:
        raise ValueError(f"gemv_configs: pdl must be true, false or {{format: true, false or [card widths]}}, not {given!r}")
    return LaunchShapes(gemv=gemv, attention=attention, pdl=pdl,
                        source=spec.get("source") or "given (tune_launch_shapes)", gemv_by_hidden=by_hidden, norm=norm,
                        pdl_prefetch=prefetch, x_fp32=x_fp32, x_pairs=x_pairs, load_ahead=load_ahead, o_pairs=o_pairs, l2_ahead=l2_ahead, l2_ahead_mib=l2_ahead_mib,
                        l2_ahead_at=spec.get("l2_ahead_at", base.l2_ahead_at),
                        pdl_prefetch_per_sm=spec.get("pdl_prefetch_per_sm", base.pdl_prefetch_per_sm))


def _without(by_hidden: dict, given: dict) -> dict:
    """`by_hidden` (width -> format -> role -> shape) less every format and role that `given` (format ->
    role -> shape) sets."""
    out = {}
    for hidden, fmts in by_hidden.items():
        kept = {fmt: {r: c for r, c in roles.items() if r not in given.get(fmt, {})} for fmt, roles in fmts.items()}
        kept = {fmt: roles for fmt, roles in kept.items() if roles}
        if kept:
            out[hidden] = kept
    return out
