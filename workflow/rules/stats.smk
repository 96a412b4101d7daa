# Statistics: per cell, median ms/step with a hierarchical bootstrap interval, R_floor, tokens/s,
# cost per token; for A/B cells the speedup with percentile and BCa intervals over sessions.


rule cell_stats:
    input:
        code=ANALYSIS_CODE,
        sessions=CELL_SESSIONS,
        steps=CELL_STEPS,
    output:
        CELL_STATS,
    log:
        "logs/stats/{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}.log",
    params:
        gpu=cell_gpu_spec,
        stats=config["stats"],
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/cell_stats.py"
