# Snakemake entry point: one cell's tables -> results/stats/<cell>/stats.json.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")
from decodegap.rulelog import run_rule  # noqa: E402
from decodegap.stats import write_cell_stats  # noqa: E402

run_rule(snakemake, lambda: write_cell_stats(snakemake.input.sessions, snakemake.input.steps, dict(snakemake.wildcards),
                                             snakemake.params.gpu, snakemake.params.stats, snakemake.output[0]))
