# Snakemake entry point: one table (its .tex and the numbers it rendered) or one figure (PDF and PNG),
# by its name in the artifact registry (decodegap.analysis.artifacts).
from decodegap.analysis import artifacts
from decodegap.analysis.reference import load_reference
from decodegap.analysis.rulelog import run_rule
from decodegap.core.paths import record_of

p, i = snakemake.params, snakemake.input


def body():
    job = artifacts.Job(
        stats=list(p.stats), gpus=p.gpus, models=p.models, cells=list(p.cells), headline=p.headline,
        reference=load_reference(i.reference) if "reference" in i.keys() else [],
        records=[record_of(r) for r in i.records] if "records" in i.keys() else [],  # a stage's receipt names its record
        out=tuple(snakemake.output),
    )
    artifacts.render(p.kind, p.name, job)


run_rule(snakemake, body)
