"""The report's artifacts, one registry: each table and figure by name, with the cells whose
statistics it reads, whether it reads the paper's published numbers or the environment records,
its caption (said once: the paper's document, `snakemake --report` and README all take it from
here) and how it is drawn.

The workflow renders every table with one wildcard rule and every figure with another
(workflow/rules/artifacts.smk); an unknown name is an error, never a fallback. Adding a table is one
entry here, its function (tables.py) and its template; a figure, one entry and its function
(figures.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from decodegap.core.errors import ConfigError

# The cells an artifact reads, by the name of a set the Plan knows (decodegap.core.cells.Plan.cell_set).
CELL_SETS = ("matrix", "ab", "matrix+ab", "attention", "quantization", "floor", "engines", "headline", "anatomy", "none")


@dataclass(frozen=True)
class Job:
    """What one artifact's rule hands its function: the statistics files of its cells, the tables
    the workflow binds (GPUs, models), its configured cells, the paper's figures, the environment
    records, the headline cell, and its outputs (tex and numbers for a table, pdf and png for a figure)."""

    stats: list = field(default_factory=list)
    gpus: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    cells: list = field(default_factory=list)
    reference: list = field(default_factory=list)
    records: list = field(default_factory=list)
    headline: dict = field(default_factory=dict)
    gpu: str | None = None  # a per-GPU artifact's GPU (matrix_<gpu>)
    out: tuple = ()


@dataclass(frozen=True)
class Artifact:
    name: str
    kind: str  # table or figure
    cells: str  # one of CELL_SETS
    caption: str
    draw: Callable[[Job], None]
    reference: bool = False  # reads config/reference/paper.yaml
    records: bool = False  # reads the environment records
    per_gpu: bool = False  # one per GPU with cells: <name>_<gpu>


def _tables():
    from decodegap.analysis import tables as t

    return t


def _figures():
    from decodegap.analysis import figures as f

    return f


TABLES = [
    Artifact("matrix", "table", "matrix", per_gpu=True, caption=(
        "One GPU's cell matrix: median ms/step of the completed sessions with a 95 % interval over machines, R_floor and "
        "tokens/s per model, context and mode; HN beside each op-by-op cell. The notes say what each cell rests on "
        "(sessions, machines, the stability rule)."),
        draw=lambda j: _tables().matrix_table(j.gpu, j.stats, j.cells, j.gpus[j.gpu], j.models, *j.out)),
    Artifact("ab", "table", "ab", reference=True, caption=(
        "A/B experiments: arm medians and the speedup (geometric mean of per-session ratios) with its 95 % interval over "
        "machines, over completed sessions, sessions within the stability rule, and host-nominal steps; published rows beside."),
        draw=lambda j: _tables().ab_table(j.stats, j.reference, j.gpus, j.models, *j.out)),
    Artifact("sensitivity", "table", "matrix+ab", caption=(
        "Sensitivity of the headline numbers: every A/B speedup estimator (geometric mean of per-session ratios, the "
        "headline; mean and median of the ratios; ratio of pooled medians) with its interval over machines, and each "
        "estimate as the stability rule's limit and the host-nominal factor move."),
        draw=lambda j: _tables().sensitivity_table(j.stats, j.gpus, j.models, j.headline, *j.out)),
    Artifact("variance", "table", "matrix+ab", caption=(
        "Variance components of every cell with two or more completed sessions: machine, session and step standard "
        "deviations in % of the median (one-way random-effects ANOVA of session medians on the machine, GPU UUID and host boot)."),
        draw=lambda j: _tables().variance_table(j.stats, j.gpus, j.models, *j.out)),
    Artifact("floors", "table", "matrix+ab", caption=(
        "R in three forms for every measured cell: against the datasheet bandwidth with all weights (the paper's), "
        "without the input embedding table, and against the copy ceiling measured in the session."),
        draw=lambda j: _tables().floors_table(j.stats, j.gpus, j.models, *j.out)),
    Artifact("anatomy", "table", "matrix+ab", caption=(
        "The anatomy of a decode step per GPU, model and context: the datasheet floor, kernel inefficiency (GPU busy time "
        "from an untimed profiler pass minus the floor), graph gaps, launch tax (static minus graphed) and cache and "
        "framework cost (eager minus static), which add up to the eager step; the copy ceiling beside the floor."),
        draw=lambda j: _tables().anatomy_table(j.stats, j.gpus, j.models, *j.out)),
    Artifact("host", "table", "matrix+ab", reference=True, caption=(
        "Host speed as a measured axis: the per-launch host cost of every op-by-op arm against the host CPU probe, the "
        "core speed at which the op-by-op step would stop being host-bound, and what the paper's H100 eager step implies."),
        draw=lambda j: _tables().host_table(j.stats, j.reference, j.gpus, j.models, *j.out)),
    Artifact("model", "table", "matrix+ab", caption=(
        "A predictive model of step time per GPU (bytes over bandwidth, kernels times per-kernel device cost, launches "
        "times per-launch host cost), its coefficients, and its error in sample and on held-out contexts and model cards."),
        draw=lambda j: _tables().model_table(j.stats, j.gpus, j.models, *j.out)),
    Artifact("cost", "table", "matrix+ab", reference=True, caption=(
        "Cost per token at batch 1 (dollars per million tokens) of every measured cell (completed sessions) on a GPU with "
        "a price on file, the paper's published step times at the same prices, and the paper's cost claim checked from "
        "its own step times."),
        draw=lambda j: _tables().cost_table(j.stats, j.reference, j.gpus, j.models, *j.out)),
    Artifact("published", "table", "matrix+ab", reference=True, caption=(
        "The paper's published figures next to the value reproduced for the same cell (completed sessions), with their "
        "ratio; where a cell is empty, why."),
        draw=lambda j: _tables().published_table(j.stats, j.reference, j.gpus, j.models, *j.out)),
    Artifact("environment", "table", "none", records=True, caption=(
        "The environment stage of each GPU type (its newest record under results/environment/): versions, and for every "
        "configured attention and weight path whether its kernel runs at decode shape there, or why not."),
        draw=lambda j: _tables().environment_table(j.records, j.gpus, *j.out)),
    Artifact("attention", "table", "attention", reference=True, caption=(
        "Attention paths at batch 1: microseconds per layer for one decode-shaped attention call (one query token, the "
        "card's head layout, KV of ctx tokens), launched op by op and replayed from a CUDA graph, with the launch share, "
        "the kernel that really ran and the paper's H100 figure; a path that cannot run here has its reason."),
        draw=lambda j: _tables().attention_table(j.stats, j.cells, j.reference, j.gpus, j.models, *j.out)),
    Artifact("attention_step", "table", "attention", caption=(
        "The whole decode step with each attention path inside the model: static and graphed ms per step (both arms of "
        "each session) and the launch tax between them."),
        draw=lambda j: _tables().attention_step_table(j.stats, j.cells, j.gpus, j.models, *j.out)),
    Artifact("quantization", "table", "quantization", reference=True, caption=(
        "The weight-path matrix: ms per step per weight path (static and graphed), the bytes each stores, the graphed "
        "speedup over bf16 beside the ideal speedup (W_bf16 + K)/(W_q + K), and the paper's L4 figures."),
        draw=lambda j: _tables().quantization_table(j.stats, j.cells, j.reference, j.gpus, j.models, *j.out)),
    Artifact("floor", "table", "floor", caption=(
        "Beyond the paper: the graphed transformers step, the same step compiled (torch.compile, one CUDA graph) and "
        "decodegap's fused step (Triton kernels, one CUDA graph), per weight path: ms per step, R_floor, kernels and GPU "
        "busy time per step, compile seconds, the paired speedup over the session's graphed arm and the speedup over the "
        "bf16 graphed step."),
        draw=lambda j: _tables().floor_table(j.stats, j.cells, j.gpus, j.models, *j.out)),
    Artifact("gap", "table", "floor", caption=(
        "Where the fused step's time goes, per cell: its GEMVs and attention beside the same bytes at the device copy bandwidth "
        "measured in the same sessions, the other kernels, and the step outside the GPU's busy time (the sessions' untimed "
        "profiler pass)."),
        draw=lambda j: _tables().gap_table(j.stats, j.cells, j.gpus, j.models, *j.out)),
    Artifact("engines", "table", "engines", caption=(
        "Engines at batch 1: transformers' graphed step, its own generate loop with a static cache, the step under "
        "torch.compile and decodegap's fused step per weight path, on the same cells: ms per step with the interval over "
        "machines, R_floor and the bytes streamed per second."),
        draw=lambda j: _tables().engines_table(j.stats, j.cells, j.gpus, j.models, *j.out)),
]

FIGURES = [
    Artifact("ladder", "figure", "headline", reference=True, caption=(
        "The inverted ladder: fraction of the analytic memory floor reached, against datasheet bandwidth, one colour and marker per decode mode (the fused step of each 8- and 4-bit weight path: the fused colour, the path's marker; filled: measured, a cross beside it: one machine, no interval; hollow: published)."),
        draw=lambda j: _figures().ladder(j.stats, j.reference, j.gpus, j.headline["headline_model"], j.headline["headline_ctx"], j.out)),
    Artifact("context", "figure", "matrix", caption=(
        "Step time against context length per GPU and model, one colour per decode mode (median of completed sessions and 95 % interval over machines; an interval wider than the axis ends in an arrowhead at its edge, its ends in the matrix tables; a cross beside a point: one machine or session, no interval)."),
        draw=lambda j: _figures().context(j.stats, j.gpus, j.models, j.out)),
    Artifact("ab", "figure", "ab", reference=True, caption=(
        "A/B experiments: speedup of arm B over arm A (geometric mean of per-session ratios) with its 95 % interval over machines, per cell and scope: completed sessions, the stability rule, host-nominal steps (colour and marker: arm A's mode; hollow: published; a cross beside a point: no interval)."),
        draw=lambda j: _figures().ab(j.stats, j.reference, j.gpus, j.models, j.out)),
    Artifact("host", "figure", "ab", caption=(
        "Host speed against step time, one panel per A/B cell: each point is one block of an A/B session, its median ms/step against the host core's speed beside it (the CPU probe around its steps; higher: slower core). The launch-bound op-by-op arms (eager, static) follow the host; the graphed arm does not."),
        draw=lambda j: _figures().host(j.stats, j.gpus, j.models, j.out)),
    Artifact("anatomy", "figure", "anatomy", caption=(
        "The anatomy of a decode step: floor, kernel inefficiency, graph gaps, launch tax and cache and framework cost, stacked to the eager step (ticks in the modes' colours: the graphed step, solid; the compiled and fused steps, dashed and dotted; markers on a bar: the fused step with each 8- and 4-bit weight path)."),
        draw=lambda j: _figures().anatomy(j.stats, j.gpus, j.models, j.out)),
    Artifact("deployment", "figure", "matrix+ab", reference=True, caption=(
        "Latency against cost per token at batch 1, one point per GPU, mode and weight path (colour: decode mode, grey where the paper does not state it; marker: weight path; filled: measured; hollow: the paper's published step times at the same prices; grey lines: each GPU's price)."),
        draw=lambda j: _figures().deployment(j.stats, j.reference, j.gpus, j.out)),
    Artifact("attention", "figure", "attention", reference=True, caption=(
        "Attention paths at batch 1: microseconds per layer for one decode-shaped call against the KV length, per head layout, one colour and marker per path; filled and solid: replayed from a CUDA graph (kernel time), hollow and dashed: launched op by op (the larger of launch cost and kernel time); stars, in a column of their own: the paper's H100 figures (context not stated)."),
        draw=lambda j: _figures().attention(j.stats, j.reference, j.gpus, j.models, j.out)),
    Artifact("quantization", "figure", "quantization", caption=(
        "Weight paths at batch 1: the graphed step's speedup over bf16, one colour per path and a group of bars per cell, against the ideal speedup if the step were its memory traffic, (W_bf16 + K)/(W_q + K) (black ticks)."),
        draw=lambda j: _figures().quantization(j.stats, j.gpus, j.models, j.out)),
    Artifact("engines", "figure", "engines", caption=(
        "Engines at batch 1: ms per step of each way of running the decode step on the same cells (colour and marker: the "
        "mode; the fused step's 8- and 4-bit weight paths: the fused colour with the path's marker), median of completed "
        "sessions with its 95 % interval over machines (a cross beside a point: one machine, no interval), against the bf16 "
        "memory floor (dashed); an engine planned but not measured is named with no point."),
        draw=lambda j: _figures().engines(j.stats, j.cells, j.gpus, j.models, j.out)),
]

REGISTRY = {("table", a.name): a for a in TABLES} | {("figure", a.name): a for a in FIGURES}
assert all(a.cells in CELL_SETS for a in REGISTRY.values())


def get(kind: str, name: str) -> tuple[Artifact, str | None]:
    """The artifact a rendered name stands for, and its GPU for a per-GPU one (matrix_h200 ->
    (matrix, h200)); an unknown name is a ConfigError listing the known ones."""
    if (kind, name) in REGISTRY and not REGISTRY[(kind, name)].per_gpu:
        return REGISTRY[(kind, name)], None
    for (k, base), artifact in REGISTRY.items():
        if k == kind and artifact.per_gpu and name.startswith(base + "_") and len(name) > len(base) + 1:
            return artifact, name[len(base) + 1:]
    known = ", ".join(sorted(a.name + ("_<gpu>" if a.per_gpu else "") for (k, _), a in REGISTRY.items() if k == kind))
    raise ConfigError(f"unknown {kind} '{name}' (known: {known})")


def render(kind: str, name: str, job: Job) -> None:
    artifact, gpu = get(kind, name)
    artifact.draw(Job(**{**job.__dict__, "gpu": gpu}) if gpu is not None else job)
