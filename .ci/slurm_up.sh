#!/usr/bin/env bash
# A one-node Slurm on localhost (munged + slurmctld + slurmd), for CI and tests/eval/test_eval_slurm_real.py.
# Idempotent: when the controller already answers, it only prints the SLURM_CONF line. Needs root and Debian's
# slurm-wlm and munge (installed here when missing). Everything lives under $WILDMERGE_SLURM_DIR (default
# /tmp/wildmerge-slurm); use the cluster with:  export SLURM_CONF=$WILDMERGE_SLURM_DIR/slurm.conf
set -euo pipefail
DIR=${WILDMERGE_SLURM_DIR:-/tmp/wildmerge-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
if [ -f "$CONF" ] && timeout 5 scontrol ping 2>/dev/null | grep -q UP && timeout 5 sinfo -h -o %T 2>/dev/null | grep -qv down; then
  echo "SLURM_CONF=$CONF"; exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
mkdir -p "$DIR"/{state,spool,log} /run/munge /var/log/munge /var/lib/munge
# munge: one key shared by controller, daemon and clients (all this machine)
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
CPUS=$(nproc)
cat > "$CONF" <<CONF
ClusterName=wildmerge-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
SchedulerType=sched/backfill
MaxArraySize=1001
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# (re)start the daemons with this configuration
for pidfile in "$DIR/slurmctld.pid" "$DIR/slurmd.pid"; do
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then kill "$(cat "$pidfile")"; sleep 1; fi
done
slurmctld -f "$CONF"
slurmd -f "$CONF" -N localhost
for _ in $(seq 30); do
  if scontrol ping 2>/dev/null | grep -q UP && sinfo -h -o %T 2>/dev/null | grep -Eq 'idle|mix|alloc'; then
    echo "SLURM_CONF=$CONF"; exit 0
  fi
  sleep 1
done
echo "slurm did not come up; see $DIR/log" >&2
tail -5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
exit 1
