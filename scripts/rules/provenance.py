# Snakemake entry point: report/provenance.json from every table's numbers.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")
from decodegap.provenance import build  # noqa: E402
from decodegap.rulelog import run_rule  # noqa: E402

run_rule(snakemake, lambda: build(snakemake.input.numbers, snakemake.output[0]))
