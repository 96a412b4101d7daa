"""Choosing GEMV launch shapes in the whole step, one role at a time.

Why not tune.py's way alone: timed alone, a role's fastest shape is not its fastest in the step. On the
H200 the tuner's per-role choice ran the bf16 steps at 0.940x (Qwen-2.5-7B) and 0.978x (Llama-3.1-8B)
the table's speed (results/benchmarks/floor_limit_tune_again_h200.txt), while o and down shapes tried
as whole steps ran the 4096-wide cards 1.020-1.033x faster on two machines (floor_limit_o_down_*). In
the step a kernel overlaps the one before it (PDL), finds L2 as that one left it and shares the
machine with its tail, so each candidate here is timed as the whole captured step.

`refine_in_step(net, ctx)` walks the roles (down and o first: in bf16 they hold most of the GEMVs'
excess over a read, floor_limit_roles_h200.txt). For each role it times the current shape's
neighbours (`neighbours`: rows, block_k or both halved or doubled, 4 or 8 warps, x as a tile or not,
the shape's other fields kept: a pair read's f16_words, load_ahead) beside the current choice,
alternating the two so drift cancels; it takes the fastest when it beats the current by `min_gain`
and a second, fresh comparison agrees, and climbs again from there (at most `climbs` times a role).
The H200's o and down changes for the 4096-wide cards lie within such steps: o rows 1 -> 4 (two
doublings), down (1, 1024) -> (2, 512) (one). Given `candidates`, it tries those instead, once. It
returns the net's launch shapes with the choice, and a report: the trials, and the change as a
launch-shapes dict keyed by the card's width (a lever for floor_limit.py).

Given `levers_from` (a GPU type's table whose levers floor_limit.py measured: launch.LEVERS_FROM, the
H200's), it first times each lever that table has for the net's format and the start lacks, one at a
time and taken as a shape is: programmatic dependent launch with its prefetch, then the format's norm,
x_fp32, x_pairs, o_pairs and load_ahead (`lever_changes`). A stage on another GPU type starts from the
default table, where every lever is off: on an H100 SXM5 (2026-12-05) the fused steps ran without PDL
and without the pair reads, and a role's shape alone found nothing (every candidate within 0.6 %).
The levers LaunchShapes takes per format and card width (WIDTH_LEVERS: PDL, the pair reads, x_fp32) are
tried for the net's format and width and set for them alone, so each step decides them for itself; what
comes with one is wider where the start lacks it (PDL's prefetch is per format, the pair reads' norm
apart too), and such a change is not tried again where it would reach a step that declined it
(`reaches_other_widths`). Levers act together, so a lever declined before a later one was taken is
tried once more against the step with it, before the roles climb (H100, 2026-12-06: Qwen-2.5-7B's int4
step declined PDL at 0.986x before taking its pair reads).

On a CPU (Triton's interpreter) the steps are timed on the host: the mechanics, for tests, no GPU figure.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from decodegap.measure.fused_kernels.common import pdl_available
from decodegap.measure.fused_kernels.launch import GemvConfig, LaunchShapes, width_lever_on

ROLE_ORDER = ("down", "o", "qkv", "gate_up", "lm_head")  # the roles with the most excess over a read first


def step_timer(net, ctx: int, n_replays: int = 100):
    """A function giving the step's milliseconds with the net's current launch shapes: the step at
    position ctx (logits, then the argmax into the next token, as a session's step) captured as one
    CUDA graph and replayed `n_replays` times between CUDA events; on a CPU the eager step's host time."""
    device = net.device
    token = torch.zeros(1, dtype=torch.long, device=device)
    position = torch.full((1,), ctx, dtype=torch.long, device=device)

    def step():
        token.copy_(net.decode(token, position).argmax(-1))

    def timed() -> float:
        step()  # the kernels' JIT for these shapes, outside the timing
        if device.type != "cuda":
            t = time.perf_counter()
            step()
            return (time.perf_counter() - t) * 1e3
        from decodegap.measure.modes import capture_graph

        graph = capture_graph(step, 2)
        graph.replay()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n_replays):
            graph.replay()
        b.record()
        b.synchronize()
        del graph
        return a.elapsed_time(b) / n_replays

    return timed


