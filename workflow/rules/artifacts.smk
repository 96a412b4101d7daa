# The report's tables and figures: one wildcard rule each, every artifact an entry of one registry
# (decodegap.analysis.artifacts: its cells, its inputs, its caption). An input is the folder of each
# (gpu, model, ctx) group whose statistics it reads; the files themselves reach it as params.


rule table:
    input:
        unpack(artifact_inputs("table")),
    output:
        tex=report(
            paths.table_tex("{table}"),
            caption="../report/artifact.rst",
            category="Tables",
        ),
        numbers=paths.table_numbers("{table}"),
    log:
        paths.log("tables", "{table}"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        kind="table",
        name=lambda w: w.table,
        stats=artifact_stats("table"),
        cells=artifact_cells("table"),
        caption=artifact_caption("table"),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
        headline=config["report"],
    script:
        "../../scripts/rules/artifact.py"


rule figure:
    input:
        unpack(artifact_inputs("figure")),
    output:
        pdf=paths.figure("{figure}")[0],
        png=report(
            paths.figure("{figure}")[1],
            caption="../report/artifact.rst",
            category="Figures",
        ),
    log:
        paths.log("figures", "{figure}"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        kind="figure",
        name=lambda w: w.figure,
        stats=artifact_stats("figure"),
        cells=artifact_cells("figure"),
        caption=artifact_caption("figure"),
        gpus=GPU_TABLE,
        models=MODEL_TABLE,
        headline=config["report"],
    script:
        "../../scripts/rules/artifact.py"
