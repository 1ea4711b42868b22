#!/usr/bin/env bash
# A real four-node Slurm cluster on this one machine, for allot's demo and
# integration tests: its own munged, one slurmctld (or a primary and a
# backup: ALLOT_BACKUP_CTLD=1) and four slurmd (n1..n4,
# 8 fake GPUs each), everything under one directory. Slurm 22.05.8 (this
# host's, Debian 12's) by default; 24.11.5 (Debian 13's) with
# ALLOT_SLURM_RELEASE=24.11, whose daemons and commands run chrooted into the
# Debian 13 root scripts/install-deps.sh --slurm 24.11 makes (DIR must then
# lie inside that root; the daemons see it as DIR without the root's prefix).
#
# Usage:
#   scripts/cluster.sh up DIR [--plugins stock|allot|installed]
#   scripts/cluster.sh down DIR
#   scripts/cluster.sh env DIR        # eval "$(scripts/cluster.sh env DIR)"
#   scripts/cluster.sh logs DIR [N]   # last N (default 40) lines of every log
#   scripts/cluster.sh status DIR     # daemons alive? and sinfo
#   scripts/cluster.sh restart-ctld DIR  # restart slurmctld only (reloads plugins)
#   scripts/cluster.sh kill-ctld DIR primary|backup   # SIGKILL one slurmctld
#   scripts/cluster.sh start-ctld DIR primary|backup  # start it (again)
#   scripts/cluster.sh in-control DIR # which slurmctld is in control
#
# up       creates DIR if needed, wipes its Slurm state, spool, logs and pids
#          (keeping DIR/plugins, DIR/jobs, the munge key and DIR/ledger.db),
#          makes DIR/jobs (mode 1777: any user may submit from it and write
#          job files there), writes
#          DIR/etc/{slurm.conf,gres.conf,slurm-PLUGINS.conf,allot.conf} from
#          conf/, starts the daemons and waits until the four nodes are idle.
#          --plugins stock (default) uses Slurm's own plugins
#          (conf/slurm-stock.conf); --plugins allot first installs allot's
#          plugins from cargo's target/release into DIR/plugins
#          (scripts/install-plugins.sh) and uses conf/slurm-allot.conf;
#          --plugins installed uses conf/slurm-allot.conf with the plugins
#          already installed in Slurm's own PluginDir (allot's Debian package).
#          A DIR whose daemons are still running is refused: run `down` first.
#          On failure it prints the daemon logs and stops what it started.
# down     cancels all jobs, stops every daemon it recorded (SIGTERM, SIGKILL
#          after a timeout) and any slurmstepd left from this cluster. Safe on
#          a half-started or already stopped cluster. Keeps DIR's files.
# kill-ctld, start-ctld, in-control: see ALLOT_BACKUP_CTLD below.
#
# Environment:
#   ALLOT_SLURM_RELEASE  22.05 (default), 24.11, or a site build of 25.05, 25.11
#                     or 26.05 under its prefix (scripts/release.sh).
#   ALLOT_PORT_BASE   slurmctld listens on BASE, slurmd n1..n4 on BASE+1..BASE+4
#                     (default 17000). Two clusters need different DIRs and
#                     bases at least 5 apart (e.g. 17000 and 17100).
#   ALLOT_UP_TIMEOUT  seconds `up` waits for four idle nodes (default 30).
#   ALLOT_CLUSTER_NAME  slurm.conf's ClusterName (default allot): the key of
#                     this cluster's rows when several share one server
#                     ledger (ALLOT_LEDGER_URL).
#   ALLOT_RECOMPUTE_PERIOD, ALLOT_GRACE_TIME  written into DIR/etc/allot.conf
#                     (defaults 2 and 5 seconds: test speed).
#   ALLOT_SHIPPED_SETTINGS=1  everything as shipped in conf/, for benchmarks:
#                     the snippet's scheduler settings (no test-speed
#                     sched_interval/bf_interval) and conf/allot.conf's
#                     RecomputePeriod and GraceTime (the two variables above
#                     are then ignored).
#   ALLOT_CPU_ONLY=1  nodes without GPUs (32 CPUs, 64,000 MB each): a CPU-only
#                     development cluster, for a budget with charge = "cpus".
#   ALLOT_SMALL_JOB_NODES=K  keep the last K nodes (0-3) for small jobs:
#                     partition gpu (default) without them, partition small
#                     with all four, and SmallJobPartition=small in allot.conf
#                     (default 1, the shipped layout: one node per 100
#                     or part of it; 0: one partition gpu of all
#                     four and SmallJobPartition= empty).
#   ALLOT_ACCOUNTING=1  Slurm's accounting too: a private MariaDB (port
#                     BASE+5) and slurmdbd (BASE+6) under DIR/db, started
#                     before slurmctld, with AccountingStorageEnforce=
#                     associations and gres/gpu in the recorded TRES; the
#                     cluster `allot` is added to slurmdbd, its accounts and
#                     users are not (`allot associations`). Daemons stop in
#                     reverse order. Needs install-deps.sh --accounting.
#   ALLOT_RUN_LOG=1   an EpilogSlurmctld that appends Slurm's record of every
#                     run end (`scontrol show job -o`, times in Unix seconds)
#                     to DIR/log/run-ends.log: the reconciliation test's
#                     ground truth.
#   ALLOT_LEDGER_URL  a server ledger (mysql://...): LedgerUrl in allot.conf
#                     instead of LedgerPath=DIR/ledger.db. The server is the
#                     caller's (the cluster tests start a private MariaDB).
#   ALLOT_BACKUP_CTLD=1  a primary and a backup slurmctld (Slurm's own HA,
#                     sharing DIR/state) instead of one. slurm.conf names
#                     SlurmctldHost=ctl1(127.0.0.1) and ctl2(127.0.0.2), and
#                     CommunicationParameters=NoCtldInAddrAny: each binds its
#                     own address on the one port. Each runs in its own UTS
#                     and mount namespace (unshare) with its SlurmctldHost name
#                     as hostname (slurmctld takes its role from it),
#                     DIR/etc/ctld-hosts as /etc/hosts, and its own
#                     DIR/run/ctld-primary or -backup as DIR/run/ctld, where
#                     SlurmctldPidFile lies (a starting slurmctld kills the
#                     one that file names). Logs: DIR/log/slurmctld.log and
#                     slurmctld-backup.log; pid records: pids/slurmctld.pid
#                     and slurmctld-backup.pid. `up` waits until `scontrol
#                     ping` reports both UP. Failover tests use:
#                     kill-ctld DIR primary|backup  SIGKILL (a crash: no state
#                       save, no cleanup). slurmctld saves state at most every
#                       5 s: let 6 s pass after the last change (submission,
#                       job start or end) before the kill, or the backup
#                       recovers older state (lost or requeued jobs,
#                       "Duplicate jobid" node drains). The backup takes over
#                       ~6-8 s after the kill (ALLOT_CTLD_TIMEOUT=5).
#                     start-ctld DIR primary|backup  start it, wait until
#                       `scontrol ping` reports it UP. A primary that finds
#                       the backup in control takes control back at once (the
#                       backup saves all state and returns to standby). Now
#                       and then 22.05's backup hangs doing so: the primary
#                       goes on after 29 s, and start-ctld fails, saying how
#                       to restart the backup.
#                     in-control DIR  prints primary or backup: whichever
#                       rewrites DIR/state/heartbeat (the controller in
#                       control does, every SlurmctldTimeout/4 s) and answers
#                       `scontrol ping`; fails if neither (during a takeover).
#                     `scontrol takeover` works too: the backup shuts the
#                     primary down (it exits) and takes over ~2 s later.
#                     Slurm 22.05 (this host's) only: `up` refuses the others
#                     (their primary takes control back only after ~29 s and
#                     may lose the backup's last changes) unless
#                     ALLOT_BACKUP_CTLD_ANY_RELEASE=1.
#   ALLOT_CTLD_TIMEOUT  SlurmctldTimeout with ALLOT_BACKUP_CTLD=1 (default 5,
#                     at least 4; Slurm's default is 120): the backup takes
#                     over once the primary has not answered its pings (every
#                     SlurmctldTimeout/3 s) for longer than this.
#   CARGO_TARGET_DIR  where --plugins allot finds the built plugins (default:
#                     the release's, scripts/release.sh RELEASE target).
#
# Needs root (SlurmUser=root, mknod) and scripts/install-deps.sh's packages.
set -euo pipefail

