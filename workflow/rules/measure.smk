# Measurement: first the environment stage of a GPU type that has no record yet (one job on that GPU
# type: versions, compile caches, and which configured attention and weight paths can run there at
# all), then one fresh process per session. Only sessions not recorded yet are ever jobs. Neither a
# session nor an environment record is ever a rule's output: Snakemake deletes the outputs of a job
# it (re)runs (--forceall, -R, a failed job under -k, --delete-all-output), so each job outputs a
# receipt under results/receipts/, and the command writes the data itself with an exclusive create
# that can never replace a file. A GPU type with a record never stages again on its own (no file
# time can make it): `snakemake --config measure=true -- results/receipts/environment/<gpu>.json`
# asks for a new stage, whose record then joins the old ones. The Snakefile includes this file only
# with `measure: true`.


rule environment:
    output:
        paths.ENVIRONMENT_RECEIPT,
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
        tune_s=PLAN.config["environment"]["tune_s"],
        refine_s=PLAN.config["environment"]["refine_s"],
        out_dir=paths.ENVIRONMENT_ROOT,
    shell:
        "python -m decodegap.measure.setup --gpu {wildcards.gpu} --attn {params.attn} --quant {params.quant}"
        " --layouts {params.layouts} {params.gpu} --tune-s {params.tune_s} --refine-s {params.refine_s}"
        " --out-dir {params.out_dir} --receipt {output} > {log} 2>&1"


rule measure:
    input:
        # the GPU type's newest environment record; before its first stage, the stage's receipt
        env=environment_of_gpu,
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
