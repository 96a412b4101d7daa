"""decodegap: batch-1 LLM decode measured on real GPUs, from raw sessions to a paper's tables.

One module per concern:
  config      load and check config/gpus.yaml and config/models.yaml
  paths       the one path grammar for raw sessions and derived files
  cards       architecture cards -> transformers models (random bf16 weights on the device)
  floor       the analytic memory floor t_floor = (W + K) / B_peak and R_floor
  attention   attention paths (SDPA backends)
  weights     weight paths (bf16; quantized layouts plug in here)
  modes       decode modes (eager, graphed) behind one small interface
  timing      per-step device-event and host-clock timing
  bandwidth   measured device copy bandwidth
  environment the machine a session ran on
  codeversion the code a session ran
  validity    whether a session's samples can be trusted, with reasons
  record      the session record: schema, atomic no-overwrite write, read
  measure     the command that measures one session of one cell in a fresh process
"""

__version__ = "0.1.0"
