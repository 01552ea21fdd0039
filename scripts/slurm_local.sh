#!/usr/bin/env bash
# A real Slurm cluster of N nodes on this one host, for the tests (tests/slurm, make test-slurm) and for trying
# `xmfu fleet` on a laptop; not a production cluster (docs/slurm-local.md).
#
#   scripts/slurm_local.sh start N [--throttle NODE PERCENT]...   nodes n1..nN; last stdout line: SLURM_CONF=<path>
#   scripts/slurm_local.sh status                                 one line per node: NODE HOSTNAME SLURMD_PID
#   scripts/slurm_local.sh stop                                   idempotent
#   scripts/slurm_local.sh throttle NODE PERCENT|off              cap a node's slurmd (and what it starts) to a CPU share
#   scripts/slurm_local.sh kill NODE                              SIGKILL a node's slurmd (a planted fault)
#   scripts/slurm_local.sh revive NODE                            start a killed node's slurmd again, wait until idle
#
# Environment: XMFU_SLURM_DIR (state, logs, slurm.conf; default /tmp/xmfu-slurm, never inside the repository),
# XMFU_SLURM_PORT (slurmctld's port, default 16817; node i listens on PORT+i), XMFU_SLURM_WAIT (seconds start and
# revive wait for idle nodes, default 60). Needs root (munged, /etc/hosts, cgroups), Debian's slurm-wlm (22.05) and
# munge: apt-get install -y slurm-wlm munge.
#
# How it works (each step was tried on a 2-core Debian bookworm machine):
# - munge: a random key /etc/munge/munge.key (1024 bytes, mode 400, owner munge; an existing key is kept),
#   /run/munge, /var/log/munge and /var/lib/munge owned by munge, munged run as the munge user; a munged already
#   answering (`munge -n | unmunge` says Success) is used and left running.
# - One slurm.conf (slurm.conf(5), Slurm 22.05) for the controller and every node: SlurmctldHost=<this host>(127.0.0.1)
#   on a non-default SlurmctldPort; per node `NodeName=nK NodeHostname=nK NodeAddr=127.0.1.K Port=PORT+K`, so each
#   slurmd has its own loopback address and port; the per-node files use %n (SlurmdSpoolDir, SlurmdPidFile,
#   SlurmdLogFile); SlurmUser=SlurmdUser=root; ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no
#   cgroup plugins, so nothing fights over this host's cgroups); ReturnToService=2 (a node that registers again is
#   back in service); SlurmdTimeout=10 (a killed slurmd's node is DOWN in sinfo within about 30 s).
# - /etc/hosts lines `127.0.1.K nK` (marked with a comment naming the state folder; stop removes those lines and
#   only those), so a rendezvous by node hostname (MASTER_ADDR=n1) reaches the right address.
# - Several slurmd on one host: slurmd(8) -N NODE runs the daemon as that node. Each runs in its own UTS namespace
#   (unshare(1) --uts) whose hostname is the node's name, so the tasks it starts see `hostname` = nK.
# - Throttling: the CFS bandwidth controller (the kernel's Documentation/scheduler/sched-bwc.rst): in cgroup v1's
#   cpu controller, /sys/fs/cgroup/cpu/xmfu-slurm-NODE with cpu.cfs_period_us=100000 and cpu.cfs_quota_us=
#   PERCENT*1000, the slurmd's PID written to cgroup.procs; the steps and tasks it starts later are forked inside that
#   cgroup and stay there (proctrack/linuxproc moves nothing). On a cgroup v2 host the same with cpu.max (that
#   branch was not tried on the machine above, which is cgroup v1).
set -euo pipefail

PROG=slurm_local.sh
DIR=${XMFU_SLURM_DIR:-/tmp/xmfu-slurm}
PORT=${XMFU_SLURM_PORT:-16817}
WAIT=${XMFU_SLURM_WAIT:-60}
MAXNODES=32
CONF=$DIR/slurm.conf
NODES=$DIR/nodes
MARK="# xmfu-slurm-local"
CG_NAME=xmfu-slurm-
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

say() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: $*" >&2; exit 1; }
usage() {
  echo "$PROG: ${1:+$1. }Usage: $PROG start N [--throttle NODE PERCENT]... (N from 1 to $MAXNODES nodes n1..nN;" \
    "prints SLURM_CONF=<path> as its last line) | status | stop | throttle NODE PERCENT|off (PERCENT of one CPU," \
    "1 to 100) | kill NODE | revive NODE. State in \$XMFU_SLURM_DIR (now $DIR); see docs/slurm-local.md." >&2
  exit "${2:-2}"
}

