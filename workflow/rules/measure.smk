# Measurement: one fresh process per session, on the GPU type the cell names. Only sessions not
# recorded yet are ever jobs, and a recorded session is never a rule's output: Snakemake deletes the
# outputs of a job it (re)runs (--forceall, -R, a failed job under -k, --delete-all-output), so the
# job's output is a receipt under results/receipts/, and the measure command writes the session
# itself with an exclusive create that can never replace a file. The Snakefile includes this rule
# only with `measure: true`.


rule measure:
    output:
        receipt=paths.MEASURE_RECEIPT,
    log:
        paths.MEASURE_LOG,
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
        raw=measure_raw_path,
    shell:
        "python -m decodegap.measure --gpu {wildcards.gpu} --model {wildcards.model}"
        " --ctx {wildcards.ctx} --attn {wildcards.attn} --quant {wildcards.quant} --mode {wildcards.mode}"
        " --session {wildcards.session} --out {params.raw} --receipt {output.receipt} {params.args} > {log} 2>&1"
