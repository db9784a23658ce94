#!/usr/bin/env bash
# A real single-node Slurm on localhost (munged, slurmctld, slurmd, all started here, in
# WORK, on random ports, and stopped on exit) runs deploy/slurm-ingest.sh as an array of
# TASKS tasks over NIGHT into DEST. Needs root (slurmd) and Debian's slurmctld, slurmd,
# slurm-client and munge. Used by pipeline/tests/ingest.rs; exits with sbatch's status.
#
#   deploy/test-slurm.sh target/debug/tracemill NIGHT DEST WORK [TASKS] [PARTITION_BY]
set -euo pipefail
bin=$(realpath "$1") night=$2 dest=$3 work=$4 tasks=${5:-4} partition_by=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
T=$(realpath "$work")
rm -rf "$T/state" "$T/spool"
mkdir -p "$T/state" "$T/spool"

stop() {
  for p in slurmd slurmctld; do
    if [ -s "$T/$p.pid" ]; then kill "$(cat "$T/$p.pid")" 2>/dev/null || true; fi
  done
  munged -S "$T/munge.sock" --stop >/dev/null 2>&1 || true
  # Wait for the daemons to go, so that the directory can be removed.
  for _ in $(seq 50); do
    alive=0
    for p in slurmd slurmctld munged; do
      if [ -s "$T/$p.pid" ] && kill -0 "$(cat "$T/$p.pid")" 2>/dev/null; then alive=1; fi
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
}
trap stop EXIT

dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$T/munge.key"
munged -f -S "$T/munge.sock" --key-file="$T/munge.key" --log-file="$T/munged.log" \
  --pid-file="$T/munged.pid" --seed-file="$T/munged.seed"

host=$(hostname -s)
port=$(shuf -i 20000-59000 -n 1)
cat >"$T/slurm.conf" <<CONF
ClusterName=tracemill-test
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$T/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for i in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then break; fi
  if [ "$i" = 100 ]; then
    echo "slurm did not come up:" >&2
    tail -20 "$T/slurmctld.log" "$T/slurmd.log" >&2 || true
    exit 1
  fi
  sleep 0.2
done

set +e
# Through the environment (--export=ALL), not --export=ALL,PARTITION_BY=date,host: sbatch
# splits --export at commas.
export TRACEMILL=$bin PARTITION_BY=$partition_by
sbatch --wait --quiet --array=0-$((tasks - 1)) --cpus-per-task=1 --mem=500M \
  --output="$T/task-%a.log" --export=ALL \
  "$here/slurm-ingest.sh" "$night" "$dest"
status=$?
set -e
cat "$T"/task-*.log >&2
exit $status
