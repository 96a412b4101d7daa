# Helpers and target lists. The logic lives in scripts/decodegap/core/cells.py (tested) and every
# path in scripts/decodegap/core/paths.py; this file binds them to Snakemake: config validation at
# parse time, input functions, the measurement's arguments.

import errno
import json
import os
import shlex
import sys
from pathlib import Path

# The package is imported one way: through its one path entry, scripts/ (what `pip install -e .`
# puts on the path too). Snakemake itself, every rule script and every job (here, or on a cluster
# node in its conda environment) find it through PYTHONPATH, set here and nowhere else.
SCRIPTS_DIR = str(Path(workflow.basedir) / "scripts")
os.environ.update(  # set, not read: no envvars directive needed
    PYTHONPATH=os.pathsep.join(
        p for p in (SCRIPTS_DIR, os.environ.get("PYTHONPATH")) if p
    )
)
sys.path.insert(0, SCRIPTS_DIR)

from decodegap.analysis import artifacts
from decodegap.core import paths
from decodegap.core.errors import DecodegapError
from decodegap.core.cells import Plan

try:
    PLAN = Plan(config)  # validates config against workflow/schemas/config.schema.yaml
except DecodegapError as exc:
    raise WorkflowError(str(exc)) from None
config = PLAN.config  # with schema defaults filled in


wildcard_constraints:
    **paths.WILDCARD_CONSTRAINTS,


def repo_path(rel):
    """A file of this repository, relative to the working directory (which may be elsewhere)."""
    return os.path.relpath(Path(workflow.basedir) / rel)


ANALYSIS_ENV = "../../envs/analysis.yaml"
MEASURE_ENV = "../../envs/measure.yaml"
REFERENCE = repo_path("config/reference/paper.yaml")
MODELS_YAML = repo_path("config/models.yaml")
GPUS_YAML = repo_path("config/gpus.yaml")
GPU_TABLE = {k: vars(v) for k, v in PLAN.gpus.items()}
MODEL_TABLE = {
    k: {
        "display_name": m.display_name,
        # the attention layout, for the attention tables
        "architecture": {
            f: m.architecture.get(f)
            for f in (
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "hidden_size",
            )
        },
    }
    for k, m in PLAN.models.items()
}
# The analysis code (the core and the analysis wing): an input of every analysis rule, so that
# editing it reruns the analysis (never a measurement: the measure rule has no inputs at all).
ANALYSIS_CODE = sorted(
    repo_path(p.relative_to(workflow.basedir))
    for pattern in (
        "scripts/decodegap/*.py",
        "scripts/decodegap/core/*.py",
        "scripts/decodegap/analysis/*.py",
        "scripts/decodegap/analysis/templates/*.j2",
    )
    for p in Path(workflow.basedir).glob(pattern)
)


def group_of(wildcards):
    return paths.GROUP.format(
        gpu=wildcards.gpu, model=wildcards.model, ctx=wildcards.ctx
    )


def group_raw_files(wildcards):
    return [f for c in PLAN.group_cells(group_of(wildcards)) for f in PLAN.raw_files(c)]


def group_receipts(wildcards):
    return [r for c in PLAN.group_cells(group_of(wildcards)) for r in PLAN.receipts(c)]


def group_params(wildcards):
    """Each cell of the group: its keys, its recorded sessions, its measurement receipts."""
    return [
        {"keys": c.keys, "raw": PLAN.raw_files(c), "receipts": PLAN.receipts(c)}
        for c in PLAN.group_cells(group_of(wildcards))
    ]


# The report's artifacts (decodegap.analysis.artifacts): every table (one per GPU with matrix cells
# for a per-GPU one) and every figure, with the figures' captions for report/paper_tables.tex.
def _artifact_names(kind):
    out = []
    for a in artifacts.TABLES if kind == "table" else artifacts.FIGURES:
        if a.per_gpu:
            gpus = PLAN.config["matrix"]["gpus"]
            out += [
                f"{a.name}_{g}"
                for g in gpus
                if PLAN.analysed(PLAN.cell_set(a.cells, g))
            ]
        else:
            out.append(a.name)
    return out


TABLE_NAMES = _artifact_names("table")
FIGURE_NAMES = _artifact_names("figure")
TABLE_FILES = [paths.table_tex(n) for n in TABLE_NAMES]
FIGURE_FILES = [f for n in FIGURE_NAMES for f in paths.figure(n)]
FIGURE_LIST = [
    {
        "name": n,
        "path": paths.figure(n)[0],
        "caption": artifacts.get("figure", n)[0].caption,
    }
    for n in FIGURE_NAMES
]


