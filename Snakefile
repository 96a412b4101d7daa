# decodegap: batch-1 LLM decode, from raw sessions on real GPUs to the paper's tables.
# This file is the table of contents; each stage lives in workflow/rules/<stage>.smk.

from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# Only measurements go to the cluster; everything after them runs where Snakemake runs.
localrules:
    all,
    cell,
    aggregate_all,
    figure_ladder,
    figure_context,
    figure_ab,
    figure_host,
    table_matrix,
    table_ab,
    table_published,
    paper_tables,
    provenance,


if PLAN.measure:  # with `measure: false` no rule can even name a raw session

    include: "workflow/rules/measure.smk"


include: "workflow/rules/cells.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        PLAN.final_targets(),
