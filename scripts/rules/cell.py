# Snakemake entry point: one cell's raw sessions -> its Parquet tables and its statistics.
from decodegap.core.paths import raw_of_receipt
from decodegap.analysis.rulelog import run_rule
from decodegap.analysis.stats import summarize_cell

out = snakemake.output
# recorded sessions, and those this run measured (each receipt names its session)
raw = list(snakemake.input.raw) + [raw_of_receipt(r) for r in snakemake.input.measured]
run_rule(snakemake, lambda: summarize_cell(raw, dict(snakemake.wildcards), snakemake.params.gpu,
                                           snakemake.params.stats, out.sessions, out.steps, out.stats))
