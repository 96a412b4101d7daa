# Snakemake entry point: report/provenance.json from every table's numbers.
from decodegap.analysis.provenance import build
from decodegap.analysis.rulelog import run_rule

run_rule(snakemake, lambda: build(snakemake.input.numbers, snakemake.output[0]))
