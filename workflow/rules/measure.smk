# Measurement: first the environment stage of each GPU type (one job on that GPU type: versions,
# compile caches, and which configured attention and weight paths can run there at all), then one
# fresh process per session. Only sessions not recorded yet are ever jobs, and a recorded session is
# never a rule's output: Snakemake deletes the outputs of a job it (re)runs (--forceall, -R, a
# failed job under -k, --delete-all-output), so the job's output is a receipt under
# results/receipts/, and the measure command writes the session itself with an exclusive create
# that can never replace a file. The Snakefile includes this file only with `measure: true`.


rule environment:
    input:
        # the environment's definition, never the analysis code: editing a table does not rerun it
        requirements=repo_path("envs/measure-requirements.txt"),
        code=ENVIRONMENT_CODE,
    output:
        paths.ENVIRONMENT_RECORD,
    log:
        paths.log("environment", "{gpu}"),
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
        attn=lambda wildcards: " ".join(PLAN.environment_paths(wildcards.gpu)[0]),
        quant=lambda wildcards: " ".join(PLAN.environment_paths(wildcards.gpu)[1]),
        layouts=lambda wildcards: " ".join(PLAN.environment_layouts(wildcards.gpu)),
        gpu=environment_args,
    shell:
        "python -m decodegap.measure.setup --gpu {wildcards.gpu} --attn {params.attn} --quant {params.quant}"
        " --layouts {params.layouts} {params.gpu} --out {output} > {log} 2>&1"


rule measure:
    input:
        env=paths.ENVIRONMENT_RECORD,
    output:
        receipt=paths.MEASURE_RECEIPT,
    log:
        paths.MEASURE_LOG,
    conda:
        MEASURE_ENV
    # A cell the environment record rules out asks for no GPU: the job writes the invalid session
    # from the record (these functions read it once it exists, just before the job is submitted).
    resources:
        gpu=measure_gpus,
        gpu_model=lambda wildcards, input: (
            None if ruled_out(wildcards, input) else measure_gpu_model(wildcards)
        ),
        runtime=measure_runtime,
        mem_mb=measure_mem_mb,
        cpus_per_task=measure_cpus,
        slurm_partition=lambda wildcards, input: (
            "" if ruled_out(wildcards, input) else measure_partition(wildcards)
        ),
        constraint=lambda wildcards, input: (
            None if ruled_out(wildcards, input) else measure_constraint(wildcards)
        ),
    params:
        args=measure_args,
        raw=measure_raw_path,
    shell:
        "python -m decodegap.measure --gpu {wildcards.gpu} --model {wildcards.model}"
        " --ctx {wildcards.ctx} --attn {wildcards.attn} --quant {wildcards.quant} --mode {wildcards.mode}"
        " --session {wildcards.session} --out {params.raw} --receipt {output.receipt} --environment {input.env}"
        " {params.args} > {log} 2>&1"
