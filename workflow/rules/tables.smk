# Tables: LaTeX (booktabs) plus a sidecar of every number rendered, for the provenance stage.


rule table_matrix:
    input:
        code=ANALYSIS_CODE,
        stats=matrix_stats_of_gpu,
    output:
        tex=report(
            paths.table_tex("matrix_{gpu}"),
            caption="../report/matrix.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("matrix_{gpu}"),
    log:
        paths.log("tables", "matrix_{gpu}"),
    localrule: True
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
            paths.table_tex("ab"), caption="../report/ab_table.rst", category="Tables"
        ),
        numbers=paths.table_numbers("ab"),
    log:
        paths.log("tables", "ab"),
    localrule: True
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
            paths.table_tex("published"),
            caption="../report/published.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("published"),
    log:
        paths.log("tables", "published"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="published",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_anatomy:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        tex=report(
            paths.table_tex("anatomy"),
            caption="../report/anatomy_table.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("anatomy"),
    log:
        paths.log("tables", "anatomy"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="anatomy",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_cost:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            paths.table_tex("cost"), caption="../report/cost.rst", category="Tables"
        ),
        numbers=paths.table_numbers("cost"),
    log:
        paths.log("tables", "cost"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="cost",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_host:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            paths.table_tex("host"),
            caption="../report/host_table.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("host"),
    log:
        paths.log("tables", "host"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="host",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_model:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        tex=report(
            paths.table_tex("model"), caption="../report/model.rst", category="Tables"
        ),
        numbers=paths.table_numbers("model"),
    log:
        paths.log("tables", "model"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="model",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_sensitivity:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        tex=report(
            paths.table_tex("sensitivity"),
            caption="../report/sensitivity.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("sensitivity"),
    log:
        paths.log("tables", "sensitivity"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="sensitivity",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
        headline=config["report"],
    script:
        "../../scripts/rules/table.py"


rule table_variance:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        tex=report(
            paths.table_tex("variance"),
            caption="../report/variance.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("variance"),
    log:
        paths.log("tables", "variance"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="variance",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_floors:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
    output:
        tex=report(
            paths.table_tex("floors"),
            caption="../report/floors.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("floors"),
    log:
        paths.log("tables", "floors"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="floors",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_environment:
    input:
        code=ANALYSIS_CODE,
        records=PLAN.environment_records(),
    output:
        tex=report(
            paths.table_tex("environment"),
            caption="../report/environment.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("environment"),
    log:
        paths.log("tables", "environment"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="environment",
        gpus=GPU_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_attention:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.attention_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            paths.table_tex("attention"),
            caption="../report/attention_table.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("attention"),
    log:
        paths.log("tables", "attention"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="attention",
        cells=PLAN.attention_cells(),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_attention_step:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.attention_stats(),
    output:
        tex=report(
            paths.table_tex("attention_step"),
            caption="../report/attention_step.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("attention_step"),
    log:
        paths.log("tables", "attention_step"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="attention_step",
        cells=PLAN.attention_cells(),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_quantization:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.quantization_stats(),
        reference=REFERENCE,
    output:
        tex=report(
            paths.table_tex("quantization"),
            caption="../report/quantization_table.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("quantization"),
    log:
        paths.log("tables", "quantization"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="quantization",
        cells=PLAN.quantization_cells(),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"


rule table_floor:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.floor_stats(),
    output:
        tex=report(
            paths.table_tex("floor"),
            caption="../report/floor_table.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("floor"),
    log:
        paths.log("tables", "floor"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="floor",
        cells=PLAN.floor_cells(),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/table.py"
