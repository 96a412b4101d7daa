# Sourced by one call on a lent GPU (README: "On a lent GPU ..."): a call has a hard time limit and its
# working tree is replaced by the next call, so sessions are written outside the tree, under
# /tmp/dg, and packed into $OUT on exit, with one deadline for every batch run of the call.
#
#   SHA=<commit> [GPU=h200] [BUDGET_S=545] [TAILN=4] bash -c '. envs/lent_gpu.sh; stage; B --models ... --sessions 0'
#
# - the wheels in .whl/ (and .whl-*/, a second set carried by another call) are installed into
#   /tmp/site (PYTHONPATH), each once per machine, so two calls can carry a set too large for one
#   (only while the machine stays warm: it goes back after about 30 s idle, and a fresh one stages
#   again, about 200-270 s on the H200 with ExLlamaV2's and Marlin's builds);
# - results/raw/ is copied to /tmp/dg once per machine, so the batch skips every session recorded
#   there or earlier on this machine; only sessions newer than this call's start are packed;
# - `stage` writes the environment record (all attention paths, the config's weight paths and head
#   layouts) unless this machine has one; `B ...` runs `python -m decodegap.measure.batch` with the
#   shared deadline and the record.
# Unpack $OUT/sessions.tar.gz here and add it with `python -m decodegap.measure.ingest DIR` after
# every call, before the next: a call that lands on a fresh machine skips only what the tree holds,
# so it measures again any session still waiting here, and ingest refuses the second copy.
set -u
START=$(date +%s); END=$(( START + ${BUDGET_S:-545} ))
GPU=${GPU:-h200}; CACHE=$HOME/.cache/decodegap/$GPU  # the GPU type, and the compile caches its stage and sessions share
export PYTHONPATH=/tmp/site:scripts PYTHONUNBUFFERED=1 DECODEGAP_GIT_COMMIT=$SHA DECODEGAP_GIT_DIRTY=0
nvidia-smi --query-gpu=uuid,name --format=csv,noheader
# wheels not yet installed on this machine (a split carry: a warm machine keeps what an earlier call installed)
new=$(for w in .whl/*.whl .whl-*/*.whl; do [ -e "$w" ] && [ ! -f "/tmp/site/.got.${w##*/}" ] && echo "$w"; done)
[ -z "$new" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $new 2>&1 | tail -2
  for w in $new; do touch "/tmp/site/.got.${w##*/}"; done; echo "installed: $(echo $new | wc -w) wheels"; }
# the stage's compile caches, for the benchmarks too (a JIT extension built once per machine)
eval "$(python3 -c 'import sys; from decodegap.measure.setup import environment_variables as e
for k, v in e(sys.argv[1]).items(): print(f"export {k}={v}")' $CACHE)"
if [ ! -d /tmp/dg/results/raw ]; then mkdir -p /tmp/dg/results/environment /tmp/dg/logs && cp -r results/raw /tmp/dg/results/; fi
sleep 1; touch /tmp/marker.$START
pack() {
  cd /tmp/dg && { find results -name 's*.json' -newer /tmp/marker.$START; ls results/environment/*.json 2>/dev/null; } | tar czf $OUT/sessions.tar.gz -T -
  find logs -newer /tmp/marker.$START -type f | tar czf $OUT/logs.tar.gz -T - 2>/dev/null
  echo "packed $(tar tzf $OUT/sessions.tar.gz | wc -l) files at +$(( $(date +%s) - START )) s"
}
trap pack EXIT
ENV=/tmp/dg/results/environment/$GPU.json
stage() {
  [ -f $ENV ] && { echo "stage: record exists"; return; }
  t=$(date +%s)
  python3 -m decodegap.measure.setup --gpu $GPU --cache-dir $CACHE --attn ${ATTN_PATHS:-sdpa sdpa-flash sdpa-cudnn sdpa-efficient sdpa-math flex fa2 fa3 flashinfer fa4} \
    --quant ${QUANT_PATHS:-bf16 bnb-nf4 awq-marlin gptq-exllamav2 int4-tinygemm gemlite} --layouts 28/4/128 32/8/128 --out $ENV \
    > /tmp/dg/logs/stage.log 2>&1; rc=$?; echo "stage rc $rc in $(( $(date +%s) - t )) s"
  grep -E "cannot run|error" /tmp/dg/logs/stage.log | cut -c1-220; [ -f $ENV ] || exit 3
}
B() { python3 -m decodegap.measure.batch --root /tmp/dg --deadline-at $END --log-dir /tmp/dg/logs --gpu $GPU "$@" -- --environment $ENV 2>&1 | grep -v "^\s*$" | tail -${TAILN:-4}; echo "  at +$(( $(date +%s) - START )) s"; }
