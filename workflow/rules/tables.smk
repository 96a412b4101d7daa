# Tables: LaTeX (booktabs) plus a sidecar of every number rendered, for the provenance stage.


rule table_matrix:
    input:
        code=ANALYSIS_CODE,
        stats=matrix_stats_of_gpu,
    output:
        tex=report(
            "report/tables/matrix_{gpu}.tex",
            caption="../report/matrix.rst",
            category="Tables",
        ),
        numbers="results/provenance/matrix_{gpu}.json",
    log:
        "logs/tables/matrix_{gpu}.log",
    conda:
        ANALYSIS_ENV
    params:
        name="matrix",
        cells=matrix_cells_of_gpu,
        gpu=cell_gpu_spec,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_ab:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            "report/tables/ab.tex", caption="../report/ab_table.rst", category="Tables"
        ),
        numbers="results/provenance/ab.json",
    log:
        "logs/tables/ab.log",
    conda:
        ANALYSIS_ENV
    params:
        name="ab",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_published:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            "report/tables/published.tex",
            caption="../report/published.rst",
            category="Tables",
        ),
        numbers="results/provenance/published.json",
    log:
        "logs/tables/published.log",
    conda:
        ANALYSIS_ENV
    params:
        name="published",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"
