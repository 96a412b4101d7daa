# Snakemake entry point: every cell's tables -> results/aggregate/{sessions,steps}.parquet.
from decodegap.analysis.aggregate import SESSIONS_SCHEMA, STEPS_SCHEMA, concat
from decodegap.analysis.rulelog import run_rule


def body():
    concat(snakemake.params.sessions, SESSIONS_SCHEMA, snakemake.output.sessions)
    concat(snakemake.params.steps, STEPS_SCHEMA, snakemake.output.steps)


run_rule(snakemake, body)
