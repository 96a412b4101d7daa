# The paper's gathering file and the provenance of every number in it.


rule paper_tables:
    input:
        code=ANALYSIS_CODE,
        tables=list(PLAN.tables().values()),
        figures=[f for pair in PLAN.figures().values() for f in pair],
        # built with the tables, so that one target gives the whole report
        provenance="report/provenance.json",
        data=[ALL_SESSIONS, ALL_STEPS],
    output:
        "report/paper_tables.tex",
    log:
        "logs/report/paper_tables.log",
    conda:
        ANALYSIS_ENV
    params:
        figures=FIGURE_LIST,
    script:
        "../../scripts/rules/paper_tables.py"


rule provenance:
    input:
        code=ANALYSIS_CODE,
        numbers=[f"results/provenance/{name}.json" for name in PLAN.tables()],
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        "report/provenance.json",
    log:
        "logs/report/provenance.log",
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/provenance.py"
