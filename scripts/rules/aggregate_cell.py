# Snakemake entry point: one cell's raw sessions -> its sessions/steps Parquet tables.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # the decodegap package beside this folder
from decodegap.aggregate import write_tables  # noqa: E402
from decodegap.rulelog import run_rule  # noqa: E402

run_rule(snakemake, lambda: write_tables(snakemake.input.raw, snakemake.output.sessions, snakemake.output.steps))
