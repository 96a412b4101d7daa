# Measurement: one fresh process per session, on the GPU type the cell names. Raw sessions are
# protected data: a job never overwrites one, and nothing downstream can re-trigger this rule
# (its only inputs are the wildcards; analysis code and params are not among them).


rule measure:
    output:
        protected(paths.RAW_SESSION),
    log:
        MEASURE_LOG,
    conda:
        MEASURE_ENV
    resources:
        gpu=1,
        gpu_model=measure_gpu_model,
        runtime=measure_runtime,
        mem_mb=measure_mem_mb,
        cpus_per_task=measure_cpus,
        slurm_partition=measure_partition,
        constraint=measure_constraint,
    params:
        args=measure_args,
        scripts=SCRIPTS_DIR,
    shell:
        "PYTHONPATH={params.scripts} python -m decodegap.measure --gpu {wildcards.gpu} --model {wildcards.model}"
        " --ctx {wildcards.ctx} --attn {wildcards.attn} --quant {wildcards.quant} --mode {wildcards.mode}"
        " --session {wildcards.session} --out {output} {params.args} > {log} 2>&1"
