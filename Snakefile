# decodegap: batch-1 LLM decode, from raw sessions on real GPUs to the paper's tables.
# This file is the table of contents; each stage lives in workflow/rules/<stage>.smk.

from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# Only measurements go to the cluster: every other rule says `localrule: True` and runs where
# Snakemake runs (tests/test_pipeline.py fails for a rule that forgets it).


if PLAN.measure:  # with `measure: false` no rule can even name a raw session

    include: "workflow/rules/measure.smk"


include: "workflow/rules/cells.smk"
include: "workflow/rules/artifacts.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        PLAN.final_targets(),
    localrule: True
