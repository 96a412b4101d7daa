#!/usr/bin/env bash
# Bring up a real single-node SLURM cluster (Debian 12 packages, SLURM 22.05) on
# localhost, with fake *typed* GPUs declared as gres so that jobs can request
# e.g. `--gpus=h200:1` or `--gres=gpu:l4:1` on a machine that has no GPU.
#
#   Run as root.  No systemd needed: the daemons are started directly.
#   Idempotent: running it again while the cluster is up is a no-op (it only
#   restarts the daemons when the generated config changed).
#
# Tunables (environment):
#   SLURM_CI_GPU_TYPES      space separated gres types   (default: the gpu_model values of config/gpus.yaml)
#   SLURM_CI_GPUS_PER_TYPE  Count declared for each type (default: 4)
#   SLURM_CI_FEATURES       node features for --constraint/-C, comma separated
#                           (default: "gpu,<the gpu types>")
#   SLURM_CI_PARTITION      name of the single default partition (default: debug)
#   SLURM_CI_MIN_JOB_AGE    seconds finished jobs stay visible in scontrol/squeue (default: 86400)
#   SLURM_CI_CLUSTER        ClusterName (default: decodegap)
#   SLURM_CI_WAIT           seconds to wait for the node to become idle (default: 90)
#
# Files: /etc/slurm/{slurm.conf,gres.conf,jobcomp.lua}  (jobcomp.lua is copied from this folder)
#        logs in /var/log/slurm/: slurmctld.log, slurmd.log, jobcomp.jsonl (one JSON line per ended job)
set -euo pipefail

GPU_TYPES=${SLURM_CI_GPU_TYPES:-"h200 h100 a100 l40s l4 cpu"}  # the slurm.gpu_model values of config/gpus.yaml
GPUS_PER_TYPE=${SLURM_CI_GPUS_PER_TYPE:-4}
PARTITION=${SLURM_CI_PARTITION:-debug}
MIN_JOB_AGE=${SLURM_CI_MIN_JOB_AGE:-86400}
CLUSTER=${SLURM_CI_CLUSTER:-decodegap}
WAIT_S=${SLURM_CI_WAIT:-90}
NODE=localhost
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

ETC=/etc/slurm
LOGDIR=/var/log/slurm
STATEDIR=/var/lib/slurm/slurmctld
SPOOLDIR=/var/lib/slurm/slurmd
RUNDIR=/run/slurm
CTLD_PID=$RUNDIR/slurmctld.pid
SLURMD_PID=$RUNDIR/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
FAKEDEV=/run/slurm-fake-gpu

log() { printf '[slurm-up %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
# one up.sh at a time
exec 9>/run/slurm-ci-up.lock
flock -w 300 9 || die "another up.sh holds /run/slurm-ci-up.lock"

# --------------------------------------------------------------------------
# 1. packages
# --------------------------------------------------------------------------
PKGS=(munge slurmctld slurmd slurm-client)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Try without refreshing the package lists first (fast path); refresh on failure.
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/slurm-ci-apt.log 2>&1; then
    apt-get update -q >>/tmp/slurm-ci-apt.log 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/slurm-ci-apt.log 2>&1 \
      || { tail -n 30 /tmp/slurm-ci-apt.log >&2; die "apt-get install failed"; }
  fi
fi
id slurm >/dev/null 2>&1 || die "user 'slurm' missing after install"
id munge >/dev/null 2>&1 || die "user 'munge' missing after install"

# --------------------------------------------------------------------------
# 2. munge
# --------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0700 /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile=/etc/munge/munge.key --force
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0600 /etc/munge/munge.key

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
  log "starting munged"
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGE_PID"
  runuser -u munge -- /usr/sbin/munged 9>&-   # do not leak the lock fd into the daemon
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged does not answer (see /var/log/munge/munged.log)"
fi

# --------------------------------------------------------------------------
# 3. config
# --------------------------------------------------------------------------
install -d -o slurm -g slurm -m 0755 "$LOGDIR" "$STATEDIR" "$RUNDIR"
install -d -o root -g root -m 0755 "$SPOOLDIR" "$ETC"

# Real hardware of this machine, as slurmd sees it (CPUs, sockets, cores, threads, memory).
HW=$(slurmd -C | head -n1 | sed -e 's/^NodeName=[^ ]* //')
[ -n "$HW" ] || die "slurmd -C gave nothing"

# SLURM 22.05 silently drops gres/gpu entries without File= ("Removing file-less
# GPU"), and warns when File= is not a character/block device.  So each fake GPU
# gets its own character device node that is really /dev/null (major 1, minor 3).
install -d -o root -g root -m 0755 "$FAKEDEV"
node_gres=""
features="gpu"
gres_lines=""
idx=0
for t in $GPU_TYPES; do
  case "$t" in
    # SLURM 22.05 accepts [A-Za-z0-9_.-] (tested); snakemake-executor-plugin-slurm
    # 2.8.0 rejects '-' in gpu_model/gres (regex [a-zA-Z0-9_.]), so prefer '_' or '.'.
    *[!A-Za-z0-9_.-]*) die "gres type '$t': only letters, digits, '_', '.', '-' are allowed";;
  esac
  first=$idx
  for _ in $(seq "$GPUS_PER_TYPE"); do
    dev="$FAKEDEV/nvidia$idx"
    if [ ! -c "$dev" ]; then
      rm -f "$dev"
      mknod -m 0666 "$dev" c 1 3 2>/dev/null || touch "$dev"   # plain file also works (logs an error)
    fi
    idx=$((idx + 1))
  done
  node_gres+="${node_gres:+,}gpu:${t}:${GPUS_PER_TYPE}"
  features+=",${t}"
  gres_lines+="NodeName=${NODE} Name=gpu Type=${t} File=${FAKEDEV}/nvidia[${first}-$((idx - 1))]"$'\n'
