# Aggregation: a cell's raw sessions -> its sessions/steps tables; all cells -> the combined tables.


rule aggregate_cell:
    input:
        code=ANALYSIS_CODE,
        raw=cell_raw_files,
    output:
        sessions=CELL_SESSIONS,
        steps=CELL_STEPS,
    log:
        "logs/aggregate/{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}.log",
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/aggregate_cell.py"


rule aggregate_all:
    input:
        code=ANALYSIS_CODE,
        sessions=[c.sessions_parquet for c in PLAN.analysed()],
        steps=[c.steps_parquet for c in PLAN.analysed()],
    output:
        sessions=report(ALL_SESSIONS, caption="../report/sessions.rst", category="Data"),
        steps=ALL_STEPS,
    log:
        "logs/aggregate/all.log",
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/aggregate_all.py"
