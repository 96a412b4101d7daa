# Snakemake entry point: report/paper_tables.tex gathers every table and figure.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")
from decodegap.rulelog import run_rule  # noqa: E402
from decodegap.tables import paper_tables  # noqa: E402

run_rule(snakemake, lambda: paper_tables(snakemake.input.tables, snakemake.params.figures, snakemake.output[0]))
