# Snakemake entry point: report/paper_tables.tex gathers every table and figure.
from decodegap.analysis.rulelog import run_rule
from decodegap.analysis.tables import paper_tables

run_rule(snakemake, lambda: paper_tables(snakemake.input.tables, snakemake.params.figures, snakemake.output[0]))
