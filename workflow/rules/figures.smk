# Figures: one rule per figure, each reading only the statistics it draws.


rule figure_ladder:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.headline_stats(),
        reference=REFERENCE,
    output:
        report(
            "report/figures/ladder.pdf",
            caption="../report/ladder.rst",
            category="Figures",
        ),
        "report/figures/ladder.png",
    log:
        "logs/figures/ladder.log",
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
            "report/figures/context.pdf",
            caption="../report/context.rst",
            category="Figures",
        ),
        "report/figures/context.png",
    log:
        "logs/figures/context.log",
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
        report("report/figures/ab.pdf", caption="../report/ab.rst", category="Figures"),
        "report/figures/ab.png",
    log:
        "logs/figures/ab.log",
    conda:
        ANALYSIS_ENV
    params:
        name="ab",
        gpus=GPU_TABLE,
    script:
        "../../scripts/rules/figure.py"


rule figure_host:
    input:
        code=ANALYSIS_CODE,
        stats=PLAN.ab_stats(),
    output:
        report(
            "report/figures/host.pdf", caption="../report/host.rst", category="Figures"
        ),
        "report/figures/host.png",
    log:
        "logs/figures/host.log",
    conda:
        ANALYSIS_ENV
    params:
        name="host",
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
    script:
        "../../scripts/rules/figure.py"
