# Snakemake entry point: one figure (figures.py has one function per figure), PDF and PNG.
from decodegap.analysis import figures
from decodegap.analysis.reference import load_reference
from decodegap.analysis.rulelog import run_rule

p = snakemake.params


def body():
    if p.name == "ladder":
        figures.ladder(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.headline_model, p.headline_ctx, snakemake.output)
    elif p.name == "context":
        figures.context(snakemake.input.stats, p.gpus, p.models, snakemake.output)
    elif p.name == "anatomy":
        figures.anatomy(snakemake.input.stats, p.gpus, p.models, snakemake.output)
    elif p.name == "deployment":
        figures.deployment(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, snakemake.output)
    elif p.name == "attention":
        figures.attention(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, snakemake.output)
    elif p.name == "quantization":
        figures.quantization(snakemake.input.stats, p.gpus, p.models, snakemake.output)
    elif p.name == "host":
        figures.host(snakemake.input.stats, p.gpus, p.models, snakemake.output)
    else:
        figures.ab(snakemake.input.stats, load_reference(snakemake.input.reference), p.gpus, p.models, snakemake.output)


run_rule(snakemake, body)
