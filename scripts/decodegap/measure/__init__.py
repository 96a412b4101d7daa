"""The measurement wing: what runs on the GPU (and on the CPU in tests).

  session      the command that measures one session of one cell (`python -m decodegap.measure`)
  cards        model cards -> transformers models with random bf16 weights on the device
  modes        decode modes (eager, static, graphed) behind one small interface
  attention    attention paths (SDPA backends)
  weights      weight paths (bf16; quantized layouts plug in here)
  timing       per-step device-event and host-clock timing, the host CPU probe
  anatomy      the untimed profiler pass after the timed steps: kernels, GPU busy time, host operators
  bandwidth    measured device copy bandwidth
  environment  the machine a session ran on
  codeversion  the code a session ran (commit, dirty flag, source hashes)
  gpulock      one measurement per GPU on a workstation without a scheduler
  batch        many sessions one after another, without Snakemake (`python -m decodegap.measure.batch`)
  ingest       sessions a lent GPU sent back, checked and recorded (`python -m decodegap.measure.ingest`)

torch is imported only inside the functions that need it.
"""