readonly NODES=(n1 n2 n3 n4)
readonly GPUS_PER_NODE=8
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly repo_root
# shellcheck source=scripts/release.sh
. "$repo_root/scripts/release.sh"
RELEASE=${ALLOT_SLURM_RELEASE:-$ALLOT_DEFAULT_RELEASE}
release_check "$RELEASE"
# Where this release's Slurm is installed: "" for this host, else a root
# that every Slurm daemon and command runs chrooted into (IN_ROOT prefixes
# each such command).
ROOT=$(release_field "$RELEASE" root)
IN_ROOT=()
[[ -n $ROOT ]] && IN_ROOT=(chroot "$ROOT")
# A site build (scripts/build-slurm.sh) lives under its own prefix: its
# commands and daemons come first on PATH.
PREFIX=$(release_field "$RELEASE" prefix)
if [[ -n $PREFIX ]]; then
    [[ -x $PREFIX/sbin/slurmctld ]] || { printf 'cluster: ERROR: Slurm %s is not installed in %s: build it with scripts/build-slurm.sh (docs/src/admin/slurm-releases.md)\n' "$RELEASE" "$PREFIX" >&2; exit 1; }
    export PATH="$PREFIX/bin:$PREFIX/sbin:$PATH"
fi

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }

# ---------------------------------------------------------------------------
# Paths and process bookkeeping