def neighbours(shape: GemvConfig) -> list[GemvConfig]:
    """The shapes one step from `shape`: rows, block_k, or both (the same bytes a loop step, or twice or
    half as many) halved or doubled, warps 4 <-> 8, x_tile flipped; every other field kept. A shape a
    kernel refuses (int4 reads whole groups of 128 columns) comes back from the step as a trial's error."""
    out = []
    for dr, dk in ((2, 1), (0.5, 1), (1, 2), (1, 0.5), (2, 0.5), (0.5, 2), (2, 2), (0.5, 0.5)):
        rows, block_k = int(shape.rows * dr), int(shape.block_k * dk)
        if rows >= 1 and 16 <= block_k <= 16384 and (rows, block_k) != (shape.rows, shape.block_k):
            out.append(dataclasses.replace(shape, rows=rows, block_k=block_k))
    out.append(dataclasses.replace(shape, warps=8 if shape.warps == 4 else 4))
    out.append(dataclasses.replace(shape, x_tile=not shape.x_tile))
    return list(dict.fromkeys(out))


def with_role(shapes: LaunchShapes, hidden: int, read: str, role: str, shape: GemvConfig) -> LaunchShapes:
    """`shapes` with one role's shape set for this width and read (every other field as it was: the
    levers a net was built with stay, whatever the GPU's table says)."""
    by_hidden = {w: {f: dict(roles) for f, roles in fmts.items()} for w, fmts in shapes.gemv_by_hidden.items()}
    by_hidden.setdefault(hidden, {}).setdefault(read, {})[role] = shape
    return shapes.replace(gemv_by_hidden=by_hidden)


FORMAT_LEVERS = ("norm", "x_fp32", "x_pairs", "o_pairs", "load_ahead")  # per format (load_ahead: per read of it)
# the levers that LaunchShapes takes per format and card width (launch.width_lever_on: a list of widths)
WIDTH_LEVERS = ("pdl", "x_fp32", "x_pairs", "o_pairs")
# what a lever is inert without (launch.LaunchShapes.x_pairs_for, o_pairs_for): it comes with its lever
LEVER_NEEDS = {"x_pairs": ("norm",), "o_pairs": ("norm", "x_pairs")}


def _widened(value: dict, fmt: str, hidden: int) -> bool | list:
    """A width lever's setting for `fmt` with the card width `hidden` added (True, every width, stays)."""
    current = value.get(fmt, False)
    return True if current is True else sorted(set(current or []) | {hidden})


def reaches_other_widths(change: dict, start: LaunchShapes | None = None) -> bool:
    """Whether a lever's change (as `lever_changes` gives it) sets anything for more than the format's
    card widths it lists: a width lever given as true (or pdl as one bool) is every width's; the norm is
    the format's; the format's pdl_prefetch reaches the steps of the format that run under PDL, and
    pdl_prefetch_per_sm every step that does: none where `start` runs no such step (without `start`, all)."""
    for k, value in change.items():
        if k in WIDTH_LEVERS and isinstance(value, dict) and all(isinstance(v, list) for v in value.values()):
            continue
        if k == "pdl_prefetch" and start is not None and not any(start.pdl_by_format().get(fmt) for fmt in value):
            continue
        if k == "pdl_prefetch_per_sm" and start is not None and not start.pdl_anywhere():
            continue
        return True
    return False


