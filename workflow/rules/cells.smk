# One job per cell: its raw sessions -> sessions/steps tables (aggregate) -> statistics (median
# ms/step with an interval over machines, R_floor in three forms, tokens/s, cost per token,
# variance components, filter sensitivity; for A/B cells the speedup by every estimator). One job,
# two stages: job start-up, not the work, dominated when they were separate. A new session reruns
# only its own cell.


rule cell:
    input:
        code=ANALYSIS_CODE,
        raw=cell_raw_files,
        measured=cell_receipts,
    output:
        sessions=paths.CELL_SESSIONS,
        steps=paths.CELL_STEPS,
        stats=paths.CELL_STATS,
    log:
        paths.CELL_LOG,
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        gpu=cell_gpu_spec,
        stats=config["stats"],
    script:
        "../../scripts/rules/cell.py"


rule aggregate_all:
    input:
        code=ANALYSIS_CODE,
        sessions=[c.sessions_parquet for c in PLAN.analysed()],
        steps=[c.steps_parquet for c in PLAN.analysed()],
    output:
        sessions=report(
            paths.ALL_SESSIONS, caption="../report/sessions.rst", category="Data"
        ),
        steps=paths.ALL_STEPS,
    log:
        paths.log("aggregate", "all"),
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/aggregate_all.py"
