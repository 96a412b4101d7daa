# Sourced by one call on a lent GPU (README: "On a lent GPU ..."): a call has a hard time limit and its
# working tree is replaced by the next call, so sessions are written outside the tree, under
# /tmp/dg, and packed into $OUT on exit, with one deadline for every batch run of the call.
#
#   SHA=<commit> [GPU=<config/gpus.yaml key>: this device's type] [BUDGET_S=545] [TAILN=4] bash -c '. envs/lent_gpu.sh; stage; B --models ... --sessions 0'
#
# - the tree is copied once per machine to /tmp/dgcode and everything runs from there: the stage's
#   JIT builds and the sessions then name the same source paths (one build per machine), and a
#   daemon (below) never reads a tree that the next call is replacing;
# - the wheels in .whl/ (and .whl-*/, a second set carried by another call) are installed into
#   /tmp/site (PYTHONPATH), each once per machine, so two calls can carry a set too large for one
#   (only while the machine stays warm: it goes back about 30 s after a call returns, and a fresh
#   one stages again, about 200-270 s on the H200 with ExLlamaV2's and Marlin's builds);
# - every call adds the tree's results/raw/ to /tmp/dg, so the batch skips every session recorded
#   there or earlier on this machine; pack() sends each finished session that the tree lacks once,
#   in the first call that ends after it;
# - `stage` writes this machine's environment record, results/environment/<gpu>@<UTC time>.json (the
#   attention paths ATTN_PATHS, the weight paths QUANT_PATHS, the cards' head layouts; the fused step's
#   launch shapes tuned in TUNE_S seconds, 0: the table, then refined in the whole step in REFINE_S; or with
#   SHAPES_FROM=results/environment/<record>.json another machine's choice, so that a cell's sessions on
#   several machines run one set of shapes), unless this
#   machine has staged already; `B ...` runs `python -m decodegap.measure.batch` with the shared
#   deadline and that record.
#
# More sessions than one call's 10 minutes, without staging again: `daemon 'B ...; B ...' SECONDS`
# runs the list in its own process session, which outlives the call, with a deadline SECONDS after
# the call's start; each following call, sent as soon as the last returns (within the machine's
# idle release), runs `collect S`: it waits until the daemon ends or S seconds pass and packs what
# finished. A call that lands on a fresh machine says so and packs nothing.
#
# Unpack $OUT/sessions.tar.gz here and add it with `python -m decodegap.measure.ingest DIR` after
# every call, before the next call that could land on a fresh machine: such a call skips only what
# the tree holds, so it measures again any session still waiting here, and ingest refuses the second
# copy. The packed environment record is this machine's: ingest adds it beside the others (records are
# data, never replaced), and the sessions of this machine name it.
set -u
# the commit the sessions record, written out in full (a collect call passes its daemon's): checked before
# anything runs, as a call without it would otherwise stop at the first use with "unbound variable"
[[ "${SHA:-}" =~ ^[0-9a-f]{40}$ ]] || { echo "envs/lent_gpu.sh: SHA='${SHA:-}' is not a full commit: pass SHA=<the 40-digit commit the tree holds>, the daemon's for a collect call" >&2; exit 2; }
START=$(date +%s); END=$(( START + ${BUDGET_S:-545} ))
# the GPU type: config/gpus.yaml's key for this device's name (a call that asks for one kind may land on
# another: an H200 call ran on an H100 on 2026-12-05); an unknown device stops the call, naming it
GPU=${GPU:-$(PYTHONPATH=scripts python3 -m decodegap.core.config gpu-key "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")} || exit 3
CACHE=$HOME/.cache/decodegap/$GPU  # the compile caches its stage and sessions share
TREE=$PWD  # this call's tree: its carried wheels
if [ "$PWD" != /tmp/dgcode ]; then
  [ -d /tmp/dgcode ] || { mkdir -p /tmp/dgcode && cp -a . /tmp/dgcode/ && echo "$SHA" > /tmp/dgcode/.sha; }
  # the machine runs the code of its first call: a call with other code would be recorded under the wrong commit
  [ "$(cat /tmp/dgcode/.sha)" = "$SHA" ] || { echo "this machine runs commit $(cat /tmp/dgcode/.sha), not $SHA: give it back first"; exit 4; }
  cd /tmp/dgcode
fi
export PYTHONPATH=/tmp/site:scripts PYTHONUNBUFFERED=1 DECODEGAP_GIT_COMMIT=$SHA DECODEGAP_GIT_DIRTY=0
if [ -z "${DG_DAEMON:-}" ]; then
  nvidia-smi --query-gpu=uuid,name --format=csv,noheader
  # wheels not yet installed on this machine (a split carry: a warm machine keeps what an earlier call installed)
  new=$(for w in "$TREE"/.whl/*.whl "$TREE"/.whl-*/*.whl; do [ -e "$w" ] && [ ! -f "/tmp/site/.got.${w##*/}" ] && echo "$w"; done)
  [ -z "$new" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $new 2>&1 | tail -2
    for w in $new; do touch "/tmp/site/.got.${w##*/}"; done; echo "installed: $(echo $new | wc -w) wheels"; }
fi
# the stage's compile caches, for the benchmarks too (a JIT extension built once per machine)
eval "$(python3 -c 'import sys; from decodegap.measure.setup import environment_variables as e
for k, v in e(sys.argv[1]).items(): print(f"export {k}={v}")' $CACHE)"
if [ ! -d /tmp/dg/results/raw ]; then
  mkdir -p /tmp/dg/results/environment /tmp/dg/logs /tmp/dg/results/raw
  touch /tmp/dg/.packed
