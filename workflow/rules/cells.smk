# One job per (gpu, model, ctx) group: its cells' raw sessions -> each cell's Parquet tables
# (aggregate) and statistics (median ms/step with an interval over machines, R_floor in three forms,
# tokens/s, cost per token, variance components, filter sensitivity; for A/B cells the speedup by
# every estimator). One interpreter per group, not per cell: start-up, not the work, dominated.
# A new session reruns only its own group.


rule cells:
    input:
        code=ANALYSIS_CODE,
        raw=group_raw_files,
        measured=group_receipts,
    output:
        cells=directory(paths.GROUP_CELLS),
        stats=directory(paths.GROUP_STATS),
    log:
        paths.GROUP_LOG,
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        cells=group_params,
        gpu=cell_gpu_spec,
        stats=config["stats"],
        protocol=config["protocol"],
    script:
        "../../scripts/rules/cells.py"


rule aggregate_all:
    input:
        code=ANALYSIS_CODE,
        groups=PLAN_GROUP_CELL_DIRS,
    output:
        sessions=paths.ALL_SESSIONS,
        steps=paths.ALL_STEPS,
    log:
        paths.log("aggregate", "all"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        sessions=[c.sessions_parquet for c in PLAN.analysed()],
        steps=[c.steps_parquet for c in PLAN.analysed()],
    script:
        "../../scripts/rules/aggregate_all.py"
