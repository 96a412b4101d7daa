# Snakemake entry point: one cell's raw sessions -> its Parquet tables and its statistics.
import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # the decodegap package beside this folder
from decodegap.paths import raw_of_receipt  # noqa: E402
from decodegap.rulelog import run_rule  # noqa: E402
from decodegap.stats import summarize_cell  # noqa: E402

out = snakemake.output
# recorded sessions, and those this run measured (each receipt names its session)
raw = list(snakemake.input.raw) + [raw_of_receipt(r) for r in snakemake.input.measured]
run_rule(snakemake, lambda: summarize_cell(raw, dict(snakemake.wildcards), snakemake.params.gpu,
                                           snakemake.params.stats, out.sessions, out.steps, out.stats))
