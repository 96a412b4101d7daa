# Snakemake entry point: every cell's tables -> results/aggregate/{sessions,steps}.parquet.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")
from decodegap.aggregate import SESSIONS_SCHEMA, STEPS_SCHEMA, concat  # noqa: E402
from decodegap.rulelog import run_rule  # noqa: E402


def body():
    concat(snakemake.input.sessions, SESSIONS_SCHEMA, snakemake.output.sessions)
    concat(snakemake.input.steps, STEPS_SCHEMA, snakemake.output.steps)


run_rule(snakemake, body)
