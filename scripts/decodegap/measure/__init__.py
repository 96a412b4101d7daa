"""The measurement wing: what runs on the GPU (and on the CPU in tests).

  session        the command that measures one session of one cell (`python -m decodegap.measure`),
                 in phases: build, prepare, time, profile
  setup          the environment stage of a GPU type (`python -m decodegap.measure.setup`)
  cards          model cards -> transformers models with random bf16 weights on the device
  modes          the decode modes (eager, static, graphed, compiled, fused, generate) as one Decoder interface
  fused          the fused mode's own compact decode step; fused_kernels, its Triton kernels
  layer          the attention microbenchmark's decoders (mode layer)
  attention/     attention paths, one file each (the registry finds them)
  weights/       weight paths, one file each (the registry finds them)
  failures       which failures are data (an invalid cell), and the commands' exit codes
  timing         per-step device-event and host-clock timing; probe, the host CPU probe (torch-free)
  engines/       engines people deploy: GGUF files of the cards (gguf_file), llama.cpp in its own process (llamacpp)
  anatomy        the untimed profiler pass after the timed steps: kernels, GPU busy time, host operators
  bandwidth      measured device copy bandwidth
  environment    the machine a session ran on
  codeversion    the code a session ran (commit, dirty flag, source hashes)
  gpulock        one measurement per GPU on a workstation without a scheduler
  batch          many sessions one after another, without Snakemake (`python -m decodegap.measure.batch`)
  ingest         sessions a lent GPU sent back, checked and recorded (`python -m decodegap.measure.ingest`)

The commands import torch only after checking their arguments: the modules they load first (session,
setup, batch, ingest, the registries and their units) import it inside the functions that need it;
timing, bandwidth and fused_kernels (whose Triton kernels are defined at import) import it at the top.
"""
