# Snakemake entry point: one LaTeX table and the sidecar of the numbers it rendered.
from decodegap.analysis import tables
from decodegap.analysis.reference import load_reference
from decodegap.analysis.rulelog import run_rule

p, out = snakemake.params, snakemake.output


def body():
    if p.name == "matrix":
        tables.matrix_table(snakemake.wildcards.gpu, snakemake.input.stats, p.cells, p.gpu, p.models, out.tex, out.numbers)
    elif p.name == "attention":
        tables.attention_table(snakemake.input.stats, p.cells, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "attention_step":
        tables.attention_step_table(snakemake.input.stats, p.cells, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "quantization":
        tables.quantization_table(snakemake.input.stats, p.cells, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "floor":
        tables.floor_table(snakemake.input.stats, p.cells, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "anatomy":
        tables.anatomy_table(snakemake.input.stats, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "host":
        tables.host_table(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "model":
        tables.model_table(snakemake.input.stats, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "cost":
        tables.cost_table(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "environment":
        tables.environment_table(snakemake.input.records, p.gpus, out.tex, out.numbers)
    elif p.name == "sensitivity":
        tables.sensitivity_table(snakemake.input.stats, p.gpus, p.models, p.headline, out.tex, out.numbers)
    elif p.name == "variance":
        tables.variance_table(snakemake.input.stats, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "floors":
        tables.floors_table(snakemake.input.stats, p.gpus, p.models, out.tex, out.numbers)
    elif p.name == "ab":
        tables.ab_table(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)
    else:
        tables.published_table(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, out.tex, out.numbers)


run_rule(snakemake, body)