def lever_changes(start: LaunchShapes, reference: LaunchShapes, fmt: str, device, hidden: int | None = None) -> tuple[list, list]:
    """The levers `reference` has for weights of format `fmt` ("dense", "fp8", "int4") that `start`
    lacks, as (name, {field: value for the format}) in the order to try them, and (name, why) for those
    the device cannot run. "pdl" brings the reference's prefetch for the format (where the start's
    differs), a pair lever the norm
    and x_pairs it needs (LEVER_NEEDS); a lever whose reads
    (int4_pairs, fp8_pairs) the start has no shapes for takes the reference's with it (`with_lever`).
    Given the card width `hidden`, a width lever (WIDTH_LEVERS) the reference has on for any width of
    the format is offered for this width alone (the start's widths kept), where the start lacks it there:
    one card's step then decides it for its own width, not for the other cards' (on the H100 2026-12-06
    Qwen-2.5-7B's fp8 step declined the pair reads that the 4096-wide cards had taken at 1.081x on another
    machine, and as one setting for the format they stayed off for those cards too). PDL is such a lever
    too, per format: on that H100 2026-12-06 Qwen-2.5-7B's bf16 step declined it at 0.992x, and as one
    setting for every step it stayed off for the int4 steps, which with it and its prefetch had run 1.013x
    faster on another machine."""
    mine = lambda d: {k: v for k, v in d.items() if k.split("_")[0] == fmt}  # noqa: E731 - a format's keys and its reads'
    out, refused = [], []
    prefetch = mine(reference.pdl_prefetch)
    with_prefetch = {"pdl_prefetch": prefetch} if prefetch and prefetch != mine(start.pdl_prefetch) else {}
    # the programs an SM that prefetch: one setting for every step, so the reference's comes only while no
    # step runs under PDL, where it reaches none
    if with_prefetch and reference.pdl_prefetch_per_sm != start.pdl_prefetch_per_sm and not start.pdl_anywhere():
        with_prefetch["pdl_prefetch_per_sm"] = reference.pdl_prefetch_per_sm
    if hidden is None:  # one setting for every step, as before the lever was per format and width
        wanted, has = reference.pdl_anywhere(), start.pdl_anywhere()
        pdl_change = {"pdl": True}
    else:
        wanted, has = bool(reference.pdl_by_format()[fmt]), start.pdl_for(fmt, hidden)
        pdl_change = {"pdl": {fmt: _widened(start.pdl_by_format(), fmt, hidden)}}
    if wanted and not has:
        why = pdl_available(device)
        if why:
            refused.append(("pdl", why))
        else:
            out.append(("pdl", {**pdl_change, **with_prefetch}))
    elif wanted and with_prefetch:
        out.append(("pdl_prefetch", with_prefetch))
    for name in FORMAT_LEVERS:
        if hidden is not None and name in WIDTH_LEVERS:
            # the reference has it on for some width (a list) or all (True); the start lacks it at this width
            if getattr(reference, name).get(fmt, False) and not width_lever_on(getattr(start, name), fmt, hidden):
                change = {}
                for k in LEVER_NEEDS.get(name, ()):
                    if k in WIDTH_LEVERS:
                        if not width_lever_on(getattr(start, k), fmt, hidden):
                            change[k] = {fmt: _widened(getattr(start, k), fmt, hidden)}
                    elif mine(getattr(reference, k)) and mine(getattr(reference, k)) != mine(getattr(start, k)):
                        change[k] = mine(getattr(reference, k))
                out.append((name, {**change, name: {fmt: _widened(getattr(start, name), fmt, hidden)}}))
            continue
        theirs, ours = mine(getattr(reference, name)), mine(getattr(start, name))
        if theirs and theirs != ours:
            needs = {k: mine(getattr(reference, k)) for k in LEVER_NEEDS.get(name, ()) if mine(getattr(reference, k))}
            out.append((name, {**needs, name: theirs}))
    return out, refused


def with_lever(shapes: LaunchShapes, change: dict, reference: LaunchShapes) -> LaunchShapes:
    """`shapes` with a lever of `lever_changes` on: dict fields merged key by key, and the reference's
    shapes for every read that `shapes` has none of (a pair read's own table comes with its lever)."""
    fields = {k: ({**(shapes.pdl_by_format() if k == "pdl" else getattr(shapes, k)), **v} if isinstance(v, dict) else v)
              for k, v in change.items()}
    new_reads = set(reference.gemv) - set(shapes.gemv) - {r for fm in shapes.gemv_by_hidden.values() for r in fm}
    if new_reads:
        fields["gemv"] = {**shapes.gemv, **{r: reference.gemv[r] for r in new_reads}}
        by_hidden = {w: dict(fm) for w, fm in shapes.gemv_by_hidden.items()}
        for w, fm in reference.gemv_by_hidden.items():
            for r in new_reads & set(fm):
                by_hidden.setdefault(w, {})[r] = fm[r]
        fields["gemv_by_hidden"] = by_hidden
    return shapes.replace(**fields)


def compare(net, time_ms, a, b, repeats: int) -> tuple[float, list, list]:
    """a's step time over b's (> 1: b is faster), the medians of `repeats` timings of each, in the order
    a b, b a, a b, ... so that a drift over the comparison favours neither."""
    ta, tb = [], []
    for i in range(repeats):
        for shapes, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            net.set_launch_shapes(shapes)
            out.append(time_ms())
    return statistics.median(ta) / statistics.median(tb), ta, tb


