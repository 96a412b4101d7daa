# The paper's gathering file and the provenance of every number in it.


rule paper_tables:
    input:
        code=ANALYSIS_CODE,
        tables=list(PLAN.tables().values()),
        figures=[f for pair in PLAN.figures().values() for f in pair],
        # built with the tables, so that one target gives the whole report
        provenance=paths.PROVENANCE,
        data=[paths.ALL_SESSIONS, paths.ALL_STEPS],
    output:
        paths.PAPER_TABLES,
    log:
        paths.log("report", "paper_tables"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        figures=FIGURE_LIST,
    script:
        "../../scripts/rules/paper_tables.py"


rule provenance:
    input:
        code=ANALYSIS_CODE,
        numbers=[paths.table_numbers(name) for name in PLAN.tables()],
        stats=list(
            dict.fromkeys(
                PLAN.matrix_stats()
                + PLAN.ab_stats()
                + PLAN.attention_stats()
                + PLAN.quantization_stats()
                + PLAN.floor_stats()
            )
        ),
    output:
        paths.PROVENANCE,
    log:
        paths.log("report", "provenance"),
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/provenance.py"
