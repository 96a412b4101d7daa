#!/usr/bin/env bash
# Stop the single-node SLURM test cluster started by up.sh (slurmd, slurmctld, munged).
#   --purge   also forget all jobs and logs (slurmctld state, /var/log/slurm/*),
#             so the next up.sh starts with job id 1 and empty logs.
# Safe to run when nothing is running.
set -uo pipefail

PURGE=0
[ "${1:-}" = "--purge" ] && PURGE=1

RUNDIR=/run/slurm
log() { printf '[slurm-down %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stop_pidfile() { # pidfile name
  local pf=$1 pid
  [ -s "$pf" ] || return 0
  pid=$(cat "$pf")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    log "stopping $2 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
      log "$2 did not exit, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pf"
}

# Cancel jobs still queued/running, so no slurmstepd/job processes are left behind.
if scontrol ping 2>/dev/null | grep -q 'is UP'; then
  ids=$(squeue -h -t PENDING,RUNNING,SUSPENDED,CONFIGURING -o '%A' 2>/dev/null | sort -u)
  if [ -n "$ids" ]; then
    log "cancelling jobs: $(echo $ids)"
    scancel $ids 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(squeue -h -t PENDING,RUNNING,SUSPENDED,CONFIGURING,COMPLETING -o %A 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
fi

# slurmd first (so it does not log connection errors), then the controller, then munge.
stop_pidfile "$RUNDIR/slurmd.pid" slurmd
stop_pidfile "$RUNDIR/slurmctld.pid" slurmctld
stop_pidfile /run/munge/munged.pid munged

if [ "$PURGE" = 1 ]; then
  log "purging slurmctld state and logs"
  rm -rf /var/lib/slurm/slurmctld/* /var/lib/slurm/slurmd/*
  rm -f /var/log/slurm/*.log /var/log/slurm/*.jsonl
fi
log "stopped"
