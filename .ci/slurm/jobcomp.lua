-- Installed by .ci/slurm/up.sh as /etc/slurm/jobcomp.lua (JobCompType=jobcomp/lua).
-- slurmctld calls slurm_jobcomp_log_record() once for every job that leaves the
-- system (completed, failed, cancelled, timed out, ...).  We append one JSON
-- object per line to /var/log/slurm/jobcomp.jsonl, including the job's GPU
-- request, so tests can check afterwards what each job asked for, independent
-- of MinJobAge and of daemon restarts.  Runs inside slurmctld as SlurmUser.
local LOG = "/var/log/slurm/jobcomp.jsonl"

-- enum job_states (slurm.h); the upper bits are flags (COMPLETING, ...)
local STATES = {[0] = "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED",
  "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
  "OUT_OF_MEMORY"}

local function get(job, key)
  local ok, v = pcall(function() return job[key] end)
  if ok then return v end
  return nil
end

local function enc(v)
  if v == nil then return "null" end
  if type(v) == "number" then
    -- NaN, NO_VAL (0xfffffffe), INFINITE (0xffffffff) and 64-bit variants
    if v ~= v or v >= 4294967294 then return "null" end
    return string.format("%d", v)
  end
  local s = tostring(v)
  s = s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end)
  return '"' .. s .. '"'
end

function slurm_jobcomp_log_record(job)
  local st = get(job, "job_state")
  local ec = get(job, "exit_code")
  local fields = {
    {"job_id", get(job, "job_id")},
    {"array_job_id", get(job, "array_job_id")},
    {"array_task_id", get(job, "array_task_id")},
    {"name", get(job, "name")},
    {"comment", get(job, "comment")},
    {"partition", get(job, "partition")},
    {"state", st and STATES[st % 256] or nil},
    {"exit_code", ec and math.floor(ec / 256) % 256 or nil},
    {"signal", ec and ec % 128 or nil},
    -- what was asked for: --gpus/--gpus-per-job -> tres_per_job,
    -- --gres / --gpus-per-node -> tres_per_node, e.g. "gres:gpu:h200:1"
    {"tres_per_job", get(job, "tres_per_job")},
    {"tres_per_node", get(job, "tres_per_node")},
    {"tres_per_task", get(job, "tres_per_task")},
    {"tres_per_socket", get(job, "tres_per_socket")},
    -- what was allocated, typed: e.g. "gpu:h200:1"
    {"gres_alloc", get(job, "gres_used")},
    -- --constraint / -C
    {"constraint", get(job, "features")},
    {"tres_alloc", get(job, "tres_fmt_alloc_str")},
    {"time_limit_min", get(job, "time_limit")},
    {"nodes", get(job, "nodes")},
    {"work_dir", get(job, "work_dir")},
    {"start_time", get(job, "start_time")},
    {"end_time", get(job, "end_time")},
  }
  local parts = {}
  for _, kv in ipairs(fields) do
    parts[#parts + 1] = enc(kv[1]) .. ":" .. enc(kv[2])
  end
  local f = io.open(LOG, "a")
  if f then
    f:write("{" .. table.concat(parts, ",") .. "}\n")
    f:close()
  else
    slurm.log_error("jobcomp.lua: cannot open " .. LOG)
  end
  return slurm.SUCCESS
end

return slurm.SUCCESS
