# Snakemake entry point: one (gpu, model, ctx) group's cells -> each cell's Parquet tables and statistics.
from decodegap.analysis.rulelog import run_rule
from decodegap.analysis.stats import summarize_group
from decodegap.core.paths import raw_of_receipt

p = snakemake.params
# each cell's recorded sessions, and those this run measured (each receipt names its session)
cells = [{"keys": c["keys"], "raw": c["raw"] + [raw_of_receipt(r) for r in c["receipts"]]} for c in p.cells]
run_rule(snakemake, lambda say: summarize_group(cells, p.gpu, p.stats, p.protocol, say))