done
features=${SLURM_CI_FEATURES:-$features}

new_conf=$(cat <<EOF
# generated by .ci/slurm/up.sh -- single node test cluster, fake typed GPUs
ClusterName=${CLUSTER}
SlurmctldHost=${NODE}
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=${STATEDIR}
SlurmdSpoolDir=${SPOOLDIR}
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${LOGDIR}/slurmctld.log
SlurmdLogFile=${LOGDIR}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=Gres
MpiDefault=none
MailProg=/bin/true
# no cgroups (sandbox/container friendly)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# no accounting database: job status comes from slurmctld (squeue/scontrol)
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# one JSON line per finished job incl. its GPU request: ${ETC}/jobcomp.lua
# -> ${LOGDIR}/jobcomp.jsonl (survives the MinJobAge purge and daemon restarts)
JobCompType=jobcomp/lua
# keep finished jobs visible to scontrol show job / squeue --states=all
MinJobAge=${MIN_JOB_AGE}
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
GresTypes=gpu
KillWait=5
InactiveLimit=0
Waittime=0
NodeName=${NODE} NodeAddr=127.0.0.1 ${HW} Gres=${node_gres} Features=${features} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOF
)

new_gres=$(printf 'AutoDetect=off\n%s' "$gres_lines")

new_lua=$(cat "$HERE/jobcomp.lua")

changed=0
write_if_changed() { # path mode content
  local path=$1 mode=$2 content=$3
  if [ ! -f "$path" ] || [ "$(cat "$path")" != "$content" ]; then
    printf '%s\n' "$content" >"$path.tmp"
    chmod "$mode" "$path.tmp"
    mv -f "$path.tmp" "$path"
    changed=1
    log "wrote $path"
  fi
}
write_if_changed "$ETC/slurm.conf" 0644 "$new_conf"
write_if_changed "$ETC/gres.conf" 0644 "$new_gres"
write_if_changed "$ETC/jobcomp.lua" 0644 "$new_lua"
# slurmctld runs as SlurmUser=slurm; jobcomp.lua appends to this file
touch "$LOGDIR/jobcomp.jsonl"
chown slurm:slurm "$LOGDIR/jobcomp.jsonl"

# --------------------------------------------------------------------------
# 4. daemons
# --------------------------------------------------------------------------
# pid file points at a live process with the expected name (guards against stale
# pid files from an earlier boot whose pid got reused)
pid_alive() { # pidfile [name]
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 1
  [ -z "${2:-}" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
stop_pidfile() { # pidfile name
  local pf=$1 pid
  pid_alive "$pf" "$2" || { rm -f "$pf"; return 0; }
  pid=$(cat "$pf")
  log "stopping $2 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pf"
}

if [ "$changed" = 1 ]; then
  stop_pidfile "$SLURMD_PID" slurmd
  stop_pidfile "$CTLD_PID" slurmctld
fi

if ! pid_alive "$CTLD_PID" slurmctld; then
  log "starting slurmctld"
  /usr/sbin/slurmctld 9>&- || die "slurmctld failed to start; see $LOGDIR/slurmctld.log"
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
scontrol ping 2>/dev/null | grep -q 'is UP' || { tail -n 30 "$LOGDIR/slurmctld.log" >&2; die "slurmctld not answering"; }

if ! pid_alive "$SLURMD_PID" slurmd; then
  log "starting slurmd"
  /usr/sbin/slurmd -N "$NODE" 9>&- || { tail -n 30 "$LOGDIR/slurmd.log" >&2; die "slurmd failed to start"; }
fi

# --------------------------------------------------------------------------
# 5. wait for the node to be usable
# --------------------------------------------------------------------------
deadline=$(( $(date +%s) + WAIT_S ))
resumed=0
while :; do
  state=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n1 || true)
  case "$state" in
    idle|mix|alloc|comp) break;;
    *drain*|drng|down*|fail*|inval*)
      if [ $resumed -lt 3 ]; then
        reason=$(sinfo -h -N -n "$NODE" -o '%E' 2>/dev/null || true)
        log "node state '$state' ($reason): resuming"
        scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true
        resumed=$((resumed + 1))
      fi;;
  esac
  if [ "$(date +%s)" -ge "$deadline" ]; then
    sinfo -N -l >&2 || true
    tail -n 30 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
    die "node $NODE not idle after ${WAIT_S}s (state '$state')"
  fi
  sleep 0.5
done
log "cluster up: $(sinfo -h -N -n "$NODE" -o '%N %P %t cpus=%c mem=%m gres=%G')"
