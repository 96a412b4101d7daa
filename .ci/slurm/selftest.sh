#!/usr/bin/env bash
# Prove the local SLURM test cluster works end to end:
#   - typed fake GPUs via --gres=gpu:TYPE:N and --gpus=TYPE:N run to completion
#   - each ended job's GPU request can be read back (jobcomp.jsonl / job_gpus.py)
#   - a request for a GPU type the node lacks is rejected at submission
#   - snakemake --executor slurm (profile in ./profile) runs rules with
#     resources gpu=1, gpu_model="h200" / "l4" and the jobs get those types
# Starts the cluster (up.sh) if needed; leaves it running.
# Env: SNAKEMAKE=path/to/snakemake (default: <repo>/.venv/bin/snakemake, then PATH);
#      SKIP_SNAKEMAKE=1 to test only plain sbatch.
# Ends with the line "N passed, N failed"; exit status 0 only if nothing failed.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
JOBCOMP=/var/log/slurm/jobcomp.jsonl
PASS=0
FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }

"$HERE/up.sh" || { echo "0 passed, 1 failed"; exit 1; }

WORK=$(mktemp -d /tmp/slurm-selftest.XXXXXX)
cd "$WORK" || exit 1

# wait until job $1 has left the queue; print its final state
wait_job() {
  local id=$1 deadline=$(( $(date +%s) + ${2:-120} )) st
  while :; do
    st=$(squeue -h -j "$id" -t all -o '%T' 2>/dev/null | head -n1)
    case "$st" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) echo "$st"; return 0;;
    esac
    [ "$(date +%s)" -ge "$deadline" ] && { echo "TIMEOUT_WAITING($st)"; return 1; }
    sleep 0.5
  done
}
# field $2 of job $1 in jobcomp.jsonl (waits a little: the record is written at job end)
jobcomp_field() {
  local id=$1 key=$2
  for _ in $(seq 20); do
    python3 - "$id" "$key" "$JOBCOMP" <<'EOF' && return 0
import json, sys
jid, key, path = sys.argv[1], sys.argv[2], sys.argv[3]
for line in open(path):
    rec = json.loads(line)
    if str(rec.get("job_id")) == jid:
        print(rec.get(key)); sys.exit(0)
sys.exit(1)
EOF
    sleep 0.5
  done
  return 1
}

# ---- 1. plain sbatch with typed gres / gpus -------------------------------
j1=$(sbatch --parsable --gres=gpu:h200:1 --wrap 'hostname; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES')
j2=$(sbatch --parsable --gpus=l4:1 --wrap 'hostname; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES')
[ -n "$j1" ] && [ -n "$j2" ] && ok "sbatch accepted --gres=gpu:h200:1 (job $j1) and --gpus=l4:1 (job $j2)" \
  || bad "sbatch refused typed GPU requests"
st1=$(wait_job "$j1"); st2=$(wait_job "$j2")
[ "$st1" = COMPLETED ] && ok "job $j1 (--gres=gpu:h200:1) COMPLETED" || bad "job $j1 ended $st1"
[ "$st2" = COMPLETED ] && ok "job $j2 (--gpus=l4:1) COMPLETED" || bad "job $j2 ended $st2"
grep -q 'CUDA_VISIBLE_DEVICES=[0-9]' "slurm-$j1.out" 2>/dev/null && ok "job $j1 saw a GPU index" || bad "job $j1 output: $(cat "slurm-$j1.out" 2>&1)"

# ---- 2. read back the GPU request after the jobs ended ---------------------
v=$(jobcomp_field "$j1" tres_per_node); [ "$v" = "gres:gpu:h200:1" ] && ok "jobcomp: $j1 tres_per_node=$v" || bad "jobcomp: $j1 tres_per_node='$v'"
v=$(jobcomp_field "$j1" gres_alloc);    [ "$v" = "gpu:h200:1" ]      && ok "jobcomp: $j1 gres_alloc=$v"    || bad "jobcomp: $j1 gres_alloc='$v'"
v=$(jobcomp_field "$j2" tres_per_job);  [ "$v" = "gres:gpu:l4:1" ]   && ok "jobcomp: $j2 tres_per_job=$v"  || bad "jobcomp: $j2 tres_per_job='$v'"
v=$(scontrol show job "$j2" 2>/dev/null | grep -o 'TresPerJob=[^ ]*')
[ "$v" = "TresPerJob=gres:gpu:l4:1" ] && ok "scontrol show job $j2 (ended): $v" || bad "scontrol show job $j2: '$v'"
"$HERE/job_gpus.py" "$j1" "$j2" >/dev/null && ok "job_gpus.py $j1 $j2" || bad "job_gpus.py $j1 $j2"

# ---- 3. unknown GPU type is rejected at submission -------------------------
if err=$(sbatch --parsable --gres=gpu:nosuchtype:1 --wrap true 2>&1); then
  bad "sbatch accepted an unknown GPU type (job $err)"
else
  ok "unknown type rejected: $err"
fi
if err=$(sbatch --parsable --gpus=nosuchtype:1 --wrap true 2>&1); then
  bad "sbatch --gpus accepted an unknown GPU type (job $err)"
else
  ok "unknown type rejected (--gpus): $err"
fi

# ---- 4. snakemake --executor slurm -----------------------------------------
if [ "${SKIP_SNAKEMAKE:-0}" != 1 ]; then
  SMK=${SNAKEMAKE:-}
  [ -z "$SMK" ] && [ -x "$REPO/.venv/bin/snakemake" ] && SMK=$REPO/.venv/bin/snakemake
  [ -z "$SMK" ] && SMK=$(command -v snakemake || true)
  if [ -z "$SMK" ]; then
    bad "snakemake not found (set SNAKEMAKE=...)"
  else
    mkdir -p smk && cat >smk/Snakefile <<'EOF'
SHOW = "echo rule={rule} job=${{SLURM_JOB_ID:-}} cvd=${{CUDA_VISIBLE_DEVICES:-}} > {output}"

rule all:
    input: "out/h200.txt", "out/l4.txt"

rule on_h200:
    output: "out/h200.txt"
    resources: gpu=1, gpu_model="h200"
    shell: SHOW

rule on_l4:
    output: "out/l4.txt"
    resources: gpu=1, gpu_model="l4"
    shell: SHOW
EOF
    start=$(date +%s)
    # -k: snakemake may ignore SIGTERM while waiting for jobs
    if (cd smk && timeout -k 15 300 "$SMK" --profile "$HERE/profile" --jobs 2 >run.log 2>&1); then
      ok "snakemake --executor slurm finished in $(( $(date +%s) - start ))s"
    else
      bad "snakemake failed; tail of $WORK/smk/run.log:"; tail -n 30 smk/run.log
    fi
    for r in h200 l4; do
      id=$(sed -n "s/^rule=on_$r job=\([0-9]*\).*/\1/p" "smk/out/$r.txt" 2>/dev/null)
      if [ -z "$id" ]; then bad "rule on_$r: no output"; continue; fi
      v=$(jobcomp_field "$id" tres_per_job)
      c=$(jobcomp_field "$id" comment)
      [ "$v" = "gres:gpu:$r:1" ] && [ "$c" = "rule_on_$r" ] \
        && ok "rule on_$r ran as job $id, requested $v (comment $c)" \
        || bad "rule on_$r job $id: tres_per_job='$v' comment='$c'"
    done
  fi
fi

echo "selftest dir: $WORK"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