wildcard_constraints:
    table="|".join(TABLE_NAMES) or "(?!)",
    figure="|".join(FIGURE_NAMES) or "(?!)",


# Every analysis job's folders of Parquet tables: what aggregate_all gathers.
PLAN_GROUP_CELL_DIRS = [
    paths.GROUP_CELLS.format(**cells[0].keys) for cells in PLAN.groups().values()
]
GROUP_STATS_DIRS = [
    paths.GROUP_STATS.format(**cells[0].keys) for cells in PLAN.groups().values()
]


def _artifact(kind, wildcards):
    return artifacts.get(kind, getattr(wildcards, kind))


def artifact_stats(kind):
    """The statistics files an artifact reads (those of its cell set that have data)."""

    def stats(wildcards):
        artifact, gpu = _artifact(kind, wildcards)
        return PLAN.artifact_stats(artifact.cells, gpu)

    return stats


def artifact_cells(kind):
    """An artifact's configured cells (a table lists every configured cell, measured or not)."""

    def cells(wildcards):
        artifact, gpu = _artifact(kind, wildcards)
        return [c.keys for c in PLAN.cell_set(artifact.cells, gpu)]

    return cells


def artifact_caption(kind):
    return lambda wildcards: _artifact(kind, wildcards)[0].caption


def artifact_inputs(kind):
    """The analysis code, the group folders holding the artifact's statistics, and the paper's
    figures or the environment records where it reads them."""

    def inputs(wildcards):
        artifact, gpu = _artifact(kind, wildcards)
        out = {
            "code": ANALYSIS_CODE,
            "stats": sorted(
                {paths.group_of(f) for f in PLAN.artifact_stats(artifact.cells, gpu)}
            ),
        }
        if artifact.reference:
            out["reference"] = REFERENCE
        if artifact.records:
            out["records"] = PLAN.environment_records()
        return out

    return inputs


def measure_raw_path(wildcards):
    """Where the measure command writes the session (its own exclusive create; no rule outputs it)."""
    return paths.raw_of_receipt(paths.MEASURE_RECEIPT.format(**wildcards))


def cell_gpu_spec(wildcards):
    return GPU_TABLE[wildcards.gpu]


def measure_args(wildcards):
    """Protocol flags and the GPU's merged spec (user overrides included) for the measurement."""
    protocol = " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in config["protocol"].items()
    )
    spec = shlex.quote(json.dumps(GPU_TABLE[wildcards.gpu]))
    return f"{protocol} --gpus {GPUS_YAML} --models {MODELS_YAML} --gpu-spec {spec}"


def environment_args(wildcards):
    """The GPU type's merged spec (user overrides included), as every session of it gets."""
    spec = shlex.quote(json.dumps(GPU_TABLE[wildcards.gpu]))
    return f"--gpus {GPUS_YAML} --gpu-spec {spec}"


def gpu_resource(wildcards, field, default=None):
    """SLURM request for the GPU a cell names (config/gpus.yaml `slurm:` block)."""
    return PLAN.gpus[wildcards.gpu].slurm.get(field) or default


def measure_gpu_model(wildcards):
    return gpu_resource(wildcards, "gpu_model")


def measure_runtime(wildcards):
    return gpu_resource(wildcards, "runtime_min", 30)


def measure_mem_mb(wildcards):
    return gpu_resource(wildcards, "mem_mb", 64000)


def measure_cpus(wildcards):
    return gpu_resource(wildcards, "cpus_per_task", 1)


def measure_partition(wildcards):
    return gpu_resource(
        wildcards, "partition", ""
    )  # "": the cluster's default partition


def measure_constraint(wildcards):
    return gpu_resource(wildcards, "constraint")  # None: no -C flag


def environment_of_gpu(wildcards):
    """The GPU type's newest environment record (data, no rule's output), or, before its first
    stage, the receipt of the stage that will write one."""
    return PLAN.environment_of(wildcards.gpu) or paths.ENVIRONMENT_RECEIPT.format(
        gpu=wildcards.gpu
    )


def ruled_out(wildcards, input):
    """Why the GPU type's environment record rules this cell out (None: it runs). Read when the job
    is about to be submitted, once the environment stage has written the record."""
    from decodegap.measure.setup import read_record, ruled_out as reason

    # not written yet (a dry run): Snakemake asks again just before it submits the job
    if not os.path.exists(input.env):
        raise FileNotFoundError(errno.ENOENT, "not written yet", input.env)
    return reason(
        read_record(input.env),
        wildcards.attn,
        wildcards.quant,
        wildcards.mode,
        PLAN.models[wildcards.model].attention_layout,
    )


def measure_gpus(wildcards, input):
    return 0 if ruled_out(wildcards, input) else 1