need_tools() {
  local missing=() t
  for t in slurmctld slurmd munged munge unmunge sinfo scontrol scancel squeue unshare nsenter runuser timeout; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if ((${#missing[@]})); then
    echo "$PROG: ${missing[*]} not found: this script needs Debian's Slurm (22.05) and munge; install them with" \
      "apt-get install -y slurm-wlm munge (as root), then run it again." >&2
    exit 2
  fi
}

need_root() {
  [[ $(id -u) == 0 ]] || { echo "$PROG: must run as root: it starts munged and the Slurm daemons, and edits" \
    "/etc/hosts and /sys/fs/cgroup (try sudo $PROG ...)." >&2; exit 2; }
}

check_dir() {
  [[ $DIR == /* && $DIR != *[[:space:]]* ]] || usage "XMFU_SLURM_DIR must be an absolute path without spaces (is '$DIR')"
}

# pid_of FILE NAME: the PID in FILE when that process is alive and is NAME (not a reused PID), else nothing.
pid_of() {
  local pid
  [[ -r $1 ]] || return 1
  pid=$(tr -dc 0-9 <"$1")
  [[ -n $pid && -r /proc/$pid/comm ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
  [[ $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) != Z ]] || return 1  # a zombie is not alive
  echo "$pid"
}

# stop_pid PID NAME: SIGTERM, up to 10 s, then SIGKILL (up to 3 s more).
stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    [[ -d /proc/$pid ]] || return 0
    [[ $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) == Z ]] && return 0
    sleep 0.1
  done
  say "$2 (PID $pid) did not stop on SIGTERM in 10 s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do [[ -d /proc/$pid ]] || return 0; sleep 0.1; done
}

ctld_pid() { pid_of "$DIR/run/slurmctld.pid" slurmctld; }
slurmd_pid() { pid_of "$DIR/run/d-$1.pid" slurmd; }
node_known() { [[ -r $NODES ]] && awk -v n="$1" '$1 == n {f = 1} END {exit !f}' "$NODES"; }
node_field() { awk -v n="$1" -v f="$2" '$1 == n {print $f}' "$NODES"; }

need_node() {
  [[ $1 =~ ^n[1-9][0-9]*$ ]] || usage "'$1' is not a node name (n1, n2, ...)"
  ctld_pid >/dev/null || die "no cluster is running from $DIR (start one with $PROG start N)."
  node_known "$1" || usage "the cluster in $DIR has no node '$1' (it has $(awk '{print $1}' "$NODES" | paste -sd' '))"
}

# --- munge ----------------------------------------------------------------------------------------------------------
munge_ok() { timeout 10 munge -n 2>/dev/null | timeout 10 unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_ok; then return 0; fi
  id munge >/dev/null 2>&1 || die "there is no munge user: reinstall munge (apt-get install --reinstall -y munge)."
  install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  install -d -o munge -g munge -m 0755 /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    (umask 077 && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none)
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  # --force: a socket left behind by a munged that died is replaced.
  timeout 20 runuser -u munge -- munged --force || die "munged did not start; see /var/log/munge/munged.log."
  local i
  for ((i = 0; i < 100; i++)); do
    if munge_ok; then
      pid_of /run/munge/munged.pid munged >"$DIR/run/munged.ours" || true
      return 0
    fi
    sleep 0.1
  done
  die "munged started but \`munge -n | unmunge\` did not say Success within 10 s; see /var/log/munge/munged.log."
}

# --- /etc/hosts -----------------------------------------------------------------------------------------------------
# Rewritten in place (cat >), not renamed: in a container /etc/hosts is often a bind mount.
hosts_remove() {  # hosts_remove DIR: the lines this script added for the cluster in DIR
  grep -qF "$MARK $1" /etc/hosts 2>/dev/null || return 0
  local tmp
  tmp=$(mktemp)
  grep -vF "$MARK $1" /etc/hosts >"$tmp" || true
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

hosts_add() {
  local node addr port clash
  while read -r node addr port; do
    clash=$(awk -v n="$node" '!/^[[:space:]]*#/ && index($0, "'"$MARK"'") == 0 {for (i = 2; i <= NF; i++) if ($i == n) print}' /etc/hosts)
    [[ -z $clash ]] || die "/etc/hosts already names '$node' ($clash); this script will not override it: remove that line or run the cluster elsewhere."
  done <"$NODES"
  {
    [[ -z $(tail -c1 /etc/hosts) ]] || echo
    while read -r node addr port; do echo "$addr $node $MARK $DIR"; done <"$NODES"
  } >>/etc/hosts
}

# --- slurm.conf -----------------------------------------------------------------------------------------------------
write_conf() {
  local n=$1 i host cpus mem nodes=""
  host=$(hostname -s)
  cpus=$(nproc); ((cpus > 2)) && cpus=2
  # A node configured with more memory than the host reports would be refused (INVALID): at most 90% of it.
  mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo); ((mem > 8000)) && mem=8000
  : >"$NODES"
  for ((i = 1; i <= n; i++)); do
    echo "n$i 127.0.1.$i $((PORT + i))" >>"$NODES"
    nodes+=${nodes:+,}n$i
  done
  cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh start $n: a test cluster of $n nodes on this host (docs/slurm-local.md).
ClusterName=xmfu
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/d-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/d-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
SlurmdTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=60
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
EOF
  while read -r node addr port; do
    echo "NodeName=$node NodeHostname=$node NodeAddr=$addr Port=$port CPUs=$cpus RealMemory=$mem State=UNKNOWN" >>"$CONF"
  done <"$NODES"
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE" >>"$CONF"
}

# --- daemons --------------------------------------------------------------------------------------------------------
start_slurmd() {  # start_slurmd NODE: slurmd -N NODE in a UTS namespace named NODE (it forks into the background)
  mkdir -p "$DIR/spool/$1"
  SLURM_CONF=$CONF timeout 30 unshare --uts sh -c 'hostname "$1" && exec slurmd -N "$1"' sh "$1" \
    || die "slurmd for $1 did not start; see $DIR/log/d-$1.log."
}

# node_states: "NODE STATE" per node, from sinfo (nothing when slurmctld does not answer in 10 s).
node_states() { SLURM_CONF=$CONF timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true; }

# last_error NODE: the last error line of the node's slurmd log (but the harmless MPI plugin one), else nothing.
last_error() {
  grep 'error:' "$DIR/log/d-$1.log" 2>/dev/null | grep -v 'mpi/pmix' | tail -n 1 | sed 's/^\[[^]]*\] //' || true
}

# wait_idle NODE...: every NODE idle within $WAIT s, else a one-paragraph message (return 1). A node whose slurmd
# is gone for 3 s fails it at once.
wait_idle() {
  local deadline=$((SECONDS + WAIT)) states node bad gone dead=0 why=""
  while :; do
    states=$(node_states)
    bad="" gone=""
    for node in "$@"; do
      awk -v n="$node" '$1 == n && $2 == "idle" {f = 1} END {exit !f}' <<<"$states" && continue
      bad+=" $node"
      slurmd_pid "$node" >/dev/null || gone+=" $node"
    done
    [[ -z $bad ]] && return 0
    if [[ -n $gone ]]; then dead=$((dead + 1)); else dead=0; fi
    if ((SECONDS >= deadline || dead >= 6)); then
      for node in $gone; do why+=" $node's slurmd exited (its log: $(last_error "$node"))."; done
      local when="within $WAIT s (XMFU_SLURM_WAIT)"
      ((dead >= 6)) && when="(their slurmd is gone)"
      echo "$PROG: node(s)$bad of the cluster in $DIR were not idle $when:$why sinfo said" \
        "'$(paste -sd, <<<"${states:-nothing (slurmctld did not answer)}")'. The logs say why: $DIR/log/slurmctld.log," \
        "$DIR/log/d-NODE.log, /var/log/munge/munged.log (a port in use: XMFU_SLURM_PORT, now $PORT; a slow host:" \
        "a larger XMFU_SLURM_WAIT)." >&2
      return 1
    fi
    sleep 0.5
  done
}

# --- throttling (cgroup CPU bandwidth) ------------------------------------------------------------------------------
cg_v1=/sys/fs/cgroup/cpu
cg_v2=/sys/fs/cgroup

cg_dir() {  # the cgroup directory for NODE, v1 when the cpu controller is mounted there, else v2
  if [[ -e $cg_v1/cpu.cfs_quota_us ]]; then echo "$cg_v1/$CG_NAME$1"; else echo "$cg_v2/$CG_NAME$1"; fi
}

cg_release() {  # cg_release NODE: its processes back to the root cgroup, the cgroup removed
  local d root pid
  d=$(cg_dir "$1"); root=$(dirname "$d")
  [[ -d $d ]] || return 0
  while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$d/cgroup.procs"
  rmdir "$d" 2>/dev/null || say "could not remove the cgroup $d (processes still in it?)"
}

throttle() {  # throttle NODE PERCENT|off
  local node=$1 pct=$2 d pid
  need_node "$node"
  if [[ $pct == off ]]; then cg_release "$node"; say "$node: not throttled"; return 0; fi
  [[ $pct =~ ^[1-9][0-9]*$ ]] && ((pct <= 100)) || usage "PERCENT must be a whole number from 1 to 100, or off (is '$pct')"
  pid=$(slurmd_pid "$node") || die "$node's slurmd is not running (revive it first: $PROG revive $node)."
  d=$(cg_dir "$node")
  if [[ -e $cg_v1/cpu.cfs_quota_us ]]; then
    mkdir -p "$d"
    echo 100000 >"$d/cpu.cfs_period_us"
    echo $((pct * 1000)) >"$d/cpu.cfs_quota_us"
  elif [[ -e $cg_v2/cgroup.controllers ]] && grep -qw cpu "$cg_v2/cgroup.controllers"; then
    grep -qw cpu "$cg_v2/cgroup.subtree_control" || echo +cpu >"$cg_v2/cgroup.subtree_control"
    mkdir -p "$d"
    echo "$((pct * 1000)) 100000" >"$d/cpu.max"
  else
    die "no cgroup cpu controller here (neither $cg_v1/cpu.cfs_quota_us nor cpu in $cg_v2/cgroup.controllers): cannot throttle."
  fi
  echo "$pid" >"$d/cgroup.procs"
  say "$node: slurmd (PID $pid) and the steps it starts from now on are capped at $pct% of one CPU ($d)"
}

# --- subcommands ----------------------------------------------------------------------------------------------------
cmd_stop() {
  local quiet=${1:-} stopped=0 f pid node
  if pid=$(ctld_pid); then
    # Jobs first, so no slurmstepd or task outlives its slurmd (bounded: 10 s).
    SLURM_CONF=$CONF timeout 10 scancel --quiet --partition=debug 2>/dev/null || true
    for ((f = 0; f < 20; f++)); do
      [[ -z $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.5
    done
  fi
  for f in "$DIR"/run/d-*.pid; do
    [[ -e $f ]] || continue
    node=${f##*/d-}; node=${node%.pid}
    if pid=$(slurmd_pid "$node"); then stop_pid "$pid" "slurmd $node"; stopped=1; fi
    cg_release "$node"
    rm -f "$f"
  done
  if [[ -r $NODES ]]; then
    while read -r node _; do cg_release "$node"; done <"$NODES"
  fi
  if pid=$(ctld_pid); then stop_pid "$pid" slurmctld; stopped=1; fi
  rm -f "$DIR/run/slurmctld.pid"
  if pid=$(pid_of "$DIR/run/munged.ours" munged); then stop_pid "$pid" munged; stopped=1; fi
  rm -f "$DIR/run/munged.ours"
  if grep -qF "$MARK $DIR" /etc/hosts 2>/dev/null; then hosts_remove "$DIR"; stopped=1; fi
  [[ -n $quiet ]] && return 0
  if ((stopped)); then say "stopped the cluster in $DIR (its logs stay in $DIR/log)"; else say "no cluster was running from $DIR"; fi
}

cmd_start() {
  local n throttles=() i node other
  [[ $# -ge 1 ]] || usage "start needs the number of nodes"
  n=$1; shift
  [[ $n =~ ^[1-9][0-9]*$ ]] && ((n <= MAXNODES)) || usage "N must be a whole number from 1 to $MAXNODES (is '$n')"
  while (($#)); do
    case $1 in
      --throttle)
        [[ $# -ge 3 ]] || usage "--throttle needs NODE and PERCENT"
        [[ $2 =~ ^n[1-9][0-9]*$ ]] && ((${2#n} <= n)) || usage "--throttle: no node '$2' in a cluster of $n (n1..n$n)"
        [[ $3 =~ ^[1-9][0-9]*$ ]] && (($3 <= 100)) || usage "--throttle: PERCENT must be a whole number from 1 to 100 (is '$3')"
        throttles+=("$2" "$3"); shift 3 ;;
      *) usage "unknown option '$1' for start" ;;
    esac
  done
  if ctld_pid >/dev/null; then
    die "a cluster is already running from $DIR (SLURM_CONF=$CONF): stop it first ($PROG stop), or use it."
  fi
  # Another state folder's cluster holds the same ports and node names: refuse while its slurmctld lives.
  for other in $(grep -F "$MARK " /etc/hosts 2>/dev/null | sed "s/.*$MARK //" | sort -u); do
    [[ $other == "$DIR" ]] && continue
    if pid_of "$other/run/slurmctld.pid" slurmctld >/dev/null; then
      die "a cluster of this script is running from $other: stop it (XMFU_SLURM_DIR=$other $PROG stop) or use it (SLURM_CONF=$other/slurm.conf)."
    fi
    say "removing the /etc/hosts lines of a cluster that is gone ($other)"
    hosts_remove "$other"
  done
  cmd_stop quiet  # what a crashed earlier run left in this folder
  local t0=$SECONDS
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$CONF" "$NODES"
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log"
  start_munge
  write_conf "$n"
  hosts_add
  SLURM_CONF=$CONF timeout 30 slurmctld -c || { say "slurmctld did not start; see $DIR/log/slurmctld.log"; cmd_stop quiet; exit 1; }
  for ((i = 1; i <= n; i++)); do start_slurmd "n$i"; done
  mapfile -t all < <(awk '{print $1}' "$NODES")
  if ! wait_idle "${all[@]}"; then
    say "stopping what was started (the logs stay in $DIR/log)"
    cmd_stop quiet
    exit 1
  fi
  for ((i = 0; i < ${#throttles[@]}; i += 2)); do throttle "${throttles[i]}" "${throttles[i + 1]}"; done
  say "$n node(s) idle after $((SECONDS - t0)) s: ${all[*]} (partition debug); state and logs in $DIR"
  echo "SLURM_CONF=$CONF"
}

cmd_status() {
  local node addr port pid host
  if ! ctld_pid >/dev/null || [[ ! -r $NODES ]]; then
    echo "$PROG: no cluster is running from $DIR"
    return 3
  fi
  while read -r node addr port; do
    if pid=$(slurmd_pid "$node"); then
      host=$(timeout 5 nsenter --uts -t "$pid" hostname 2>/dev/null || echo "$node")
      echo "$node $host $pid"
    else
      echo "$node $node -"
    fi
  done <"$NODES"
}

# A node that dies takes everything on it along: slurmd and every process of its steps. Those all live in the
# node's own UTS namespace (slurmd runs in it, and what it starts inherits it: unshare(1), namespaces(7)), so
# every process whose /proc/PID/ns/uts is slurmd's is killed with it.
cmd_kill() {
  local pid ns p killed=0
  need_node "$1"
  pid=$(slurmd_pid "$1") || { say "$1's slurmd is not running"; return 0; }
  ns=$(readlink "/proc/$pid/ns/uts") || { say "$1: cannot read slurmd's namespace"; return 1; }
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/uts" 2>/dev/null)" = "$ns" ] || continue
    kill -KILL "${p#/proc/}" 2>/dev/null && killed=$((killed + 1))
  done
  say "$1: killed slurmd (PID $pid) and its node's other processes ($killed in all) with SIGKILL, as a node that dies; slurmctld marks the node DOWN once it misses its pings for SlurmdTimeout (10 s): about 30 s here"
}

cmd_revive() {
  need_node "$1"
  if slurmd_pid "$1" >/dev/null; then say "$1's slurmd is running"; else start_slurmd "$1"; fi
  wait_idle "$1" || exit 1
  say "$1: idle"
}

(($#)) || usage "no command given"
cmd=$1; shift
case $cmd in
  -h|--help|help) usage "" 0 ;;
  start) check_dir; need_tools; need_root; cmd_start "$@" ;;
  stop) (($# == 0)) || usage "stop takes no arguments"; check_dir; need_root; cmd_stop ;;
  status) (($# == 0)) || usage "status takes no arguments"; check_dir; cmd_status ;;
  throttle) (($# == 2)) || usage "throttle needs NODE and PERCENT (or off)"; check_dir; need_root; throttle "$1" "$2" ;;
  kill) (($# == 1)) || usage "kill needs NODE"; check_dir; need_root; cmd_kill "$1" ;;
  revive) (($# == 1)) || usage "revive needs NODE"; check_dir; need_tools; need_root; cmd_revive "$1" ;;
  *) usage "unknown command '$cmd'" ;;
esac
