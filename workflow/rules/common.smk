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
# What defines a GPU type's environment stage besides its pinned packages: the stage and the path
# registries it checks (an input of the environment rule; the analysis code is not).
ENVIRONMENT_CODE = sorted(
    repo_path(p.relative_to(workflow.basedir))
    for pattern in (
        "scripts/decodegap/measure/setup.py",
        "scripts/decodegap/measure/environment.py",
        "scripts/decodegap/measure/attention/*.py",
        "scripts/decodegap/measure/weights/*.py",
    )
    for p in Path(workflow.basedir).glob(pattern)
)
FIGURE_CAPTIONS = {
    "ladder": "The inverted ladder: fraction of the analytic memory floor reached, against datasheet bandwidth (filled: measured; hollow: published).",
    "context": "Step time against context length per GPU, model and decode mode (median of completed sessions and 95 % interval over machines; crosses: one machine or session, no interval).",
    "ab": "A/B experiments: speedup of arm B over arm A (geometric mean of per-session ratios) with its 95 % interval over machines, per scope: completed sessions, the stability rule, host-nominal steps (hollow: published).",
    "anatomy": "The anatomy of a decode step: floor, kernel inefficiency, graph gaps, launch tax and cache and framework cost, stacked to the eager step (the black tick: the graphed step).",
    "deployment": "Latency against cost per token at batch 1, one point per GPU, mode and weight path (filled: measured; hollow: the paper's published step times at the same prices).",
    "attention": "Attention paths at batch 1: microseconds per layer for one decode-shaped call against the KV length, per head layout; filled: replayed from a CUDA graph (kernel time), hollow and dashed: launched op by op (the larger of launch cost and kernel time); stars: the paper's H100 figures (context not stated).",
    "quantization": "Weight paths at batch 1: the graphed step's speedup over bf16 per path and cell (bars) against the ideal speedup if the step were its memory traffic, (W_bf16 + K)/(W_q + K) (black ticks).",
    "host": "Host speed against step time: each point is one block of an A/B session, its median ms/step against the host core's speed beside it (the CPU probe around its steps; higher: slower core). The launch-bound eager arm follows the host; the graphed arm does not.",
}
FIGURE_LIST = [
    {"name": n, "path": pdf, "caption": FIGURE_CAPTIONS[n]}
    for n, (pdf, _png) in PLAN.figures().items()
]


def cell_raw_files(wildcards):
    return PLAN.raw_files(PLAN.cell_from_wildcards(wildcards))


def cell_receipts(wildcards):
    return PLAN.receipts(PLAN.cell_from_wildcards(wildcards))


def measure_raw_path(wildcards):
    """Where the measure command writes the session (its own exclusive create; no rule outputs it)."""
    return paths.raw_of_receipt(paths.MEASURE_RECEIPT.format(**wildcards))


def cell_gpu_spec(wildcards):
    return GPU_TABLE[wildcards.gpu]


def matrix_stats_of_gpu(wildcards):
    return PLAN.matrix_stats(wildcards.gpu)


def matrix_cells_of_gpu(wildcards):
    return [c.keys for c in PLAN.matrix if c.gpu == wildcards.gpu]


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
