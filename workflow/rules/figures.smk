# Figures: one rule per figure, each reading only the statistics it draws.


rule figure_ladder:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.headline_stats(),
        reference=REFERENCE,
    output:
        report(
            paths.figure("ladder")[0],
            caption="../report/ladder.rst",
            category="Figures",
        ),
        paths.figure("ladder")[1],
    log:
        paths.log("figures", "ladder"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="ladder",
        gpus=GPU_TABLE,
        headline_model=config["report"]["headline_model"],
        headline_ctx=config["report"]["headline_ctx"],
    script:
        "../../scripts/rules/figure.py"


rule figure_context:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats(),
    output:
        report(
            paths.figure("context")[0],
            caption="../report/context.rst",
            category="Figures",
        ),
        paths.figure("context")[1],
    log:
        paths.log("figures", "context"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="context",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_ab:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        report(
            paths.figure("ab")[0],
            caption="../report/ab.rst",
            category="Figures",
        ),
        paths.figure("ab")[1],
    log:
        paths.log("figures", "ab"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="ab",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_host:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.ab_stats(),
    output:
        report(
            paths.figure("host")[0],
            caption="../report/host.rst",
            category="Figures",
        ),
        paths.figure("host")[1],
    log:
        paths.log("figures", "host"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="host",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_anatomy:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats() + PLAN.floor_stats("bf16"),
    output:
        report(
            paths.figure("anatomy")[0],
            caption="../report/anatomy.rst",
            category="Figures",
        ),
        paths.figure("anatomy")[1],
    log:
        paths.log("figures", "anatomy"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="anatomy",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_deployment:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.matrix_stats() + PLAN.ab_stats(),
        reference=REFERENCE,
    output:
        report(
            paths.figure("deployment")[0],
            caption="../report/deployment.rst",
            category="Figures",
        ),
        paths.figure("deployment")[1],
    log:
        paths.log("figures", "deployment"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="deployment",
        gpus=GPU_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_attention:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.attention_stats(),
        reference=REFERENCE,
    output:
        report(
            paths.figure("attention")[0],
            caption="../report/attention.rst",
            category="Figures",
        ),
        paths.figure("attention")[1],
    log:
        paths.log("figures", "attention"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="attention",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_quantization:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.quantization_stats(),
    output:
        report(
            paths.figure("quantization")[0],
            caption="../report/quantization.rst",
            category="Figures",
        ),
        paths.figure("quantization")[1],
    log:
        paths.log("figures", "quantization"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        name="quantization",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"