fi
# every call adds what its tree holds (a session ingested since this machine's first call, too), so
# the batch skips it; pack() leaves out whatever the tree holds
# (a tree too large to carry results/raw/ carries its manifest, results/raw.sha256: B skips what it lists)
[ -n "${DG_DAEMON:-}" ] || [ ! -d "$TREE"/results/raw ] || cp -r -n "$TREE"/results/raw/. /tmp/dg/results/raw/
pack() {
  # each session once: finished after the last pack and before this one
  touch /tmp/dg/.packing
  cd /tmp/dg && { find results -name 's*.json' -newer .packed ! -newer .packing | while read -r f; do [ -e "$TREE/$f" ] || echo "$f"; done
    for f in results/environment/*.json; do [ -e "$f" ] && [ ! -e "$TREE/$f" ] && echo "$f"; done; } | tar czf $OUT/sessions.tar.gz -T -
  find logs -newer .packed ! -newer .packing -type f | tar czf $OUT/logs.tar.gz -T - 2>/dev/null
  mv .packing .packed
  echo "packed $(tar tzf $OUT/sessions.tar.gz | grep -c 'raw/') sessions at +$(( $(date +%s) - START )) s"
}
[ -n "${DG_DAEMON:-}" ] || trap pack EXIT
ENV=$(cat /tmp/dg/.staged 2>/dev/null)  # this machine's record, once staged
stage() {
  [ -n "$ENV" ] && [ -f "$ENV" ] && { echo "stage: this machine's record exists ($ENV)"; return; }
  t=$(date +%s)
  python3 -m decodegap.measure.setup --gpu $GPU --cache-dir $CACHE --attn ${ATTN_PATHS:-sdpa sdpa-flash sdpa-cudnn sdpa-efficient sdpa-math flex fa2 fa3 flashinfer fa4} \
    --quant ${QUANT_PATHS:-bf16 bnb-nf4 awq-marlin gptq-exllamav2 int4-tinygemm gemlite} --layouts 28/4/128 32/8/128 \
    --tune-s ${TUNE_S:-120} --refine-s ${REFINE_S:-0} ${SHAPES_FROM:+--shapes-from $SHAPES_FROM} --out-dir /tmp/dg/results/environment --receipt /tmp/dg/stage-receipt.json > /tmp/dg/logs/stage.log 2>&1; rc=$?
  echo "stage rc $rc in $(( $(date +%s) - t )) s"
  grep -E "cannot run|error|checking|wrote" /tmp/dg/logs/stage.log | cut -c1-220; [ -f /tmp/dg/stage-receipt.json ] || exit 3
  ENV=$(python3 -c 'import json; print(json.load(open("/tmp/dg/stage-receipt.json"))["record"])'); echo "$ENV" > /tmp/dg/.staged
}
# llama.cpp (the engines experiment's mode llamacpp), built once per machine from the trimmed source
# distribution carried in .whl-llama/ with its build backend's wheels (envs/README.md: llama.cpp), for
# sm_90 with CUDA graphs (llama.cpp's default); before `stage`, whose gguf-* checks load it
buildllama() {
  [ -f /tmp/site/.got.llama ] && { echo "llama.cpp: built on this machine already"; return; }
  local t; t=$(date +%s)
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    python3 -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir --target /tmp/site \
    "$TREE"/.whl-llama/llama_cpp_python-*-trimmed.tar.gz > /tmp/dg/logs/llama-build.log 2>&1; local rc=$?
  echo "llama.cpp build rc $rc in $(( $(date +%s) - t )) s"
  [ $rc = 0 ] && touch /tmp/site/.got.llama || tail -25 /tmp/dg/logs/llama-build.log
}
B() { python3 -m decodegap.measure.batch --root /tmp/dg --listed-in "$TREE" --deadline-at $END --log-dir /tmp/dg/logs --gpu $GPU "$@" -- --environment $ENV 2>&1 | grep -v "^\s*$" | tail -${TAILN:-4}; echo "  at +$(( $(date +%s) - START )) s"; }
daemon() {
  [ -f /tmp/dg/daemon.pid ] && kill -0 "$(cat /tmp/dg/daemon.pid)" 2>/dev/null && { echo "daemon: already running"; return; }
  DG_DAEMON=1 DG_END=$(( START + $2 )) SHA=$SHA GPU=$GPU TAILN=${TAILN:-4} setsid bash -c ". envs/lent_gpu.sh; END=\$DG_END; $1; echo daemon done" \
    > /tmp/dg/daemon.log 2>&1 < /dev/null &
  echo $! > /tmp/dg/daemon.pid; echo "daemon: pid $(cat /tmp/dg/daemon.pid), deadline +$2 s"
}
collect() {
  [ -f /tmp/dg/daemon.pid ] || { echo "collect: no daemon on this machine (a fresh one): nothing to wait for"; return; }
  local pid; pid=$(cat /tmp/dg/daemon.pid)
  while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - START )) -lt "$1" ]; do sleep 5; done
  kill -0 "$pid" 2>/dev/null && echo "collect: daemon still running" || echo "collect: daemon finished"
  tail -${TAILN:-4} /tmp/dg/daemon.log
}