# set_paths DIR [create]: resolve DIR (creating it only for `up`).
set_paths() {
    local dir=$1
    if [[ ${2:-} == create ]]; then mkdir -p "$dir"; fi
    [[ -d $dir ]] || die "$dir does not exist"
    DIR=$(cd "$dir" && pwd -P)
    # Slurm's config parser splits on whitespace and sed below uses '|': keep
    # the path simple rather than quote it everywhere.
    [[ $DIR =~ ^[A-Za-z0-9_./+-]+$ ]] \
        || die "DIR '$DIR' may only contain letters, digits and _ . / + -"
    # INNER: DIR as the daemons see it (inside the release's root).
    INNER=$DIR
    if [[ -n $ROOT ]]; then
        local root
        root=$(cd "$ROOT" 2>/dev/null && pwd -P) || die "Slurm $RELEASE's root $ROOT is missing: run scripts/install-deps.sh --slurm $RELEASE"
        [[ $DIR == "$root"/* ]] || die "DIR '$DIR' must lie inside Slurm $RELEASE's root $root (the daemons run chrooted there)"
        INNER=${DIR#"$root"}
    fi
    ETC=$DIR/etc
    CONF=$ETC/slurm.conf
    PIDS=$DIR/pids
    LOGS=$DIR/log
    export SLURM_CONF=$INNER/etc/slurm.conf
}

# Our own record of each daemon: DIR/pids/NAME.pid holds the PID we started.
# The process must still have the expected command name, so a recycled PID is
# never signalled.
expected_comm() {
    case $1 in
        munged) echo munged ;;
        mariadbd) echo mariadbd ;;
        slurmdbd) echo slurmdbd ;;
        slurmctld | slurmctld-backup) echo slurmctld ;;
        slurmd-*) echo slurmd ;;
        *) return 1 ;;
    esac
}

# Whether COMM is the command name of daemon NAME. Debian 13 installs
# slurmctld, slurmd and slurmstepd as alternatives of slurmctld-wlm, ...:
# they start under the link's name, and a 24.11 daemon that re-executes
# itself (scontrol reconfigure) comes back under the target's.
comm_is() {
    local name=$1 comm=$2 want
    want=$(expected_comm "$name") || return 1
    [[ $comm == "$want" || $comm == "$want-wlm" ]]
}

# Prints the PID if daemon NAME is running, else nothing (and returns 1).
live_pid() {
    local name=$1 pid comm
    [[ -r $PIDS/$name.pid ]] || return 1
    pid=$(<"$PIDS/$name.pid")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    comm_is "$name" "$comm" || return 1
    # A zombie (reaped later by its parent) counts as gone.
    pid_alive "$pid" || return 1
    echo "$pid"
}

# Every daemon of this cluster, in start order (the accounting ones only if
# this cluster has them: `up` with ALLOT_ACCOUNTING=1 made DIR/db).
daemon_names() {
    local n
    echo munged
    [[ -d $DIR/db ]] && echo mariadbd slurmdbd
    echo slurmctld
    has_backup_ctld && echo slurmctld-backup
    for n in "${NODES[@]}"; do echo "slurmd-$n"; done
}

# Whether this cluster has a backup slurmctld (`up` with ALLOT_BACKUP_CTLD=1
# wrote DIR/etc/ctld-hosts).
has_backup_ctld() {
    [[ -f $ETC/ctld-hosts ]]
}

# Start a daemon that runs in the foreground (-D / -F), detached from this
# shell's session so it outlives the script and its terminal, and record its PID.
# start_daemon [--on-host] NAME COMMAND...: --on-host runs COMMAND on this
# host even with a release's root (COMMAND enters the root itself).
start_daemon() {
    local on_host=0
    [[ $1 == --on-host ]] && { on_host=1; shift; }
    local name=$1; shift
    # No job control in a script: the background child is not a process-group
    # leader, so setsid(1) calls setsid() and execs without forking and $! is
    # the daemon itself (checked by live_pid's command-name test).
    # Each daemon runs in DIR/run, so a crash leaves its core file there
    # (core_pattern "core"), where `down` and the tests look for it.
    # In a root, chroot(1) starts in its /; env --chdir gets back to DIR/run.
    if [[ -n $ROOT ]] && ((!on_host)); then
        (exec setsid chroot "$ROOT" env --chdir="$INNER/run" "$@") </dev/null >>"$LOGS/$name.stderr" 2>&1 &
    else
        (cd "$DIR/run" && exec setsid "$@") </dev/null >>"$LOGS/$name.stderr" 2>&1 &
    fi
    local pid=$! deadline=$((SECONDS + 5))
    echo "$pid" >"$PIDS/$name.pid"
    # Until the exec has happened the child is still called bash or setsid;
    # live_pid (and so every liveness check) needs the daemon's own name.
    until live_pid "$name" >/dev/null; do
        if ! pid_alive "$pid"; then
            die "$name exited as soon as it started; see $LOGS/$name.stderr below"
        fi
        if ((SECONDS >= deadline)); then
            die "$name did not start within 5 s (pid $pid is still $(cat "/proc/$pid/comm" 2>/dev/null))"
        fi
        sleep 0.01
    done
}

# True if PID exists and is not a zombie.
pid_alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z ]]
}

# ---------------------------------------------------------------------------
# down

# All descendants of a PID (children first found by scanning /proc).
descendants() {
    local parent=$1 child
    for child in $(pgrep -P "$parent" 2>/dev/null || true); do
        echo "$child"
        descendants "$child"
    done
}

# Slurm processes left over from this cluster once its recorded daemons are
# gone: slurmstepd (and slurmscriptd, a forked slurmctld) holding a file under
# DIR open; each keeps its daemon's log, DIR/log/..., open. Their environment
# is no help: slurmstepd writes its process title over it.
leftover_procs() {
    local pid fd target name
    for pid in $(for name in slurmstepd slurmstepd-wlm slurmscriptd slurmctld slurmctld-wlm slurmd slurmd-wlm slurmdbd mariadbd munged; do pgrep -x "$name" || true; done); do
        for fd in /proc/"$pid"/fd/*; do
            target=$(readlink "$fd" 2>/dev/null) || continue
            if [[ $target == "$DIR"/* ]]; then
                echo "$pid"
                break
            fi
        done
    done
}

# Wait until none of the given daemon names is alive; SIGKILL after $2 seconds.
wait_gone() {
    local timeout=$1; shift
    local deadline=$((SECONDS + timeout)) name pid alive
    while :; do
        alive=()
        for name in "$@"; do
            if pid=$(live_pid "$name"); then alive+=("$name:$pid"); fi
        done
        [[ ${#alive[@]} -eq 0 ]] && return 0
        if ((SECONDS >= deadline)); then
            say "still alive after ${timeout}s, sending SIGKILL: ${alive[*]}"
            for name in "${alive[@]}"; do kill -KILL "${name#*:}" 2>/dev/null || true; done
            sleep 0.5
            return 0
        fi
        sleep 0.2
    done
}

cmd_down() {
    local name pid names=() leftovers
    local started=$SECONDS
    # 1. Cancel every job while slurmctld can still do it cleanly: a job left
    #    running keeps its slurmstepd (and the job) alive after slurmd exits.
    if { live_pid slurmctld >/dev/null || live_pid slurmctld-backup >/dev/null; } && live_pid munged >/dev/null; then
        local jobs
        jobs=$(timeout 10 "${IN_ROOT[@]}" squeue -h -o %A 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            say "cancelling $(wc -w <<<"$jobs") job(s)"
            # shellcheck disable=SC2086  # one job id per word
            timeout 20 "${IN_ROOT[@]}" scancel $jobs 2>/dev/null || true
            # Until nothing runs or completes any more (epilogs, step teardown).
            local deadline=$((SECONDS + 15))
            while ((SECONDS < deadline)); do
                [[ -z $(timeout 5 "${IN_ROOT[@]}" squeue -h -t R,CG,CF,S,SO,SI -o %A 2>/dev/null || true) ]] && break
                sleep 0.3
            done
        fi
    fi
    # 2. slurmd and slurmctld together (slurmd takes ~2 s); then slurmdbd,
    #    which slurmctld reports to until it stops, and its database; munged
    #    last: the others may still talk to it while shutting down.
    for name in $(daemon_names); do
        case $name in munged | mariadbd | slurmdbd) continue ;; esac
        if pid=$(live_pid "$name"); then
            kill -TERM "$pid" 2>/dev/null || true
            names+=("$name")
        fi
    done
    [[ ${#names[@]} -gt 0 ]] && say "stopping ${names[*]}"
    wait_gone 20 "${names[@]+"${names[@]}"}"
    for name in slurmdbd mariadbd munged; do
        if pid=$(live_pid "$name"); then
            kill -TERM "$pid" 2>/dev/null || true
            wait_gone 20 "$name"
        fi
    done
    # 3. Whatever slurmstepd (and job processes under it) this cluster left.
    leftovers=$(leftover_procs)
    if [[ -n $leftovers ]]; then
        local all=()
        for pid in $leftovers; do
            all+=("$pid")
            while read -r child; do all+=("$child"); done < <(descendants "$pid")
        done
        say "killing leftover Slurm and job processes: ${all[*]}"
        kill -KILL "${all[@]}" 2>/dev/null || true
    fi
    # Dead daemons are reaped by init (they were detached from this shell);
    # give it a moment so that a `pgrep slurm` right after `down` is empty.
    local deadline=$((SECONDS + 3)) f
    while ((SECONDS < deadline)); do
        local left=0
        for f in "$PIDS"/*.pid; do
            [[ -s $f && -e /proc/$(<"$f") ]] && left=1
        done
        ((left == 0)) && break
        sleep 0.1
    done
    rm -f "$PIDS"/*.pid
    say "down: $DIR ($((SECONDS - started))s)"
}

# ---------------------------------------------------------------------------
# up

# port_in_use PORT [ADDRESS]: on 127.0.0.1 unless ADDRESS is given.
port_in_use() {
    # A successful TCP connect means somebody listens there.
    (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
}

# Slurm's own plugin directory, as the daemons see it (inside the root).
find_system_plugin_dir() {
    local d
    if [[ -n ${ALLOT_SYSTEM_PLUGIN_DIR:-} ]]; then echo "$ALLOT_SYSTEM_PLUGIN_DIR"; return; fi
    for d in ${PREFIX:+"$PREFIX/lib/slurm"} "$ROOT"/usr/lib/*/slurm-wlm "$ROOT"/usr/lib/slurm-wlm "$ROOT"/usr/lib64/slurm "$ROOT"/usr/lib/slurm; do
        if [[ -f $d/select_cons_tres.so ]]; then echo "${d#"$ROOT"}"; return; fi
    done
    die "Slurm $RELEASE's plugin directory (with select_cons_tres.so) not found under '${ROOT:-/}'; run scripts/install-deps.sh --slurm $RELEASE or set ALLOT_SYSTEM_PLUGIN_DIR"
}

# The root's /proc, which Slurm's daemons need, mounted once and left
# mounted (later clusters use it too); scripts/test.sh unmounts it when done.
mount_root_proc() {
    [[ -n $ROOT ]] || return 0
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc" || die "cannot mount /proc in $ROOT"
}

# This host's name resolution in the root too: slurm.conf's
# SlurmctldHost=localhost means this host's short name, which the root must
# resolve as the host does.
sync_root_hosts() {
    [[ -n $ROOT ]] || return 0
    local f
    for f in /etc/hosts /etc/hostname; do
        [[ -f $f ]] || continue
        cmp -s "$f" "$ROOT$f" || cp "$f" "$ROOT$f"
    done
}

# This host's ordinary users (uid 1000-59999) in the root too, with the same
# uids: slurmctld there resolves job owners, and the tests' users submit.
sync_root_users() {
    [[ -n $ROOT ]] || return 0
    local name uid
    while IFS=: read -r name _ uid _; do
        ((uid >= 1000 && uid < 60000)) || continue
        if ! chroot "$ROOT" getent passwd "$name" >/dev/null; then
            useradd --root "$ROOT" --uid "$uid" --user-group --no-create-home --shell /usr/sbin/nologin "$name" \
                || die "cannot add user $name ($uid) to $ROOT"
        fi
        [[ $(chroot "$ROOT" id -u "$name") == "$uid" ]] || die "user $name has uid $(chroot "$ROOT" id -u "$name") in $ROOT, $uid here"
    done < <(getent passwd)
}

print_logs() {
    local n=${1:-40} f
    for f in "$LOGS"/*; do
        [[ -s $f ]] || continue
        # A daemon run with -D writes its log to stderr too: show NAME.stderr
        # only when there is no NAME.log (munged; or a daemon that died before
        # opening its log file).
        [[ $f == *.stderr && -s ${f%.stderr}.log ]] && continue
        printf '==> %s <==\n' "$f"
        tail -n "$n" "$f"
    done
}

# Render a template: @KEY@ -> value for each KEY=value argument.
render() {
    local template=$1 out=$2; shift 2
    local args=() kv
    for kv in "$@"; do args+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
    sed "${args[@]}" "$template" >"$out.tmp"
    if grep -q '@[A-Z_]*@' "$out.tmp"; then
        rm -f "$out.tmp"
        die "unsubstituted placeholder in $out: $(sed "${args[@]}" "$template" | grep -o '@[A-Z_]*@' | sort -u | tr '\n' ' ')"
    fi
    mv "$out.tmp" "$out"
}

# Replace the value of KEY= in an allot.conf copy; the key must be there.
set_allot_key() {
    local file=$1 key=$2 value=$3
    grep -q "^$key=" "$file" || die "conf/allot.conf has no $key= line"
    sed -i "s|^$key=.*|$key=$value|" "$file"
}

cmd_up() {
    local plugins=$1
    local start_ns tool
    start_ns=$(date +%s%N)
    [[ $(id -u) -eq 0 ]] || die "must run as root (SlurmUser=root, mknod)"
    for tool in munged mungekey slurmctld slurmd sinfo squeue scancel scontrol; do
        "${IN_ROOT[@]}" sh -c "command -v $tool" >/dev/null || die "$tool not found${ROOT:+ in $ROOT}: run scripts/install-deps.sh --slurm $RELEASE"
    done
    for tool in setsid pgrep; do
        command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh"
    done
    mount_root_proc
    sync_root_hosts
    sync_root_users

    local name pid
    for name in $(daemon_names); do
        if pid=$(live_pid "$name"); then
            die "a cluster is already running in $DIR ($name, pid $pid): run 'scripts/cluster.sh down $DIR' first"
        fi
    done

    local base=${ALLOT_PORT_BASE:-17000}
    if ! [[ $base =~ ^[0-9]+$ ]] || ((base < 1024 || base + ${#NODES[@]} > 65535)); then
        die "ALLOT_PORT_BASE=$base: need a number in 1024..65530"
    fi
    local cluster_name=${ALLOT_CLUSTER_NAME:-allot}
    [[ $cluster_name =~ ^[a-z][a-z0-9_-]{0,39}$ ]] || die "ALLOT_CLUSTER_NAME must be a lower-case name (letters, digits, _ and -, at most 40), got '$cluster_name'"
    local port accounting=${ALLOT_ACCOUNTING:-0}
    [[ $accounting == 0 || $accounting == 1 ]] || die "ALLOT_ACCOUNTING must be 0 or 1, got '$accounting'"
    local backup=${ALLOT_BACKUP_CTLD:-0} ctld_timeout=${ALLOT_CTLD_TIMEOUT:-5}
    [[ $backup == 0 || $backup == 1 ]] || die "ALLOT_BACKUP_CTLD must be 0 or 1, got '$backup'"
    if ((backup)); then
        if [[ $RELEASE != 22.05 && ${ALLOT_BACKUP_CTLD_ANY_RELEASE:-0} != 1 ]]; then
            die "ALLOT_BACKUP_CTLD=1 is for Slurm 22.05 (this host's) only, not $RELEASE: from 24.11 on, a primary that starts while the backup is in control waits ~29 s for the backup's REQUEST_CONTROL reply (\"backup not completely done relinquishing control. Old state possible\") and may recover state older than the backup's last changes (a job the backup started was killed: \"Job credential revoked\"). ALLOT_BACKUP_CTLD_ANY_RELEASE=1 starts it anyway"
        fi
        local bad_timeout=1
        [[ $ctld_timeout =~ ^[0-9]+$ ]] && ((ctld_timeout >= 4)) && bad_timeout=0
        ((!bad_timeout)) || die "ALLOT_CTLD_TIMEOUT must be a number of seconds, at least 4, got '$ctld_timeout'"
        for tool in unshare hostname mount; do
            command -v "$tool" >/dev/null || die "$tool not found (ALLOT_BACKUP_CTLD=1 needs util-linux and hostname)"
        done
        port_in_use "$base" 127.0.0.2 && die "port $base is in use on 127.0.0.2 (another cluster? set ALLOT_PORT_BASE)"
    fi
    for ((port = base; port <= base + ${#NODES[@]} + 2 * accounting; port++)); do
        port_in_use "$port" && die "port $port is in use (another cluster? set ALLOT_PORT_BASE)"
    done

    # Plugins before anything else: nothing to clean up if they are missing.
    mkdir -p "$DIR/plugins"
    if [[ $plugins == allot ]]; then
        CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo_root/$(release_field "$RELEASE" target)} \
            "$repo_root/scripts/install-plugins.sh" "$DIR/plugins"
    fi

    # Fresh Slurm state each time (job ids restart at 1); keep plugins, munge
    # key and allot's ledger.
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/tmp" "$LOGS" "$PIDS" "$ETC" "$DIR/munge/run" "$DIR/db"
    mkdir -p "$DIR/state" "$DIR/run" "$DIR/tmp" "$LOGS" "$PIDS" "$ETC" "$DIR/dev"
    for name in "${NODES[@]}"; do mkdir -p "$DIR/spool/$name"; done
    # Jobs of ordinary users (e.g. nobody) run scripts slurmstepd writes under
    # the spool directory and devices under DIR/dev: DIR must be traversable.
    chmod 0755 "$DIR"
    # Where users submit from and their jobs write (sticky, like /tmp).
    install -d -m 1777 "$DIR/jobs"
    if ! "${IN_ROOT[@]}" runuser -u nobody -- test -x "$INNER/spool" 2>/dev/null; then
        say "warning: user nobody cannot reach $DIR (a parent directory is not world-searchable); non-root jobs will fail"
    fi

    # munge: key in a 0700 directory, socket in a 0755 one (munged insists).
    install -d -m 0700 "$DIR/munge" "$DIR/munge/key" "$DIR/munge/lib"
    install -d -m 0755 "$DIR/munge/run"
    chmod 0755 "$DIR/munge" # the socket directory below it must be reachable by clients
    if [[ ! -s $DIR/munge/key/munge.key ]]; then
        "${IN_ROOT[@]}" mungekey --create --keyfile="$INNER/munge/key/munge.key"
    fi
    chmod 0600 "$DIR/munge/key/munge.key"

    # Fake GPUs: /dev/null clones (character devices, which slurmd requires).
    local i
    for ((i = 0; i < GPUS_PER_NODE; i++)); do
        [[ -c $DIR/dev/nvidia$i ]] || mknod -m 0666 "$DIR/dev/nvidia$i" c 1 3
    done

    # Configuration. The snippet is copied verbatim except for its
    # SchedulerParameters line, which slurm.conf merges (see its template).
    local snippet_name=$plugins
    [[ $plugins == installed ]] && snippet_name=allot
    local snippet=$repo_root/conf/slurm-$snippet_name.conf sched
    [[ -f $snippet ]] || die "$snippet missing"
    sched=$(sed -n 's/^SchedulerParameters=//p' "$snippet" | tail -n 1)
    [[ -n $sched ]] || die "$snippet has no SchedulerParameters line"
    local shipped=0 test_speed="sched_interval=2,bf_interval=2,"
    [[ ${ALLOT_SHIPPED_SETTINGS:-0} == 1 ]] && shipped=1 test_speed=""
    {
        echo "# Copied from conf/slurm-$snippet_name.conf by scripts/cluster.sh; SchedulerParameters"
        echo "# is merged into slurm.conf's own line there."
        sed 's/^SchedulerParameters=/#&/' "$snippet"
    } >"$ETC/slurm-$snippet_name.conf"
    local kept=${ALLOT_SMALL_JOB_NODES:-1} partitions
    [[ $kept =~ ^[0-3]$ ]] || die "ALLOT_SMALL_JOB_NODES must be 0 to 3, got '$kept'"
    if ((kept == 0)); then
        partitions="PartitionName=gpu Nodes=n[1-${#NODES[@]}] Default=YES MaxTime=INFINITE State=UP"
    else
        partitions="PartitionName=gpu Nodes=n[1-$((${#NODES[@]} - kept))] Default=YES MaxTime=INFINITE State=UP\\nPartitionName=small Nodes=n[1-${#NODES[@]}] MaxTime=INFINITE State=UP"
    fi
    # allot's plugins first: a PluginDir search takes the first file of a
    # name, and an installed package's copies must not shadow the ones
    # under test. --plugins installed: Slurm's directory only.
    local plugin_dir
    plugin_dir="$INNER/plugins:$(find_system_plugin_dir)"
    [[ $plugins == installed ]] && plugin_dir=$(find_system_plugin_dir)
    if [[ $plugins == installed && ! -f $ROOT$(find_system_plugin_dir)/priority_allot.so ]]; then
        die "--plugins installed: no priority_allot.so in ${ROOT}$(find_system_plugin_dir) (install allot's package first)"
    fi
    render "$repo_root/conf/cluster/slurm.conf.in" "$CONF" \
        "DIR=$INNER" "CTLD_PORT=$base" "NODE_PORTS=[$((base + 1))-$((base + ${#NODES[@]}))]" \
        "PLUGIN_DIR=$plugin_dir" "PLUGINS=$snippet_name" "PARTITIONS=$partitions" \
        "SCHEDULER_PARAMETERS=$sched" "TEST_SPEED=$test_speed" "CLUSTER_NAME=$cluster_name"
    render "$repo_root/conf/cluster/gres.conf.in" "$ETC/gres.conf" "DIR=$INNER"
    if [[ ${ALLOT_CPU_ONLY:-0} == 1 ]]; then
        # A CPU-only cluster: no GPU GRES at all (the partition keeps its name).
        sed -i 's/ Gres=gpu:[0-9]*//; s/^GresTypes=gpu$/#&  (ALLOT_CPU_ONLY=1: no GPUs)/' "$CONF"
        printf '# scripts/cluster.sh ALLOT_CPU_ONLY=1: no GPUs
' >"$ETC/gres.conf"
    fi
    # 24.11's slurmd initializes a cgroup plugin whatever ProctrackType and
    # TaskPlugin say, and fails without a cgroup filesystem (none in the
    # root); 24.11 can switch it off (22.05 knows no "disabled").
    if [[ $RELEASE != 22.05 ]]; then
        printf '# scripts/cluster.sh: no cgroups on a single-host test cluster\nCgroupPlugin=disabled\n' >"$ETC/cgroup.conf"
    fi
    if [[ ${ALLOT_RUN_LOG:-0} == 1 ]]; then
        # Slurm's own record of every run, for reconciliation: slurmctld runs
        # EpilogSlurmctld at the end of each run (requeues included). The
        # script asks for the job's record, which usually still holds the
        # run's start and end; but the script runs after the fact, and a
        # requeued job may be pending again by then. 24.11 and later also
        # give the run's start and end in the script's environment, taken
        # when the run ended: appended as EpilogRunStart and EpilogRunEnd
        # (empty on 22.05, which gives neither).
        cat >"$ETC/epilog-ctld.sh" <<EOS
#!/bin/sh
record=\$(SLURM_CONF=$INNER/etc/slurm.conf SLURM_TIME_FORMAT=%s ${PREFIX:+$PREFIX/bin/}scontrol show job -o "\$SLURM_JOB_ID" 2>&1)
echo "\$record EpilogRunStart=\${SLURM_JOB_START_TIME:-} EpilogRunEnd=\${SLURM_JOB_END_TIME:-}" >>"$INNER/log/run-ends.log"
exit 0
EOS
        chmod 755 "$ETC/epilog-ctld.sh"
        printf '\n# ALLOT_RUN_LOG=1: every run end into log/run-ends.log\nEpilogSlurmctld=%s\n' "$INNER/etc/epilog-ctld.sh" >>"$CONF"
    fi
    cp "$repo_root/conf/allot.conf" "$ETC/allot.conf"
    if [[ -n ${ALLOT_LEDGER_URL:-} ]]; then
        # '&' means the match in a sed replacement: the URL's own are escaped.
        sed -i "s|^LedgerPath=.*|LedgerUrl=${ALLOT_LEDGER_URL//&/\\&}|" "$ETC/allot.conf"
    else
        set_allot_key "$ETC/allot.conf" LedgerPath "$INNER/ledger.db"
    fi
    if ((kept == 0)); then
        set_allot_key "$ETC/allot.conf" SmallJobPartition ""
    else
        set_allot_key "$ETC/allot.conf" SmallJobPartition small
    fi
    if ((!shipped)); then
        set_allot_key "$ETC/allot.conf" RecomputePeriod "${ALLOT_RECOMPUTE_PERIOD:-2}"
        set_allot_key "$ETC/allot.conf" GraceTime "${ALLOT_GRACE_TIME:-5}"
    fi

    ((accounting)) && write_accounting_conf "$base"
    ((backup)) && write_backup_ctld_conf "$ctld_timeout"

    # From here on a failure stops whatever was started, then shows the logs.
    # Stop first and ignore SIGPIPE: a reader that goes away early (`| head`)
    # must not leave daemons behind.
    trap 'rc=$?; if ((rc != 0)); then trap "" PIPE; say "up failed; stopping the daemons" >&2; cmd_down >&2 || true; say "daemon logs:" >&2; print_logs 30 >&2 || true; fi' EXIT

    start_daemon munged munged --foreground --force \
        --socket="$INNER/munge/run/munge.socket.2" \
        --key-file="$INNER/munge/key/munge.key" \
        --pid-file="$INNER/run/munged.pid" \
        --seed-file="$INNER/munge/lib/munged.seed" \
        --log-file="$INNER/log/munged.log"
    wait_for "munged socket" 10 test -S "$DIR/munge/run/munge.socket.2"

    ((accounting)) && start_accounting "$base"

    start_ctld primary
    wait_for "slurmctld to answer" 15 "${IN_ROOT[@]}" scontrol ping
    if ((backup)); then
        start_ctld backup
        wait_for "scontrol ping to report the primary and the backup slurmctld UP" 15 ctlds_up primary backup
    fi
    for name in "${NODES[@]}"; do
        start_daemon "slurmd-$name" slurmd -D -N "$name" -f "$INNER/etc/slurm.conf"
    done
    for name in $(daemon_names); do
        live_pid "$name" >/dev/null || die "$name exited right after starting (or was forked away from its recorded pid)"
    done

    local timeout=${ALLOT_UP_TIMEOUT:-30}
    wait_for "${#NODES[@]} idle nodes" "$timeout" nodes_idle
    trap - EXIT
    local ms=$((($(date +%s%N) - start_ns) / 1000000))
    local with_accounting=""
    ((accounting)) && with_accounting=", slurmdbd on port $((base + 6)), MariaDB on $((base + 5))"
    local ctlds="slurmctld port $base"
    ((backup)) && ctlds="slurmctld ctl1 (127.0.0.1, primary) and ctl2 (127.0.0.2, backup) on port $base, SlurmctldTimeout=$ctld_timeout"
    say "up: $DIR with $plugins plugins, Slurm $(release_field "$RELEASE" version)${ROOT:+ (in $ROOT)}$with_accounting, $ctlds, nodes ${NODES[*]} on $((base + 1))-$((base + ${#NODES[@]})), ${#NODES[@]}x$GPUS_PER_NODE GPUs, in ${ms} ms"
    say "use it: eval \"\$($0 env $DIR)\"; sinfo"
}

# Accounting (ALLOT_ACCOUNTING=1): slurm.conf's lines for slurmdbd, and
# slurmdbd.conf, which slurmdbd reads beside $SLURM_CONF; it must be mode
# 0600 and owned by SlurmUser (root here). The private munged's socket is
# named twice in slurm.conf: connections to slurmdbd take their munge
# options from AccountingStoragePass, not AuthInfo.
write_accounting_conf() {
    local base=$1
    mkdir -p "$DIR/db"
    sed -i 's|^AccountingStorageType=accounting_storage/none$|# ALLOT_ACCOUNTING=1: accounting is configured at the end|' "$CONF"
    cat >>"$CONF" <<EOF

# ALLOT_ACCOUNTING=1 (scripts/cluster.sh): Slurm's accounting in a private
# slurmdbd and MariaDB. Every job needs an association of its user with its
# account (allot associations); gres/gpu is recorded, so sacct shows GPUs.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((base + 6))
AccountingStoragePass=socket=$INNER/munge/run/munge.socket.2
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu
EOF
    (umask 077 && cat >"$ETC/slurmdbd.conf" <<EOF
# slurmdbd.conf of allot's test cluster (scripts/cluster.sh, ALLOT_ACCOUNTING=1)
AuthType=auth/munge
AuthInfo=socket=$INNER/munge/run/munge.socket.2
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((base + 6))
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((base + 5))
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$INNER/run/slurmdbd.pid
LogFile=$INNER/log/slurmdbd.log
DebugLevel=info
EOF
)
    chmod 0600 "$ETC/slurmdbd.conf"
}

# ALLOT_BACKUP_CTLD=1: a primary and a backup slurmctld on this one host.
# slurmctld takes its role from its hostname (the SlurmctldHost entry whose
# name is gethostname()'s, short or long; 22.05 has no option to name it
# otherwise), and with NoCtldInAddrAny it binds the address its hostname
# resolves to instead of INADDR_ANY, so two can share SlurmctldPort. Clients
# and slurmd connect to the addresses in parentheses and need no names.
write_backup_ctld_conf() {
    local timeout=$1
    grep -q '^SlurmctldHost=localhost$' "$CONF" || die "$CONF has no SlurmctldHost=localhost line to replace"
    grep -c '^SlurmctldPidFile=' "$CONF" | grep -qx 1 || die "$CONF: expected one SlurmctldPidFile line"
    sed -i -e 's|^SlurmctldHost=localhost$|# ALLOT_BACKUP_CTLD=1 (scripts/cluster.sh): a primary and a backup slurmctld,\
# each in its own UTS and mount namespace with that hostname (see the end).\
SlurmctldHost=ctl1(127.0.0.1)\
SlurmctldHost=ctl2(127.0.0.2)|' \
        -e 's|^SlurmctldPidFile=|# ALLOT_BACKUP_CTLD=1: replaced at the end: &|' "$CONF"
    cat >>"$CONF" <<EOF

# ALLOT_BACKUP_CTLD=1 (scripts/cluster.sh): each slurmctld binds the address
# of its own hostname (ctl1 127.0.0.1, ctl2 127.0.0.2, in etc/ctld-hosts), not
# INADDR_ANY, so both listen on SlurmctldPort; slurmd and the commands keep
# INADDR_ANY. The backup takes over after SlurmctldTimeout seconds without
# an answer from the primary (test speed; default 120). The pid file lies in
# run/ctld, which each slurmctld's mount namespace maps to its own directory
# (a slurmctld SIGTERMs the one its pid file names when it starts).
CommunicationParameters=NoCtldInAddrAny
SlurmctldTimeout=$timeout
SlurmctldPidFile=$INNER/run/ctld/slurmctld.pid
EOF
    printf '# scripts/cluster.sh ALLOT_BACKUP_CTLD=1: /etc/hosts of both slurmctld\n127.0.0.1 localhost\n127.0.0.1 ctl1\n127.0.0.2 ctl2\n' >"$ETC/ctld-hosts"
    mkdir -p "$DIR/run/ctld" "$DIR/run/ctld-primary" "$DIR/run/ctld-backup"
}

# start_ctld primary|backup: start that slurmctld (without ALLOT_BACKUP_CTLD=1
# the cluster's only one, for `primary`).
start_ctld() {
    local role=$1
    if ! has_backup_ctld; then
        start_daemon slurmctld slurmctld -D -f "$INNER/etc/slurm.conf"
        return
    fi
    local name=slurmctld host=ctl1 log=()
    if [[ $role == backup ]]; then
        name=slurmctld-backup host=ctl2 log=(-L "$INNER/log/slurmctld-backup.log")
    fi
    # The namespaces are made on this host, outside a release's root (inside
    # it, / is no mount point and unshare cannot make the mounts private);
    # slurmctld then runs chrooted as the other daemons do. unshare, the shell
    # and chroot exec without forking (no PID namespace): the recorded PID is
    # slurmctld's. The namespace's mounts are private: the host and the other
    # slurmctld never see them.
    local in_root=()
    [[ -n $ROOT ]] && in_root=(chroot "$ROOT" env --chdir="$INNER/run")
    # shellcheck disable=SC2016  # $1.. are the inner shell's
    start_daemon --on-host "$name" unshare --uts --mount --propagation private -- \
        bash -c 'hostname "$1" && mount --bind "$2" "$3" && mount --bind "$4" "$5" && shift 5 && exec "$@"' \
        ctld-ns "$host" "$DIR/etc/ctld-hosts" "$ROOT/etc/hosts" "$DIR/run/ctld-$role" "$DIR/run/ctld" \
        "${in_root[@]+"${in_root[@]}"}" slurmctld -D -f "$INNER/etc/slurm.conf" "${log[@]+"${log[@]}"}"
}

# ctlds_up ROLE...: whether `scontrol ping` reports each of these slurmctld
# (primary, backup) UP.
ctlds_up() {
    local out role
    out=$(timeout 10 "${IN_ROOT[@]}" scontrol ping 2>/dev/null) || true
    for role in "$@"; do
        grep -q "^Slurmctld($role) at .* is UP\$" <<<"$out" || return 1
    done
}

# The slurmctld in control (prints primary or backup): the one whose index
# DIR/state/heartbeat holds, if it is alive and the heartbeat is fresh. The
# controller in control rewrites the file every SlurmctldTimeout/4 s (two
# big-endian 64-bit numbers: the time and its SlurmctldHost index); a backup
# in standby never does.
# With one slurmctld (no heartbeat without a backup): primary if it is alive.
ctld_in_control() {
    local beat=$DIR/state/heartbeat words timeout period age
    if ! has_backup_ctld; then
        live_pid slurmctld >/dev/null && echo primary
        return
    fi
    [[ -s $beat ]] || return 1
    read -r -a words < <(od -An -tu8 --endian=big "$beat") || return 1
    [[ ${#words[@]} -eq 2 ]] || return 1
    timeout=$(sed -n 's/^SlurmctldTimeout=//p' "$CONF" | tail -n 1)
    # slurmctld's own period (heartbeat.c): MIN(SlurmctldTimeout / 4, 30).
    period=$((${timeout:-5} / 4))
    ((period <= 30)) || period=30
    age=$(($(date +%s) - words[0]))
    ((age <= 2 * period + 2)) || return 1
    local role name pid
    case ${words[1]} in
        0) role=primary name=slurmctld ;;
        1) role=backup name=slurmctld-backup ;;
        *) return 1 ;;
    esac
    # Written by this process, not by one killed before it started; and a
    # backup hung handing control back (see cmd_start_ctld) still beats, so
    # the writer must also answer.
    pid=$(live_pid "$name") || return 1
    ((words[0] > $(proc_start_time "$pid"))) || return 1
    ctlds_up "$role" || return 1
    echo "$role"
}

# When process PID started, in Unix seconds (rounded down).
proc_start_time() {
    local ticks boot
    ticks=$(awk '{print $22}' "/proc/$1/stat") || return 1
    boot=$(awk '$1 == "btime" {print $2}' /proc/stat)
    echo $((boot + ticks / $(getconf CLK_TCK)))
}

# A private MariaDB in DIR/db (root logs in over 127.0.0.1 without a
# password: a throwaway test database), then slurmdbd, then the cluster's
# entry in slurmdbd (so that accounts can be added before slurmctld first
# registers). The database is made before slurmdbd's first start: 24.11.5's
# slurmdbd with Debian 13's MariaDB 11.8 client fails its first query when
# it has to create the database itself.
start_accounting() {
    local base=$1
    local mariadb_opts=(--no-defaults --datadir="$INNER/db/data" --socket="$INNER/run/mysqld.sock"
        --port=$((base + 5)) --bind-address=127.0.0.1 --user=root --pid-file="$INNER/run/mariadbd.pid"
        --log-error="$INNER/log/mariadbd.log" --skip-name-resolve
        --innodb-log-file-size=4M --innodb-buffer-pool-size=64M)
    echo "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" >"$ETC/db-init.sql"
    # --force: no host name lookups (the root may not resolve this host's name).
    "${IN_ROOT[@]}" mariadb-install-db --no-defaults --extra-file="$INNER/etc/db-init.sql" \
        --datadir="$INNER/db/data" --user=root --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve --force --innodb-log-file-size=4M --innodb-buffer-pool-size=64M \
        >"$LOGS/mariadb-install-db.log" 2>&1 || die "mariadb-install-db failed; see $LOGS/mariadb-install-db.log"
    start_daemon mariadbd mariadbd "${mariadb_opts[@]}"
    wait_for "MariaDB to answer" 30 "${IN_ROOT[@]}" mariadb-admin --no-defaults --socket="$INNER/run/mysqld.sock" -uroot ping
    start_daemon slurmdbd slurmdbd -D
    wait_for "slurmdbd to answer" 30 "${IN_ROOT[@]}" sacctmgr -n show cluster
    "${IN_ROOT[@]}" sacctmgr -i add cluster "${cluster_name:-allot}" >/dev/null || die "sacctmgr add cluster ${cluster_name:-allot} failed"
}

# sinfo -N lists a node once per partition: count each node once.
nodes_responding() {
    local n
    n=$(timeout 5 "${IN_ROOT[@]}" sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | awk '$2 ~ /^(idle|mix|alloc|comp)$/' | wc -l)
    ((n == ${#NODES[@]}))
}

nodes_idle() {
    local n
    n=$(timeout 5 "${IN_ROOT[@]}" sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | awk '$2 == "idle"' | wc -l)
    ((n == ${#NODES[@]}))
}

# wait_for WHAT SECONDS COMMAND...: poll COMMAND until it succeeds; fail
# (printing logs via the EXIT trap) on timeout or if a daemon died meanwhile.
wait_for() {
    local what=$1 timeout=$2; shift 2
    local deadline=$((SECONDS + timeout)) name
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            die "timed out after ${timeout}s waiting for $what"
        fi
        for name in $(daemon_names); do
            if [[ -f $PIDS/$name.pid ]] && ! live_pid "$name" >/dev/null; then
                die "$name died while waiting for $what"
            fi
        done
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------

cmd_status() {
    local name pid rc=0
    for name in $(daemon_names); do
        if pid=$(live_pid "$name"); then
            printf '%-10s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-10s stopped\n' "$name"
            rc=1
        fi
    done
    if has_backup_ctld; then
        timeout 10 "${IN_ROOT[@]}" scontrol ping || rc=1
        printf 'in control: %s\n' "$(ctld_in_control || echo none)"
    fi
    if live_pid slurmctld >/dev/null || live_pid slurmctld-backup >/dev/null; then timeout 5 "${IN_ROOT[@]}" sinfo -N || rc=1; fi
    return $rc
}

cmd_restart_ctld() {
    local pid
    if pid=$(live_pid slurmctld); then
        kill -TERM "$pid"
        wait_gone 20 slurmctld
    fi
    live_pid munged >/dev/null || die "munged is not running in $DIR: use up"
    forget_dead_ctlds
    start_ctld primary
    wait_for "slurmctld to answer" 15 "${IN_ROOT[@]}" scontrol ping
    if has_backup_ctld; then wait_for "scontrol ping to report the primary slurmctld UP" 60 ctlds_up primary; fi
    # Recovered nodes are "unknown" until their slurmd answers again.
    wait_for "the nodes to register again" "${ALLOT_UP_TIMEOUT:-30}" nodes_responding
    say "slurmctld restarted (pid $(live_pid slurmctld))"
}

# ctld_name ROLE: the daemon name of slurmctld ROLE (primary or backup).
ctld_name() {
    case $1 in
        primary) echo slurmctld ;;
        backup)
            has_backup_ctld || die "this cluster has no backup slurmctld (up with ALLOT_BACKUP_CTLD=1)"
            echo slurmctld-backup ;;
        *) die "which slurmctld: primary or backup, not '$1'" ;;
    esac
}

# A crash: SIGKILL, no state save, no cleanup. The pid record goes too, so
# that the script's waits do not take the dead daemon for a failure.
cmd_kill_ctld() {
    local role=$1 name pid
    name=$(ctld_name "$role")
    pid=$(live_pid "$name") || die "the $role slurmctld is not running"
    kill -KILL "$pid"
    wait_gone 5 "$name"
    rm -f "$PIDS/$name.pid"
    say "killed the $role slurmctld (pid $pid)"
}

# A slurmctld may also have exited on its own: `scontrol takeover` shuts the
# primary down, and a controller that lost its state exits. Their pid records
# go before a start, so that wait_for watches only the living.
forget_dead_ctlds() {
    local name
    for name in slurmctld slurmctld-backup; do
        if [[ -f $PIDS/$name.pid ]] && ! live_pid "$name" >/dev/null; then rm -f "$PIDS/$name.pid"; fi
    done
}

cmd_start_ctld() {
    local role=$1 name pid
    name=$(ctld_name "$role")
    if pid=$(live_pid "$name"); then die "the $role slurmctld is already running (pid $pid)"; fi
    live_pid munged >/dev/null || die "munged is not running in $DIR: use up"
    forget_dead_ctlds
    start_ctld "$role"
    if ! has_backup_ctld; then
        wait_for "slurmctld to answer" 15 "${IN_ROOT[@]}" scontrol ping
        say "started the $role slurmctld (pid $(live_pid "$name"))"
        return
    fi
    # A primary that finds the backup in control waits for its REQUEST_CONTROL
    # reply before it answers: up to 29 s if the backup is slow to let go.
    wait_for "scontrol ping to report the $role slurmctld UP" 60 ctlds_up "$role"
    say "started the $role slurmctld (pid $(live_pid "$name"))"
    # The backup that handed control back must answer again (standby).
    # Slurm 22.05's backup now and then hangs while relinquishing (its main
    # thread waits forever for its file-purge thread); the primary then goes
    # on after 29 s, and the hung backup never takes over again.
    if [[ $role == primary ]] && pid=$(live_pid slurmctld-backup); then
        local deadline=$((SECONDS + 10))
        until ctlds_up backup; do
            if ((SECONDS >= deadline)); then
                die "the primary slurmctld is in control, but the backup (pid $pid) no longer answers: it hung handing control back (its log: \"REQUEST_CONTROL reply but backup not completely done relinquishing control\", a Slurm 22.05 race); restart it: $0 kill-ctld $DIR backup; $0 start-ctld $DIR backup"
            fi
            sleep 0.2
        done
    fi
    # Its first heartbeat (at most SlurmctldTimeout/4 s on) shows it in control.
    if [[ $role == primary ]]; then
        wait_for "the primary slurmctld to be in control" 15 ctld_in_control_is primary
    fi
}

ctld_in_control_is() {
    [[ $(ctld_in_control) == "$1" ]]
}

[[ $# -ge 2 ]] || usage
command=$1 dir=$2
shift 2
case $command in
    up)
        plugins=stock
        while [[ $# -gt 0 ]]; do
            case $1 in
                --plugins) [[ $# -ge 2 ]] || usage; plugins=$2; shift 2 ;;
                --plugins=*) plugins=${1#*=}; shift ;;
                *) die "unknown argument '$1' (see --help)" ;;
            esac
        done
        [[ $plugins == stock || $plugins == allot || $plugins == installed ]] || die "--plugins must be stock, allot or installed, not '$plugins'"
        set_paths "$dir" create
        cmd_up "$plugins"
        ;;
    down)
        [[ -d $dir ]] || { say "down: $dir does not exist, nothing to stop"; exit 0; }
        set_paths "$dir"
        cmd_down
        ;;
    env)
        set_paths "$dir"
        printf 'export SLURM_CONF=%s\n' "$INNER/etc/slurm.conf"
        printf 'export ALLOT_CLUSTER_DIR=%s\n' "$DIR"
        [[ -z $PREFIX ]] || printf 'export PATH=%s\n' "$PREFIX/bin:$PREFIX/sbin:\$PATH"
        ;;
    logs)
        set_paths "$dir"
        print_logs "${1:-40}"
        ;;
    status)
        set_paths "$dir"
        cmd_status
        ;;
    restart-ctld)
        set_paths "$dir"
        cmd_restart_ctld
        ;;
    kill-ctld | start-ctld)
        [[ $# -eq 1 ]] || usage
        set_paths "$dir"
        if [[ $command == kill-ctld ]]; then cmd_kill_ctld "$1"; else cmd_start_ctld "$1"; fi
        ;;
    in-control)
        set_paths "$dir"
        ctld_in_control || { say "no slurmctld is in control (none alive with a fresh heartbeat in $DIR/state)" >&2; exit 1; }
        ;;
    *) usage ;;
esac
