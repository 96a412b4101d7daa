# Snakemake entry point: report/provenance.json from every table's numbers, the tables' and figures' hashes and
# every session the statistics read.
from decodegap.analysis.provenance import build
from decodegap.analysis.rulelog import run_rule

i = snakemake.input
run_rule(snakemake, lambda: build(i.numbers, snakemake.output[0], i.tables, i.stats, i.figures))