def refine_in_step(net, ctx: int, *, candidates: dict | None = None, roles=ROLE_ORDER, budget_s: float = 120.0,
                   min_gain: float = 0.005, repeats: int = 3, climbs: int = 3, n_replays: int = 100, time_ms=None,
                   levers_from: LaunchShapes | None = None, not_tried: dict | None = None,
                   log=print) -> tuple[LaunchShapes, dict]:
    """Each role's GEMV shape chosen in the whole step of `net` (a FusedModel on the Triton backend) at
    position ctx, starting from its current launch shapes. By default each role climbs from its shape
    through `neighbours`, at most `climbs` steps; `candidates` (read -> shapes, GemvConfig or tune.py's
    tuples, e.g. tune.GEMV_CANDIDATES) instead tries those, once, for every role that reads that way. A
    shape is taken when the step with it is at least 1 + min_gain times as fast as with the current one,
    twice: the comparison that found it and a fresh one. `time_ms`: the step timer (default step_timer).

    Returns (shapes, report): shapes, the net's LaunchShapes with the roles chosen here (keyed by the
    card's width; FusedModel and launch.resolve take it as it is); report, the trials (role, read, shape,
    ratio to the current choice, taken or not, or the error), what the budget skipped, the seconds spent,
    the start's and the end's step timed side by side, and `change`: the roles that differ from the
    start, as a launch-shapes dict over the GPU's table (a lever for floor_limit.py, exact when the net
    started from its GPU's table, as floor_limit's refine part builds it). `levers_from`: the table whose
    levers are tried first (module docstring), and a lever declined before a later one was taken is
    tried once more against the step with it, before the roles (a trial with `retry`); the report's
    `levers` names those taken. `not_tried`
    (lever name -> why) leaves levers out, each a trial with its reason (setup.refine_fused: a lever
    that another card's step did not take)."""
    t0 = time.perf_counter()
    start = net.shapes
    hidden, start_reads = net.embed.shape[1], dict(net.gemv_read)
    time_ms = time_ms or step_timer(net, ctx, n_replays)
    spec, trials, skipped, levers = start, [], [], {}  # levers: name -> its change, those taken
    changes, refused = lever_changes(start, levers_from, net.kernel_format or "dense", net.device, hidden) if levers_from else ([], [])
    for name, why in refused:
        trials.append({"lever": name, "error": why})
        log(f"refine lever {name}: {why}")
    def try_lever(name, change, retry=False):
        """The step with the lever on against the current spec, taken when faster by the margin twice;
        None when the kernels or the GPU refuse it (a result, not a stop)."""
        nonlocal spec
        mark = {"retry": True} if retry else {}
        trial = with_lever(spec, change, levers_from)
        try:
            ratio, _, _ = compare(net, time_ms, spec, trial, repeats)
            if ratio >= 1 + min_gain:
                again, _, _ = compare(net, time_ms, spec, trial, repeats)
        except Exception as exc:  # noqa: BLE001 - a lever the kernels or the GPU refuse is a result, not a stop
            trials.append({"lever": name, "error": _first_line(exc), **mark})
            log(f"refine lever {name}: {_first_line(exc)[:120]}")
            return None
        taken = ratio >= 1 + min_gain and again >= 1 + min_gain
        trials.append({"lever": name, "change": change, "x_current": ratio, **({"again": again} if ratio >= 1 + min_gain else {}),
                       "taken": taken, **mark})
        log(f"refine lever {name}{' again, after the later levers' if retry else ''}: {ratio:.3f}x the current step"
            + (f", again {again:.3f}x" if ratio >= 1 + min_gain else "") + (": taken" if taken else ": not taken"))
        if taken:
            spec = trial
            levers[name] = change
        return taken

    declined = []  # (name, change, the spec it was declined against): tried once more if a later lever changed it
    for name, change in changes:
        if name in (not_tried or {}) and reaches_other_widths(change, spec):  # one for this width alone reaches no other step
            trials.append({"lever": name, "not_tried": not_tried[name]})
            log(f"refine lever {name}: not tried ({not_tried[name]})")
            continue
        if time.perf_counter() - t0 > budget_s:
            skipped.append(f"lever {name}")
            continue
        if try_lever(name, change) is False:
            declined.append((name, change, spec))
    # levers act together: one declined before a later lever was taken is tried once more against the step
    # with it (H100, 2026-12-06: Qwen-2.5-7B's int4 step declined PDL at 0.986x before it took its pair
    # reads, while earlier code's sessions ran that step 3-5 % faster with PDL). Here, before the roles
    # climb, since their climb spends what is left of the budget; not where the lever's whole change has
    # since come with another (the norm with x_pairs): that would time the step against itself
    for name, change, declined_on in declined:
        if spec is declined_on or with_lever(spec, change, levers_from) == spec:
            continue
        if time.perf_counter() - t0 > budget_s:
            skipped.append(f"lever {name} again")
            continue
        try_lever(name, change, retry=True)
    net.set_launch_shapes(spec)  # a lever taken may change the roles' reads (x_pairs)
    reads = dict(net.gemv_read)
    for role in roles:
        read, tried = reads[role], set()
        for _ in range(1 if candidates is not None else climbs):
            current = spec.gemv_for(read, role, hidden)
            tried.add(current)
            shapes = ([c if isinstance(c, GemvConfig) else GemvConfig(*c) for c in candidates.get(read, [])]
                      if candidates is not None else neighbours(current))
            best, best_ratio = None, 0.0  # the fastest candidate, taken below only past the margin
            for shape in shapes:
                if shape in tried:
                    continue
                tried.add(shape)
                if time.perf_counter() - t0 > budget_s:
                    skipped.append(f"{role} {shape.as_dict()}")
                    continue
                trial = with_role(spec, hidden, read, role, shape)
                try:
                    ratio, _, _ = compare(net, time_ms, spec, trial, repeats)
                except Exception as exc:  # noqa: BLE001 - a shape the kernel or the GPU refuses is a result, not a stop
                    trials.append({"role": role, "read": read, "shape": shape.as_dict(), "error": _first_line(exc)})
                    log(f"refine {role} ({read}) {shape.as_dict()}: {_first_line(exc)[:120]}")
                    continue
                trials.append({"role": role, "read": read, "shape": shape.as_dict(), "x_current": ratio})
                log(f"refine {role} ({read}) {shape.as_dict()}: {ratio:.3f}x the current step")
                if ratio > best_ratio:
                    best, best_ratio = shape, ratio
            if best is None or best_ratio < 1 + min_gain:
                break  # no neighbour beats the current: this role is done
            trial = with_role(spec, hidden, read, role, best)
            try:
                again, _, _ = compare(net, time_ms, spec, trial, repeats)
            except Exception as exc:  # noqa: BLE001 - a failure in the confirmation: the current shape stays
                trials.append({"role": role, "read": read, "shape": best.as_dict(), "confirm": True, "taken": False,
                               "error": _first_line(exc)})
                break
            taken = again >= 1 + min_gain
            trials.append({"role": role, "read": read, "shape": best.as_dict(), "x_current": again, "confirm": True, "taken": taken})
            log(f"refine {role} ({read}): {best.as_dict()} {best_ratio:.3f}x, again {again:.3f}x: {'taken' if taken else 'kept the current'}")
            if not taken:
                break
            spec = trial
    end_ratio, start_ms, end_ms = 1.0, [], []
    if spec is not start:
        try:
            end_ratio, start_ms, end_ms = compare(net, time_ms, start, spec, repeats)
        except Exception as exc:  # noqa: BLE001 - the choice stands; its side-by-side figure is missing
            end_ratio = None
            trials.append({"final": True, "error": _first_line(exc)})
    net.set_launch_shapes(spec)
    chosen = {role: spec.gemv_for(reads[role], role, hidden).as_dict() for role in roles}
    # the roles that changed, as a launch-shapes change of their own: a lever (floor_limit.py --levers) to
    # confirm the choice on another machine, or a line of a GPU type's table
    change = {}
    for role in roles:
        if reads[role] != start_reads[role] or spec.gemv_for(reads[role], role, hidden) != start.gemv_for(reads[role], role, hidden):
            change.setdefault(str(hidden), {}).setdefault(reads[role], {})[role] = chosen[role]
    change = {"gemv_by_hidden": change} if change else {}
    for lever in levers.values():  # each lever taken, as the launch-shapes dict names its fields
        change.update(lever)
    report = {"hidden": hidden, "reads": reads, "chosen": chosen, "change": change, "levers": list(levers),
              "trials": trials, "skipped": skipped,
              "spent_s": time.perf_counter() - t0, "budget_s": budget_s, "min_gain": min_gain, "repeats": repeats,
              "x_start": end_ratio, "start_ms": start_ms, "end_ms": end_ms}
    log(f"refine: the chosen shapes ran the step {end_ratio:.3f}x the start's speed ({report['spent_s']:.0f} s)" if end_ratio
        else f"refine: the start and the choice could not be timed side by side ({report['spent_s']:.0f} s)")
    return spec, report


def declined_levers(report: dict) -> dict:
    """lever name -> its last timing (x the current step) for each lever a refine_in_step report timed and
    left off: a lever declined first and taken when tried again is not among them."""
    last = {t["lever"]: t["x_current"] for t in report["trials"] if "lever" in t and "x_current" in t}
    return {lever: ratio for lever, ratio in last.items() if lever not in report["levers"]}


def _first_line(exc) -> str:
    """An exception's first line (its type where it has no message), short enough for a trial's record."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
