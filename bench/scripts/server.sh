#!/usr/bin/env bash
# server.sh: what each ebrec family costs a real multi-threaded server under load, beside the
# reference tools doing the same work, in one run. The server is Debian's PostgreSQL driven by
# pgbench (16 client connections on 2 CPUs: 8 per CPU, so the server is saturated and every
# cost of a tracer comes out of its throughput); SERVER=nginx drives Debian's nginx with wrk.
#
# Each configuration is its own run of DURATION seconds of load against the same running
# server; the configurations are taken round-robin (ROUNDS rounds: untraced, A, B, ..., then
# again), so drift of the machine or of the server spreads over all of them. The tracer is
# started before the load and attached as a user would attach it, waited for until it says it
# is attached, the load runs, then the tracer is stopped (SIGINT) and its output checked:
# a tool that did not really run (no output, an error, no events) is "not run: <reason>",
# never counted.
#
# How the server's processes are followed. PostgreSQL forks a backend per connection, and
# pgbench connects anew at every run: `ebrec record -p PID` follows the children (and threads)
# of its targets from their fork, so the script passes the postmaster and its running children
# (checkpointer, walwriter, ...) with -p, and the backends of each run are followed from their
# fork (ebsym info --json on the first ebrec trace lists the processes; the script logs how many
# it found). `ebrec agent --comm '^postgres$'` finds them by name. bpftrace filters on comm;
# bcc's syscount takes the postmaster as parent (-c PPID), the other bcc tools take one pid
# at most, so they trace every process on the machine, as they do by default.
#
# Configurations (CONFIGS, names as here; default all):
#   untraced
#   ebrec-offcpu-sysexit  --offcpu with EBTRACE_OFFCPU_SYS_EXIT=1 (user stacks at syscall
#                      exits, as before rseq_update; not in the default set)
#   ebrec-lock-hub ebrec-memgrowth-hub ebrec-tcp-hub ebrec-diagnose-hub
#                      the same with EBTRACE_SYSCALL_HUB_ONLY=1: the few-call families on the
#                      raw syscall tracepoints' chain, as before their own per-syscall
#                      tracepoints (not in the default set)
#   ebrec-cpu ebrec-offcpu ebrec-lock ebrec-memgrowth ebrec-syscalls ebrec-bio ebrec-runq
#   ebrec-tcp ebrec-alloc4096   ebrec record --bpf-stats -o T --FAMILY -p PID... (--alloc=4096)
#   ebrec-alloc4096-nofree  --alloc=4096 --no-free: a stack per malloc of 4 KiB or more, no
#                      return probe, free not probed: what bt-malloc does (not in the default set)
#   ebrec-diagset      the diagnose set in one record: --cpu --offcpu --lock --memgrowth
#                      --syscalls --bio --runq --tcp (default thresholds, no budget)
#   ebrec-diagnose     ebrec diagnose -p PID... --duration DURATION+3 -o DIR (its own --max-cpu 5
#                      budget; the reports it makes with ebsym after the recording are not timed)
#   ebrec-agent        ebrec agent --bpf-stats --cpu --offcpu --comm '^postgres$' -o DIR/a.pb.zst
#                      (the agent's default: no wake hook)
#   ebrec-agent-cpu    the same with --cpu alone (99 Hz CPU samples, no off-CPU hooks) (not in
#                      the default set)
#   ebrec-agent-wakers the same with --offcpu-wakers on (the wake hook, as record has it) (not
#                      in the default set)
#   NAME-sched-POLICY  ebrec-cpu, ebrec-offcpu, ebrec-diagset or ebrec-agent with --sched POLICY
#                      (normal, idle, batch: ebrec's own threads; batch is the default) (not in
#                      the default set)
#   ebrec-request      SERVER=postgres: ebrec record --request
#                      usdt:postgresql:query__start,query__done (the statements as requests: two
#                      USDT hits each, nothing else) (not in the default set)
#   ebrec-request-split  the same with --offcpu: the kernel splits each statement's time (on
#                      CPU, run queue, off CPU), and off-CPU blocks are events (not in the default
#                      set)
#   ebrec-request-split-off  ebrec-request-split with --request-slow off: the sample alone, no
#                      slow request's blocks kept whole (the default is auto, p99) (not in the
#                      default set)
#   bt-request         bpftrace pairing the same probes: @s[tid] = nsecs at query__start, at
#                      query__done the delta into hist() (not in the default set)
#   bt-request-floor   bpftrace on the same probes doing nothing but a count at the done: the
#                      uprobe traps and the programs' dispatch, the floor of any USDT tracer
#                      (not in the default set)
#   bt-offcpu          bpftrace on sched_switch: at the switch-out of a server thread that blocks,
#                      @start[tid] = nsecs; at its switch-in the delta into hist() (no stacks)
#   bt-syscalls        bpftrace on raw_syscalls: at the entry of a server thread's call @start[tid]
#                      = nsecs; at its exit the delta into hist() per syscall number (what
#                      --syscalls counts of every call, without its stacks of slow calls)
#   bt-sysfloor        bpftrace's least program on raw_syscalls sys_enter and sys_exit: a pid
#                      test that fails (pid 1); what any tool timing system calls on these
#                      tracepoints pays per call before it does anything (not in the default set)
#   ebrec-sysfloor     ebrec record --syscalls -p of a sleeping process: the server's calls are
#                      not traced; what they pay is the hub's floor (tp_btf dispatch, one bit
#                      test) and the kernel's system call slow path (not in the default set)
#   bt-malloc          bpftrace uprobe:LIBC:malloc /arg0 >= 4096 && comm == server/
#                      { @[ustack] = count(); } on the server's libc (the trap is paid by every
#                      process calling malloc: pgbench too)
#   bt-malloc-leak     bpftrace doing what --alloc=4096 does (the leak report's data): size and
#                      ustack at malloc's entry, the block kept in a map at its return, deleted
#                      at free; comm filters as bt-malloc. Its uretprobe and free probe trap in
#                      every process calling malloc and free (not in the default set)
#   bt-profile         bpftrace profile:hz:99 /comm == server/ { @[kstack, ustack] = count(); }
#   bcc-offcputime bcc-profile bcc-runqlat bcc-syscount bcc-biolatency
#                      the bpfcc-tools (offcputime, profile -F 99, runqlat, biolatency: every
#                      process; syscount -L -c POSTMASTER): they compile their programs with
#                      clang against kernel headers, and some attach kprobes, which a kernel
#                      without kprobes does not have: those are "not run: <reason>"
#
# The table (also written to target/ebtrace-artifacts/bench/server-SERVER-MIX-TIME.md):
#   tps median     the median over the rounds of the load tool's own throughput (pgbench's
#                  "tps = N (without initial connection time)", wrk's Requests/sec)
#   x untraced     that median over untraced's median: 0.90 = the tracer cost 10% of the
#                  throughput. Compare it with ebrec's own accounting, next column
#   paired         the median over the rounds of this row's run over the same round's
#                  untraced run (taken minutes apart at most): the machine's slow drift
#                  (other tenants, the server's own state) cancels out of each ratio
#   min-max        the spread over the rounds; ratios inside the untraced row's spread mean
#                  nothing
#   accounted cost what the tracer cost in CPU, % of one CPU, medians over the rounds:
#                  ebrec rows, by ebrec's own account: "BPF X%" = the BPF run time its exit
#                  summary prints (--bpf-stats) over the load's seconds (the events come from
#                  the load; the recording is a second or two longer: start and stop), with its
#                  ns per program run; "budget Z% (N changes)" = ebrec diagnose's --max-cpu line
#                  (BPF, uprobe traps and its own CPU, its mean over the recording, and how often
#                  the budget cut or paused a family); "proc Y%" = ebrec's process CPU (user +
#                  system, /proc/PID/stat) during the load, measured by the script. "BPF" has no
#                  uprobe traps in it (ebrec-alloc4096: every malloc of the server traps, ~1 us
#                  each here): "uprobe traps T%" is ebrec's own account of them (its summary's
#                  "uprobe traps X ms more": its uprobe programs' runs times a trap timed on a
#                  uprobe of ebrec's own, STATS=1 only). Other rows, measured by the script: "proc" the tool's process
#                  CPU during the load, "BPF" the run time of the programs it holds (their fds'
#                  fdinfo, with kernel.bpf_stats_enabled on for the run, as ebrec's --bpf-stats
#                  turns it on). "events": what the tool saw (ebrec: probe hits of its summary;
#                  bpftrace/bcc: the sum of their counts). 2 CPUs: 10% of one CPU is 5% of the
#                  machine, so "BPF + proc" = 10% predicts a ratio near 0.95 on a saturated server.
#                  "wakeups N/s": the tracer's context switches (voluntary and involuntary, all
#                  its threads, /proc/PID/task/*/status) a second during the load: each one is
#                  a moment it took a CPU from the server (or was taken off one)
#   lost / unexplained  the throughput lost as CPU (a saturated machine: (1 - paired) of each
#                  of the CPUs' work, % of one CPU), and that less the accounted cost (BPF +
#                  proc + uprobe traps): what ebrec's own account does not explain. Within
#                  the untraced row's spread both mean nothing
#
# Usage: bench/scripts/server.sh               (as root)
#   EBREC=target/release/ebrec EBSYM=target/release/ebsym   (defaults: target/release/ here)
#   SERVER=postgres          postgres (pgbench) or nginx (wrk)
#   MIX=select               pgbench: select (-S, select-only) or tpcb (the tpcb-like
#                            read-write mix: fsyncs at every commit); ignored for nginx
#   ROUNDS=5                 rounds over the configurations; the table shows the median per row
#   DURATION=15              seconds of load per run
#   CONFIGS="untraced ebrec-offcpu ..."   the configurations to run (default all)
#   EBREC_B=path             a second ebrec build: an ebrec row NAME@b (ebrec-offcpu@b) runs
#                            it in the same rounds as NAME, and its paired cell adds "vs A
#                            M, min-max": the median over the rounds of (this round's NAME@b
#                            / NAME), two builds compared without the drift between runs
#   CLIENTS=8*CPUs           pgbench -c (wrk: -c 64 unless CLIENTS is set)
#   JOBS=CPUs                pgbench -j / wrk -t
#   SCALE=20                 pgbench -i -s SCALE (20: about 300 MiB, fits in RAM)
#   PORT=54329               the server's port on 127.0.0.1 (postgres); nginx: PORT+1
#   WAIT_IDLE_S=0            before each run, wait up to this long for the machine to be idle
#   READY_TIMEOUT=120        seconds a tool may take to attach (bcc compiles first)
#   KEEP=DIR                 keep every tool's output (and the first trace of each ebrec row)
#   STATS=1                  0: no BPF stats for any row (ebrec rows without --bpf-stats, the
#                            other tools without kernel.bpf_stats_enabled): the throughput as
#                            a user who does not ask for them pays it (they cost every program
#                            run two clock reads: ~+300 ns a traced system call under
#                            --syscalls on a KVM guest), with no "BPF" in the accounted cost.
#                            `ebrec diagnose` measures with them (sampled) either way
#   RESULTS_DIR=target/ebtrace-artifacts/bench
#
# Installs when missing: postgresql, postgresql-contrib (pgbench), bpftrace; bpfcc-tools and
# linux-headers-amd64 when a bcc row is asked for; nginx-light and wrk for SERVER=nginx (their
# service start held back by a temporary /usr/sbin/policy-rc.d). Initialises a
# throwaway cluster as user postgres in a temporary directory under /var/tmp (a disk: the
# tpcb mix's fsyncs must reach one) on 127.0.0.1:PORT, loads it with pgbench -i, warms it
# with one untimed untraced run, and stops and removes it at exit.
#
# Not a timed assertion: the numbers hold for this machine and how busy it was. With builds
# running beside it, read the ratios with the untraced row's min-max beside them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

NCPU=$(nproc)
SERVER=${SERVER:-postgres}
MIX=${MIX:-select}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-15}
JOBS=${JOBS:-$NCPU}
SCALE=${SCALE:-20}
PORT=${PORT:-54329}
READY_TIMEOUT=${READY_TIMEOUT:-120}
KEEP=${KEEP:-}
STATS=${STATS:-1}
STATS_FLAG=(--bpf-stats)
[ "$STATS" = 1 ] || STATS_FLAG=()
RESULTS_DIR=${RESULTS_DIR:-$root/target/ebtrace-artifacts/bench}
EBREC=${EBREC:-$root/target/release/ebrec}
EBSYM=${EBSYM:-$root/target/release/ebsym}
ALL_CONFIGS="untraced ebrec-cpu ebrec-offcpu ebrec-lock ebrec-memgrowth ebrec-syscalls ebrec-bio"
ALL_CONFIGS+=" ebrec-runq ebrec-tcp ebrec-alloc4096 ebrec-diagset ebrec-diagnose ebrec-agent"
ALL_CONFIGS+=" bt-offcpu bt-syscalls bt-malloc bt-profile"
ALL_CONFIGS+=" bcc-offcputime bcc-profile bcc-runqlat bcc-syscount bcc-biolatency"
KNOWN_CONFIGS="$ALL_CONFIGS ebrec-agent-wakers ebrec-agent-cpu ebrec-request ebrec-request-split ebrec-request-split-off bt-request bt-request-floor bt-sysfloor bt-malloc-leak ebrec-alloc4096-nofree ebrec-sysfloor ebrec-offcpu-sysexit ebrec-lock-hub ebrec-memgrowth-hub ebrec-tcp-hub"
KNOWN_CONFIGS+=" ebrec-diagnose-hub"
# ebrec record and agent rows with --sched POLICY (ebrec's own threads; default batch)
for p in normal idle batch; do
  for c in ebrec-cpu ebrec-offcpu ebrec-diagset ebrec-agent; do KNOWN_CONFIGS+=" $c-sched-$p"; done
done
CONFIGS=${CONFIGS:-$ALL_CONFIGS}
CONFIGS=$(tr -s ' \t\n' ' ' <<<"$CONFIGS" | sed 's/^ //; s/ $//')

case $SERVER in
  postgres) CLIENTS=${CLIENTS:-$((8 * NCPU))} COMM=postgres ;;
  nginx) CLIENTS=${CLIENTS:-64} COMM=nginx ;;
  *) die "SERVER=$SERVER: postgres or nginx" ;;
esac
case $MIX in select | tpcb) ;; *) die "MIX=$MIX: select or tpcb" ;; esac
[ "$SERVER" = postgres ] || MIX=static
for v in ROUNDS DURATION CLIENTS JOBS SCALE PORT READY_TIMEOUT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number"
done
for c in $CONFIGS; do
  [[ " $KNOWN_CONFIGS " == *" ${c%@b} "* ]] || die "unknown configuration $c (known: $KNOWN_CONFIGS)"
  case $c in
    ebrec-*@b) [ -x "${EBREC_B:-}" ] || die "$c: EBREC_B must name an ebrec build" ;;
    *@b) die "$c: only ebrec rows take @b" ;;
  esac
done
[[ " $CONFIGS " == *" untraced "* ]] || log "no untraced in CONFIGS: the x untraced column stays empty"

need_root

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-server.XXXXXX")
SRV_DIR=""
POLICY_RC_ADDED=0
STATS_WAS=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
cleanup() {
  bg_cleanup
  # ebrec-sysfloor's target outlives the runs (BG_PIDS is emptied after each): stopped here.
  [ -z "${SLEEPER:-}" ] || kill "$SLEEPER" 2>/dev/null || true
  sysctl -q -w kernel.bpf_stats_enabled="$STATS_WAS" 2>/dev/null || true
  server_stop || true
  [ "$POLICY_RC_ADDED" = 0 ] || rm -f /usr/sbin/policy-rc.d
  case $SRV_DIR in /var/tmp/ebtrace-server-*) rm -rf "$SRV_DIR" ;; esac
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- what to install ------------------------------------------------------------------------
want() { [[ " $CONFIGS " == *" $1"* ]]; } # want PREFIX: some configuration starts with PREFIX
if [ "$SERVER" = postgres ]; then
  apt_install postgresql postgresql-contrib
else
  if ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; then
    # Debian starts a package's service when it installs it (nginx on port 80): hold it back.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod +x /usr/sbin/policy-rc.d
      POLICY_RC_ADDED=1
    fi
    apt_install nginx-light wrk
  fi
fi
if want bt-; then apt_install bpftrace; fi
ensure_tracefs
BCC_OK=0 BCC_WHY=""
if want bcc-; then
  # (in a subshell: apt_install dies when apt-get fails)
  if ! (apt_install bpfcc-tools linux-headers-amd64); then
    BCC_WHY="could not install bpfcc-tools/linux-headers-amd64"
  elif bcc_headers; then
    BCC_OK=1
  fi
  [ "$BCC_OK" = 1 ] || log "bcc: cannot run here ($BCC_WHY): its rows say not run"
fi
EBREC_OK=0
if ebrec_available; then EBREC_OK=1; fi
if want ebrec- && [ "$EBREC_OK" = 0 ]; then log "$(ebrec_skip_reason): the ebrec rows say not run"; fi
[ -z "$KEEP" ] || mkdir -p "$KEEP"
HZ=$(getconf CLK_TCK)

# --- the server -----------------------------------------------------------------------------
# server_start, server_stop, server_pids (the running processes, main first), server_main,
# load_cmd (LOAD: the load tool's argv for SECS), rate_of OUT (its throughput).
PG_BIN=""
as_pg() { runuser -u postgres -- "$@"; }
server_start() {
  case $SERVER in
    postgres)
      # shellcheck disable=SC2012 # Debian's layout
      PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
      [ -x "$PG_BIN/initdb" ] || die "no /usr/lib/postgresql/*/bin/initdb"
      command -v pgbench >/dev/null || die "no pgbench (postgresql-contrib)"
      SRV_DIR=$(mktemp -d /var/tmp/ebtrace-server-pg.XXXXXX)
      chown postgres: "$SRV_DIR"
      log "initdb in $SRV_DIR/data ($PG_BIN), port $PORT on 127.0.0.1"
      as_pg "$PG_BIN/initdb" -D "$SRV_DIR/data" -U postgres --auth=trust --no-sync >"$TMP/initdb.log" 2>&1 ||
        { tail -n 20 "$TMP/initdb.log" >&2; die "initdb failed"; }
      as_pg "$PG_BIN/pg_ctl" -D "$SRV_DIR/data" -l "$SRV_DIR/server.log" -w -t 60 \
        -o "-c port=$PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$SRV_DIR -c max_connections=$((CLIENTS + 20)) -c shared_buffers=512MB" \
        start >"$TMP/pg_ctl.log" 2>&1 || { tail -n 20 "$SRV_DIR/server.log" >&2; die "the server did not start"; }
      log "pgbench -i -s $SCALE"
      pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$PORT" -U postgres postgres >"$TMP/pgbench-init.log" 2>&1 ||
        { tail -n 20 "$TMP/pgbench-init.log" >&2; die "pgbench -i failed"; } ;;
    nginx)
      SRV_DIR=$(mktemp -d /var/tmp/ebtrace-server-nginx.XXXXXX)
      mkdir -p "$SRV_DIR/www"
      head -c 4096 /dev/urandom | base64 >"$SRV_DIR/www/index.html"
      cat >"$SRV_DIR/nginx.conf" <<EOF
worker_processes $NCPU;
pid $SRV_DIR/nginx.pid;
error_log $SRV_DIR/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $SRV_DIR/tmp;
  proxy_temp_path $SRV_DIR/tmp;
  fastcgi_temp_path $SRV_DIR/tmp;
  uwsgi_temp_path $SRV_DIR/tmp;
  scgi_temp_path $SRV_DIR/tmp;
  server { listen 127.0.0.1:$((PORT + 1)); root $SRV_DIR/www; }
}
EOF
      log "nginx on 127.0.0.1:$((PORT + 1)), $NCPU workers"
      nginx -c "$SRV_DIR/nginx.conf" -g 'daemon on;' >"$TMP/nginx.log" 2>&1 ||
        { cat "$TMP/nginx.log" >&2; die "nginx did not start"; }
      for _ in $(seq 1 50); do [ -s "$SRV_DIR/nginx.pid" ] && break; sleep 0.1; done ;;
  esac
}
server_main() {
  case $SERVER in
    postgres) head -n1 "$SRV_DIR/data/postmaster.pid" 2>/dev/null ;;
    nginx) cat "$SRV_DIR/nginx.pid" 2>/dev/null ;;
  esac
}
# The long-lived processes only: a backend or an autovacuum worker may be gone by the time the
# tracer looks it up (ebrec refuses a -p PID that does not exist).
server_pids() {
  local main
  main=$(server_main) || return 1
  [ -n "$main" ] || return 1
  echo "$main"
  case $SERVER in
    postgres)
      ps -o pid=,args= --ppid "$main" 2>/dev/null |
        awk '$2 == "postgres:" && $3 ~ /^(checkpointer|background|walwriter|autovacuum|logical|archiver|stats)/ && $0 !~ /autovacuum worker/ { print $1 }' ;;
    nginx) pgrep -P "$main" || true ;;
  esac
}
server_stop() {
  [ -n "$SRV_DIR" ] || return 0
  case $SERVER in
    postgres)
      [ -f "$SRV_DIR/data/postmaster.pid" ] || return 0
      as_pg "$PG_BIN/pg_ctl" -D "$SRV_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        as_pg "$PG_BIN/pg_ctl" -D "$SRV_DIR/data" -m immediate -w -t 30 stop >/dev/null 2>&1 ;;
    nginx)
      [ -s "$SRV_DIR/nginx.pid" ] || return 0
      nginx -c "$SRV_DIR/nginx.conf" -s stop 2>/dev/null || true ;;
  esac
}
load_cmd() { # SECS
  case $SERVER in
    postgres)
      LOAD=(pgbench -h 127.0.0.1 -p "$PORT" -U postgres -c "$CLIENTS" -j "$JOBS" -T "$1")
      [ "$MIX" = tpcb ] || LOAD+=(-S)
      LOAD+=(postgres) ;;
    nginx)
      LOAD=(wrk -t "$JOBS" -c "$CLIENTS" -d "${1}s" "http://127.0.0.1:$((PORT + 1))/index.html") ;;
  esac
}
rate_of() { # OUT: the throughput, or "-"
  case $SERVER in
    postgres) awk '/^tps = / { v = $3 } END { print (v == "" ? "-" : v) }' "$1" ;;
    nginx) awk '/^Requests\/sec:/ { v = $2 } END { print (v == "" ? "-" : v) }' "$1" ;;
  esac
}
# run_load OUT: the load, bounded (a hung server must not hang the script); fails without a rate.
# Sets STEAL: the share of the machine's CPU time the hypervisor gave to others during the
# run (/proc/stat's steal over the time of every CPU state, %): on a virtual machine the largest
# source of run-to-run spread, and a round with much of it says little.
run_load() {
  local s0 s1
  load_cmd "$DURATION"
  s0=$(cpu_steal)
  timeout -k 10 $((DURATION + 120)) "${LOAD[@]}" >"$1" 2>&1 || return 1
  s1=$(cpu_steal)
  STEAL=$(awk -v a="$s0" -v b="$s1" 'BEGIN { split(a, x); split(b, y); t = y[2] - x[2]; printf "%.1f", (t > 0 ? 100 * (y[1] - x[1]) / t : 0) }')
  [ "$(rate_of "$1")" != - ]
}
# cpu_steal: "STEAL TOTAL" jiffies of all CPUs so far (guest time is in user time already).
cpu_steal() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat; }

# --- helpers ----------------------------------------------------------------------------------
# proc_ticks PID: user + system clock ticks of a running process, or "-".
proc_ticks() {
  local line f
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || { echo -; return 0; }
  read -r -a f <<<"${line##*) }"
  echo $((f[11] + f[12]))
}
# ctx_switches PID: context switches (voluntary + involuntary) of all threads of a running
# process so far, or "-": each is a wakeup of the tracer (or a preemption of it).
ctx_switches() {
  local n
  n=$(cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/ { n += $2; seen = 1 } END { if (seen) print n; else print "-" }')
  echo "${n:--}"
}
# pct_of_cpu TICKS0 TICKS1 SECS: CPU share (% of one CPU) between two proc_ticks readings.
pct_of_cpu() {
  awk -v a="$1" -v b="$2" -v s="$3" -v hz="$HZ" 'BEGIN {
    if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && s > 0) printf "%.1f", 100 * (b - a) / hz / s; else print "-" }'
}
# wait_exit PID SECS: wait up to SECS for PID (a child) to end; sets EXIT_RC (124: still running).
wait_exit() {
  local pid=$1 n=$(($2 * 10))
  while kill -0 "$pid" 2>/dev/null && [ "$n" -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
  if kill -0 "$pid" 2>/dev/null; then EXIT_RC=124; return 0; fi
  EXIT_RC=0
  wait "$pid" 2>/dev/null || EXIT_RC=$?
}
# stop_tool PID SECS: SIGINT, up to SECS to finish (bpftrace prints its maps, bcc its tables),
# then SIGTERM and SIGKILL. Sets EXIT_RC (the tool's; 130 for SIGINT is taken as success).
stop_tool() {
  local pid=$1
  kill -INT "$pid" 2>/dev/null || true
  wait_exit "$pid" "$2"
  if [ "$EXIT_RC" = 124 ]; then
    log "the tool (pid $pid) did not stop within $2 s of SIGINT"
    stop_pid "$pid" TERM
    EXIT_RC=124
  fi
  [ "$EXIT_RC" != 130 ] || EXIT_RC=0
}
# wait_bpf_prog PID SECS: until PID holds a BPF program (bcc's profile prints its header before
# it compiles and loads its program).
wait_bpf_prog() {
  local pid=$1 n=$(($2 * 10))
  while [ "$n" -gt 0 ]; do
    kill -0 "$pid" 2>/dev/null || return 1
    find "/proc/$pid/fd" -lname 'anon_inode:bpf-prog' 2>/dev/null | grep -q . && return 0
    sleep 0.1
    n=$((n - 1))
  done
  return 1
}
# why_of FILE: the line of a tool's output that says best why it failed.
why_of() {
  local l
  l=$(grep -v -e '^__BPFTRACE' -e 'RLIMIT_MEMLOCK' "$1" 2>/dev/null | grep -iE 'error|no such|not found|cannot|failed|denied|invalid|exception|unknown|unable' | tail -n1 || true)
  [ -n "$l" ] || l=$(grep -v '^\s*$' "$1" 2>/dev/null | grep -v '^__BPFTRACE' | tail -n1 || true)
  l=${l:-"no output"}
  l=${l//|/\/}
  echo "${l:0:160}"
}
# bpf_ns PID: total run_time_ns of the BPF programs PID holds open (its fdinfo: prog_id and
# run_time_ns, counted while kernel.bpf_stats_enabled is on; each program once), or "-".
bpf_ns() {
  local f
  for f in /proc/"$1"/fdinfo/*; do
    cat "$f" 2>/dev/null || true
  done | awk '/^prog_id:/ { id = $2 } /^run_time_ns:/ && id != "" { if (!(id in seen)) { seen[id] = 1; s += $2; n++ } id = "" }
    END { if (n) print s; else print "-" }'
}

# Output checks: each prints the tool's events (a count > 0) or nothing.
# bpftrace's hist(): "[512, 1K)  958 |@@@@|"; maps of stacks: "]: 123".
ev_bt_hist() { awk '/^[[(].*\|/ { sub(/\|.*/, ""); s += $NF } END { if (s > 0) print s }' "$1"; }
# bt-sysfloor counts nothing on purpose: it ran when bpftrace said it attached its probes.
ev_bt_kept() { awk '/^@kept: [0-9]+$/ { print $2 }' "$1"; }
ev_bt_none() { grep -q '^Attaching' "$1" && echo 0; }
ev_bt_map() { awk '/^\]: [0-9]+$/ { s += $2 } END { if (s > 0) print s }' "$1"; }
# bcc: histograms ("  32 -> 63  : 294  |****|"); profile/offcputime stacks end with a count
# line; syscount -L's table rows "NAME COUNT TIME".
ev_bcc_hist() { awk '/->.*:.*\|/ { split($0, a, ":"); split(a[2], b, " "); s += b[1] } END { if (s > 0) print s }' "$1"; }
ev_bcc_stacks() { awk '/^ +[0-9]+$/ { s += $1 } END { if (s > 0) print s }' "$1"; }
ev_syscount() { awk 'NF == 3 && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ { s += $2 } END { if (s > 0) print s }' "$1"; }
# ebrec's summary: the probe hits of all families, when its programs ran (--bpf-stats: "BPF run
# time ... for N program runs", N > 0; STATS=0: a family's line). No hits is a result then
# (--lock: no contended wait).
# (Without stats, a recording that ended with its summary and saw nothing, e.g. --lock where
# no futex wait ends, is 0 events: its summary has no family line then.)
ev_ebrec() {
  tr '\r' '\n' <"$1" | awk -v nostats="$([ "$STATS" = 1 ] || echo 1)" '/^ebrec: +[a-z_-]+ +kept +[0-9]+ +lost/ { fams++; for (i = 1; i < NF; i++) if ($i == "hits") s += $(i + 1) }
    /^ebrec: +BPF run time .* for [0-9]+ program runs/ { for (i = 1; i < NF; i++) if ($i == "for") runs = $(i + 1) }
    /^ebrec: .* after [0-9.]+ s: [0-9]+ processes/ { ended = 1 }
    END { if (runs > 0 || (nostats && (fams > 0 || ended))) print s + 0 }'
}
# ev_agent OUT: the window files the agent closed or is writing, if they hold anything.
ev_agent() {
  local n
  n=$(find "$TMP/agent" -name '*.pb.zst' -size +0 2>/dev/null | wc -l)
  [ "$n" -gt 0 ] || return 0
  echo "$(ev_ebrec "$1" || true) in $n windows"
}
ev_diagnose() { [ -s "$TMP/diag/summary.txt" ] && ev_ebrec "$1"; }

# ebrec_cost OUT SECS: from ebrec's exit summary: COST_BPF, its BPF run time over SECS (the
# load's length: the events come from the load; ebrec's recording is a second or two longer, its
# start and stop), % of one CPU; COST_NSRUN, its ns per program run; with --max-cpu, COST_BUDGET
# (the budget line's mean over the recording) and COST_CHANGES (the budget's changes);
# COST_TRAPS, the uprobe traps around its uprobe programs' runs by its own account ("uprobe
# traps X ms more", --bpf-stats), over SECS as COST_BPF.
ebrec_cost() {
  local out=$1 secs=$2
  # --max-cpu without --bpf-stats measures a part of the time ("BPF run time measured X s of
  # the Y s"): its run time is of those X seconds.
  COST_BPF=$(tr '\r' '\n' <"$out" | awk -v secs="$secs" '
    /^ebrec: +BPF run time measured [0-9.]+ s of/ { secs = $6 }
    /^ebrec: +BPF run time [0-9.]+ ms/ { ms += $5; n++ }
    END { if (secs > 0 && n) printf "%.2f", ms / (secs * 1000) * 100; else print "-" }')
  COST_TRAPS=$(tr '\r' '\n' <"$out" | awk -v secs="$secs" '
    /^ebrec: +BPF run time measured [0-9.]+ s of/ { secs = $6 }
    /^ebrec: +uprobe traps [0-9.]+ ms more/ { ms += $4; n++ }
    END { if (secs > 0 && n) printf "%.2f", ms / (secs * 1000) * 100; else print "-" }')
  COST_CHANGES=$(tr '\r' '\n' <"$out" | awk '/--max-cpu [0-9.]+%: ebrec cost/ { if (match($0, /[0-9]+ changes/)) v = substr($0, RSTART, RLENGTH - 8) } END { print (v == "" ? "-" : v) }')
  COST_NSRUN=$(tr '\r' '\n' <"$out" | awk '/^ebrec: +BPF run time/ { if (match($0, /[0-9]+ ns per run/)) v = substr($0, RSTART, RLENGTH - 11) } END { print (v == "" ? "-" : v) }')
  COST_BUDGET=$(tr '\r' '\n' <"$out" | awk '/--max-cpu [0-9.]+%: ebrec cost/ { if (match($0, /cost [0-9.]+%/)) v = substr($0, RSTART + 5, RLENGTH - 6) } END { print (v == "" ? "-" : v) }')
}

# --- bpftrace programs --------------------------------------------------------------------------
BT=(env --default-signal=INT __BPFTRACE_NOTIFY_PROBES_ATTACHED=1 bpftrace -e)
BT_READY='^__BPFTRACE_NOTIFY_PROBES_ATTACHED'
bt_offcpu_prog() {
  echo "tracepoint:sched:sched_switch {
  if (args->prev_state != 0 && comm == \"$COMM\") { @start[args->prev_pid] = nsecs; }
  \$s = @start[args->next_pid];
  if (\$s) { delete(@start[args->next_pid]); @offcpu_us = hist((nsecs - \$s) / 1000); }
}
END { clear(@start); }"
}
# What --request keeps of every statement (its latency), as bpftrace pairs the same probes.
bt_request_prog() {
  echo "usdt:$1:postgresql:query__start { @s[tid] = nsecs; }
usdt:$1:postgresql:query__done /@s[tid]/ { @query_ns = hist(nsecs - @s[tid]); delete(@s[tid]); }
END { clear(@s); }"
}
# What --syscalls keeps of every call (its latency in a histogram per system call), as bpftrace
# says it: the entry's time per thread, at the exit the delta into hist() per syscall number.
bt_syscalls_prog() {
  echo "tracepoint:raw_syscalls:sys_enter /comm == \"$COMM\"/ { @start[tid] = nsecs; }
tracepoint:raw_syscalls:sys_exit /@start[tid]/ {
  @sys_ns[args->id] = hist(nsecs - @start[tid]); delete(@start[tid]);
}
END { clear(@start); }"
}
# The floor of every tool on the raw system call tracepoints: a program on each that tests the
# pid and leaves (pid 1 is never the server): the kernel's slow path and dispatch per call.
bt_sysfloor_prog() { echo "tracepoint:raw_syscalls:sys_enter,tracepoint:raw_syscalls:sys_exit /pid == 1/ { @n = count(); }"; }
bt_malloc_prog() { echo "uprobe:$1:malloc /arg0 >= 4096 && comm == \"$COMM\"/ { @[ustack] = count(); }"; }
# As leveldb.sh's bt-malloc-leak: the blocks of 4 KiB or more still live, by address, with
# their stacks (cleared at END: only the count of blocks kept is printed).
bt_malloc_leak_prog() {
  echo "uprobe:$1:malloc /arg0 >= 4096 && comm == \"$COMM\"/ { @sz[tid] = arg0; @stk[tid] = ustack; }
uretprobe:$1:malloc /@sz[tid]/ { @live[retval] = @stk[tid]; @kept = count(); delete(@sz[tid]); delete(@stk[tid]); }
uprobe:$1:free /comm == \"$COMM\"/ { delete(@live[arg0]); }
END { clear(@live); clear(@sz); clear(@stk); }"
}
bt_profile_prog() { echo "profile:hz:99 /comm == \"$COMM\"/ { @[kstack, ustack] = count(); }"; }
# The server's libc, as its processes map it.
server_libc() {
  awk '$6 ~ /\/libc[.-][^\/]*so/ { print $6; exit }' "/proc/$(server_main)/maps" 2>/dev/null
}

# --- one run ----------------------------------------------------------------------------------
# Per configuration: TPS (per-run list), CB/CP (ebrec BPF % / process %), NS (ns per run),
# BU (budget %), EVN (events of the last run), WHY (why it does not run: set once).
declare -A TPS CB CP NS BU CH TR EVN WHY FAILS UNT_R PAIR RATE_R ST WK
FIRST_TRACE_DONE=0
PROC_NOTE=""

# tool_argv CONFIG: sets TOOL_ARGV, READY (regex), EVFN, STOP_S (the time it may take to print
# its maps or tables after SIGINT: bpftrace resolves every stack's symbols then, per process);
# or WHY[CONFIG].
tool_argv() {
  local c=$1 pids=() p fam ebrec=$EBREC
  for p in $(server_pids); do pids+=(-p "$p"); done
  TOOL_ARGV=() READY="" EVFN="" STOP_S=300 TRACE=""
  local hub=()
  case $c in
    *@b) ebrec=$EBREC_B c=${c%@b} ;;
  esac
  case $c in
    *-hub) hub=(EBTRACE_SYSCALL_HUB_ONLY=1); c=${c%-hub} ;;
  esac
  local sched=()
  case $c in
    *-sched-normal | *-sched-idle | *-sched-batch) sched=(--sched "${c##*-sched-}"); c=${c%-sched-*} ;;
  esac
  case $c in
    ebrec-*)
      [ "$EBREC_OK" = 1 ] || { WHY[$1]=$(ebrec_skip_reason); return 1; }
      TRACE=$TMP/$1.pb.zst
      READY='^ebrec: recording to'
      EVFN=ev_ebrec
      case $c in
        ebrec-alloc4096) fam=(--alloc=4096) ;;
        ebrec-alloc4096-nofree) fam=(--alloc=4096 --no-free) ;;
        ebrec-offcpu-sysexit)
          # --offcpu as before rseq_update: user stacks at the next syscall exit.
          TOOL_ARGV=(env --default-signal=INT EBTRACE_OFFCPU_SYS_EXIT=1 "$ebrec" record -q "${STATS_FLAG[@]}" -o "$TRACE" --offcpu "${pids[@]}")
          return 0 ;;
        ebrec-diagset) fam=(--cpu --offcpu --lock --memgrowth --syscalls --bio --runq --tcp) ;;
        ebrec-request | ebrec-request-split | ebrec-request-split-off)
          [ "$SERVER" = postgres ] || { WHY[$1]="PostgreSQL's query probes: SERVER=postgres only"; return 1; }
          fam=(--request usdt:postgresql:query__start,query__done)
          [ "$c" = ebrec-request ] || fam+=(--offcpu)
          [ "$c" != ebrec-request-split-off ] || fam+=(--request-slow off) ;;
        ebrec-sysfloor)
          # --syscalls of a sleeping process: every call of the server pays the system call
          # hub's dispatch and target test, and nothing else.
          [ -n "${SLEEPER:-}" ] && kill -0 "$SLEEPER" 2>/dev/null || { sleep 100000 & SLEEPER=$!; }
          TOOL_ARGV=(env --default-signal=INT "$ebrec" record -q "${STATS_FLAG[@]}" -o "$TRACE" --syscalls -p "$SLEEPER")
          return 0 ;;
        ebrec-diagnose)
          rm -rf "$TMP/diag"
          TOOL_ARGV=(env --default-signal=INT "${hub[@]}" "$ebrec" diagnose "${pids[@]}" --duration $((DURATION + 3)) -o "$TMP/diag")
          [ ! -x "$EBSYM" ] || TOOL_ARGV+=(--ebsym "$EBSYM")
          EVFN=ev_diagnose
          return 0 ;;
        ebrec-agent | ebrec-agent-wakers | ebrec-agent-cpu)
          rm -rf "$TMP/agent"
          mkdir -p "$TMP/agent"
          local wk=(--offcpu)
          [ "$c" != ebrec-agent-wakers ] || wk+=(--offcpu-wakers on)
          [ "$c" != ebrec-agent-cpu ] || wk=()
          TOOL_ARGV=(env --default-signal=INT "$ebrec" agent -q "${sched[@]}" "${STATS_FLAG[@]}" --cpu "${wk[@]}" --comm "^$COMM\$" -o "$TMP/agent/a.pb.zst")
          READY='^ebrec'
          EVFN=ev_agent
          return 0 ;;
        *) fam=("--${c#ebrec-}") ;;
      esac
      TOOL_ARGV=(env --default-signal=INT "${hub[@]}" "$ebrec" record -q "${sched[@]}" "${STATS_FLAG[@]}" -o "$TRACE" "${fam[@]}" "${pids[@]}") ;;
    bt-*)
      command -v bpftrace >/dev/null || { WHY[$1]="no bpftrace"; return 1; }
      READY=$BT_READY
      case $c in
        bt-offcpu) TOOL_ARGV=("${BT[@]}" "$(bt_offcpu_prog)") EVFN=ev_bt_hist ;;
        bt-syscalls) TOOL_ARGV=("${BT[@]}" "$(bt_syscalls_prog)") EVFN=ev_bt_hist ;;
        bt-sysfloor) TOOL_ARGV=("${BT[@]}" "$(bt_sysfloor_prog)") EVFN=ev_bt_none ;;
        bt-malloc)
          local libc
          libc=$(server_libc)
          [ -n "$libc" ] || { WHY[$1]="no libc in the maps of pid $(server_main)"; return 1; }
          TOOL_ARGV=("${BT[@]}" "$(bt_malloc_prog "$libc")") EVFN=ev_bt_map ;;
        bt-malloc-leak)
          local libc
          libc=$(server_libc)
          [ -n "$libc" ] || { WHY[$1]="no libc in the maps of pid $(server_main)"; return 1; }
          TOOL_ARGV=("${BT[@]}" "$(bt_malloc_leak_prog "$libc")") EVFN=ev_bt_kept ;;
        bt-profile) TOOL_ARGV=("${BT[@]}" "$(bt_profile_prog)") EVFN=ev_bt_map ;;
        bt-request)
          [ "$SERVER" = postgres ] || { WHY[$1]="PostgreSQL's query probes: SERVER=postgres only"; return 1; }
          local exe
          exe=$(readlink -f "/proc/$(server_main)/exe")
          TOOL_ARGV=("${BT[@]}" "$(bt_request_prog "$exe")") EVFN=ev_bt_hist ;;
        bt-request-floor)
          [ "$SERVER" = postgres ] || { WHY[$1]="PostgreSQL's query probes: SERVER=postgres only"; return 1; }
          local exe
          exe=$(readlink -f "/proc/$(server_main)/exe")
          TOOL_ARGV=("${BT[@]}" "usdt:$exe:postgresql:query__start {} usdt:$exe:postgresql:query__done { @kept = count(); }") EVFN=ev_bt_kept ;;
      esac ;;
    bcc-*)
      [ "$BCC_OK" = 1 ] || { WHY[$1]="bcc: $BCC_WHY"; return 1; }
      local tool=${c#bcc-}-bpfcc
      command -v "$tool" >/dev/null || { WHY[$1]="no $tool in PATH"; return 1; }
      case $c in bcc-offcputime | bcc-biolatency)
        if [ ! -e /sys/bus/event_source/devices/kprobe ] && [ ! -e /sys/kernel/tracing/kprobe_events ]; then
          WHY[$1]="the kernel has no kprobes (no kprobe PMU, no kprobe_events); bcc $(dpkg-query -W -f='${Version}' bpfcc-tools 2>/dev/null | cut -d+ -f1)'s ${c#bcc-} attaches kprobes only"
          return 1
        fi
        if [ ! -e /sys/kernel/debug/kprobes ]; then
          log "mounting debugfs on /sys/kernel/debug (bcc reads the kprobe blacklist there)"
          mount -t debugfs debugfs /sys/kernel/debug || true
        fi ;;
      esac
      # bcc prints its "Tracing..." line with print(): unbuffered, so it reaches the file.
      TOOL_ARGV=(env --default-signal=INT PYTHONUNBUFFERED=1 "$tool")
      READY='^(Tracing|Sampling)'
      case $c in
        bcc-offcputime) EVFN=ev_bcc_stacks ;;
        bcc-profile) TOOL_ARGV+=(-F 99) EVFN=ev_bcc_stacks ;;
        bcc-runqlat | bcc-biolatency) EVFN=ev_bcc_hist ;;
        bcc-syscount)
          # -c PPID reads task->real_parent with the offsets of the headers bcc compiles with:
          # only the running kernel's own headers get them right (Debian 12 on a newer kernel
          # has 6.1's: it matched nothing), so without them it counts every process.
          if [ "$SERVER" = postgres ] && [ -e "/lib/modules/$(uname -r)/build" ]; then
            TOOL_ARGV+=(-L -c "$(server_main)")
          else
            TOOL_ARGV+=(-L)
          fi
          EVFN=ev_syscount ;;
      esac ;;
  esac
  return 0
}

# note_processes TRACE: the processes the trace holds (ebsym info --json: attached with -p, or
# followed from a fork) and how many of its events came from the forked ones (ebsym top --pid).
note_processes() {
  [ -x "$EBSYM" ] || { PROC_NOTE="(no ebsym at $EBSYM to list the trace's processes)"; return 0; }
  "$EBSYM" info "$1" --json >"$TMP/info.json" 2>"$TMP/info.err" || { PROC_NOTE="ebsym info failed: $(why_of "$TMP/info.err")"; return 0; }
  PROC_NOTE=$(python3 - "$TMP/info.json" "$EBSYM" "$1" <<'EOF' 2>&1 | tail -n1 || true
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
procs = d.get("processes") or []
existing = [p for p in procs if p.get("event") == "existing"]
forked = [p for p in procs if p.get("event") == "fork"]
ev = {k: v for k, v in (d.get("events") or {}).items() if k != "histogram_rows" and v}
line = "%d processes: %d attached with -p, %d followed from their fork" % (len(procs), len(existing), len(forked))
if ev and forked:
    kind = max(ev, key=ev.get)
    args = [sys.argv[2], "top", sys.argv[3], "--kind", kind, "-n", "1", "--json"]
    try:
        # top's count is what the events stand for (a sampled event counts 1/p): both sides
        # in that unit, not against the trace's number of event records.
        every = json.loads(subprocess.run(args, capture_output=True, check=True).stdout)
        for p in forked:
            args += ["--pid", str(p["pid"])]
        top = json.loads(subprocess.run(args, capture_output=True, check=True).stdout)
        line += "; %s of the %s %s counted (ebsym top, from %s events) from the forked ones" % (
            top["totals"]["count"], every["totals"]["count"], kind, ev[kind])
    except Exception as e:
        line += "; (ebsym top --pid failed: %s)" % e
print(line)
EOF
)
}

run_config() { # CONFIG ROUND
  local c=$1 r=$2 out=$TMP/$1.tool lout=$TMP/$1.load tpid="" t0 t1 secs rate ev why="" bns="" b0="" b1="" k0 k1 w0 w1
  if [ -n "${WHY[$c]:-}" ]; then return 0; fi
  rm -f "$out" "$lout"
  if [ "$c" = untraced ]; then
    log "round $r: untraced"
    if run_load "$lout"; then
      rate=$(rate_of "$lout")
      TPS[$c]="${TPS[$c]:-} $rate"
      UNT_R[$r]=$rate
      ST[$c]="${ST[$c]:-} $STEAL"
      log "  untraced: $rate; steal $STEAL%"
    else
      why="the load failed: $(why_of "$lout")"
    fi
  else
    local ok=0
    [[ $c == ebrec-* || $STATS != 1 ]] || sysctl -q -w kernel.bpf_stats_enabled=1 2>/dev/null || true
    for _ in 1 2; do
      tool_argv "$c" || { log "$c: not run: ${WHY[$c]}"; return 0; }
      log "round $r: $c: $(printf '%s ' "${TOOL_ARGV[@]}" | tr -s ' \n' ' ' | cut -c1-220)"
      "${TOOL_ARGV[@]}" >"$out" 2>&1 &
      tpid=$!
      BG_PIDS+=("$tpid")
      if wait_for_line "$out" "$READY" "$READY_TIMEOUT" "$tpid" &&
        { [[ $c != bcc-* ]] || wait_bpf_prog "$tpid" "$READY_TIMEOUT"; }; then
        ok=1
        break
      fi
      if kill -0 "$tpid" 2>/dev/null; then why="did not attach within ${READY_TIMEOUT}s"; else why="did not start: $(why_of "$out")"; fi
      stop_tool "$tpid" 10
      BG_PIDS=()
      # a server process that ended between the listing and the attach: once more
      grep -q 'no process with pid' "$out" 2>/dev/null || break
      why=""
    done
    if [ "$ok" = 0 ]; then
      WHY[$c]=${why:-"did not start"}
    else
      sleep 1 # the tool's start-up (bcc's compile, ebrec's tables) settles
      k0=$(proc_ticks "$tpid")
      w0=$(ctx_switches "$tpid")
      b0=$(bpf_ns "$tpid")
      t0=$(date +%s.%N)
      if ! run_load "$lout"; then why="the load failed: $(why_of "$lout")"; fi
      t1=$(date +%s.%N)
      k1=$(proc_ticks "$tpid")
      w1=$(ctx_switches "$tpid")
      [[ $c == ebrec-* ]] || b1=$(bpf_ns "$tpid")
      secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
      if ! kill -0 "$tpid" 2>/dev/null; then
        wait_exit "$tpid" 1
        why=${why:-"exited during the run (status $EXIT_RC): $(why_of "$out")"}
      elif [ "${c%@b}" = ebrec-diagnose ]; then
        wait_exit "$tpid" "$STOP_S" # its recording ends by itself, then ebsym makes the reports
        if [ "$EXIT_RC" = 124 ]; then stop_tool "$tpid" 30; EXIT_RC=124; fi
      else
        stop_tool "$tpid" "$STOP_S"
      fi
      [ -n "$why" ] || [ "$EXIT_RC" != 124 ] || why="did not finish within ${STOP_S}s of SIGINT (killed; its output is lost)"
      [ -n "$why" ] || [ "$EXIT_RC" = 0 ] || why="exit status $EXIT_RC: $(why_of "$out")"
      ev=$("$EVFN" "$out" || true)
      [ -n "$why" ] || [ -n "$ev" ] || why="no output: $(why_of "$out")"
      if [ -z "$why" ]; then
        rate=$(rate_of "$lout")
        TPS[$c]="${TPS[$c]:-} $rate"
        [ -z "${UNT_R[$r]:-}" ] || PAIR[$c]="${PAIR[$c]:-} $(ratio "$rate" "${UNT_R[$r]}")"
        RATE_R[$c:$r]=$rate
        EVN[$c]=$ev
        CP[$c]="${CP[$c]:-} $(pct_of_cpu "$k0" "$k1" "$secs")"
        WK[$c]="${WK[$c]:-} $(awk -v a="$w0" -v b="$w1" -v s="$secs" 'BEGIN { if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && s > 0) printf "%.0f", (b - a) / s; else print "-" }')"
        if [[ $c == ebrec-* ]]; then
          ebrec_cost "$out" "$secs"
          CB[$c]="${CB[$c]:-} $COST_BPF"
          TR[$c]="${TR[$c]:-} $COST_TRAPS"
          CH[$c]="${CH[$c]:-} $COST_CHANGES"
          NS[$c]="${NS[$c]:-} $COST_NSRUN"
          BU[$c]="${BU[$c]:-} $COST_BUDGET"
          if [ "$FIRST_TRACE_DONE" = 0 ] && [ -f "$TRACE" ]; then
            FIRST_TRACE_DONE=1
            note_processes "$TRACE"
            log "  $c: $PROC_NOTE"
          fi
        else
          bns=$(awk -v a="${b0:--}" -v b="${b1:--}" -v s="$secs" 'BEGIN {
            if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && s > 0) printf "%.2f", (b - a) / 1e9 / s * 100; else print "-" }')
          CB[$c]="${CB[$c]:-} $bns"
        fi
        ST[$c]="${ST[$c]:-} $STEAL"
        log "  $c: $rate; events $ev; proc $(pct_of_cpu "$k0" "$k1" "$secs")% BPF ${COST_BPF:-}${bns:-}%; steal $STEAL%"
      fi
      if [ -n "$KEEP" ]; then
        cp "$out" "$KEEP/$c.r$r.out" 2>/dev/null || true
        [ -z "$TRACE" ] || [ ! -f "$TRACE" ] || [ -e "$KEEP/$c.pb.zst" ] || cp "$TRACE" "$KEEP/$c.pb.zst"
      fi
      [ -z "$TRACE" ] || rm -f "$TRACE"
      COST_BPF=""
    fi
    sysctl -q -w kernel.bpf_stats_enabled="$STATS_WAS" 2>/dev/null || true
    BG_PIDS=()
  fi
  if [ -n "$why" ]; then
    log "  $c: not counted: $why"
    FAILS[$c]="${FAILS[$c]:-}; round $r: $why"
  fi
}

# --- the runs ---------------------------------------------------------------------------------
server_start
log "$SERVER: pids $(server_pids | tr '\n' ' ')"
log "warm-up: one untimed untraced run of $((DURATION < 5 ? DURATION : 5)) s"
load_cmd $((DURATION < 5 ? DURATION : 5))
timeout -k 10 120 "${LOAD[@]}" >"$TMP/warmup.log" 2>&1 || { tail -n 20 "$TMP/warmup.log" >&2; die "the warm-up load failed"; }
busy_check
BUSY_BEFORE=$BUSY_PCT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  for c in $CONFIGS; do
    wait_idle
    run_config "$c" "$r"
  done
done
end=$(date +%s)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table --------------------------------------------------------------------------------
load_cmd "$DURATION"
minmax() { printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { if (NR) printf "%.0f-%.0f", a, b; else print "-" }'; }
fmt1() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%.0f", v; else print v }'; }
# shellcheck disable=SC2086 # per-run lists split on purpose
UNTR=$(median ${TPS[untraced]:--})
case $SERVER in postgres) unit=tps ;; nginx) unit=req/s ;; esac
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS_DIR"
RESULTS=$RESULTS_DIR/server-$SERVER-$MIX-$stamp.md
{
  echo "server.sh: $SERVER, ${MIX} ($(printf '%s ' "${LOAD[@]}" | sed "s/ -T $DURATION / -T DURATION /")), $NCPU CPUs,"
  echo "kernel $(uname -r), $(date -u '+%F %H:%M') UTC; $ROUNDS round(s) of ${DURATION}s per configuration, round-robin; BPF stats $([ "$STATS" = 1 ] && echo on || echo "off (STATS=0)");"
  echo "CPU ${BUSY_BEFORE}% busy before, load average $LOAD_BEFORE before, $LOAD_AFTER after; rows took $((end - start)) s."
  echo "ebrec: $EBREC$( [ "$EBREC_OK" = 1 ] && echo " ($(stat -c %y "$EBREC" | cut -d. -f1))")"
  [ -z "${EBREC_B:-}" ] || echo "ebrec @b rows: $EBREC_B ($(stat -c %y "$EBREC_B" | cut -d. -f1))"
  echo
  echo "| config | $unit median | x untraced | paired | min-max | accounted cost, % of one CPU | lost / unexplained, % of one CPU |"
  echo "| --- | ---: | ---: | ---: | --- | --- | --- |"
  for c in $CONFIGS; do
    # shellcheck disable=SC2086
    m=$(median ${TPS[$c]:--})
    if [ -n "${WHY[$c]:-}" ] && [ -z "${TPS[$c]:-}" ]; then
      echo "| $c | not run: ${WHY[$c]} | | | | | |"
      continue
    fi
    if [ -z "${TPS[$c]:-}" ]; then
      echo "| $c | not run:${FAILS[$c]#;} | | | | | |"
      continue
    fi
    cost="-" cb=- cp=- tr=-
    if [ "$c" != untraced ]; then
      # shellcheck disable=SC2086
      cb=$(median ${CB[$c]:--}) cp=$(median ${CP[$c]:--})
      if [[ $c == ebrec-* ]]; then
        # shellcheck disable=SC2086
        ns=$(median ${NS[$c]:--}) bu=$(median ${BU[$c]:--})
        cost="BPF $cb%"
        [ "$ns" = - ] || cost+=" ($ns ns/run)"
        cost+=", proc $cp%"
        # shellcheck disable=SC2086
        [ "$bu" = - ] || cost+=", budget $bu% ($(median ${CH[$c]:--}) changes)"
        # shellcheck disable=SC2086
        tr=$(median ${TR[$c]:--})
        if [ "$tr" != - ]; then
          cost+=", uprobe traps $tr%"
        else
          case $c in ebrec-alloc4096*) cost+=" + uprobe traps" ;; esac
        fi
      else
        cost="proc $cp%"
        [ "$cb" = - ] || cost+=", BPF $cb%"
      fi
      # shellcheck disable=SC2086
      wk=$(median ${WK[$c]:--})
      [ "$wk" = - ] || cost+=", wakeups $wk/s"
      cost+="; events ${EVN[$c]:--}"
    fi
    # shellcheck disable=SC2086
    [ -z "${ST[$c]:-}" ] || cost+="; steal $(median ${ST[$c]})%"
    [ -z "${FAILS[$c]:-}" ] || cost+="; failed:${FAILS[$c]#;}"
    n=$(wc -w <<<"${TPS[$c]}")
    [ "$n" = "$ROUNDS" ] || cost+=" ($n of $ROUNDS runs)"
    # shellcheck disable=SC2086
    pair=-
    # shellcheck disable=SC2086
    [ "$c" = untraced ] || pair=$(median ${PAIR[$c]:--})
    if [[ $c == *@b ]]; then
      vs=""
      for r in $(seq 1 "$ROUNDS"); do
        a=${RATE_R[${c%@b}:$r]:-} b=${RATE_R[$c:$r]:-}
        [ -z "$a" ] || [ -z "$b" ] || vs+=" $(ratio "$b" "$a")"
      done
      # shellcheck disable=SC2086
      [ -z "$vs" ] || pair+=" (vs A $(median $vs), $(printf '%s\n' $vs | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%s-%s", a, b }'))"
    fi
    # What the throughput lost, as CPU: on a saturated machine a ratio R leaves (1 - R) of
    # every CPU's work undone; the unexplained rest is that less the accounted cost.
    lost=-
    if [ "$c" != untraced ]; then
      # shellcheck disable=SC2086
      lost=$(awk -v p="${pair%% *}" -v n="$NCPU" -v b="${cb:--}" -v k="${cp:--}" -v t="${tr:--}" 'BEGIN {
        if (p !~ /^[0-9.]+$/) { print "-"; exit }
        l = (1 - p) * n * 100; a = 0
        if (b ~ /^[0-9.]+$/) a += b; if (k ~ /^[0-9.]+$/) a += k; if (t ~ /^[0-9.]+$/) a += t
        printf "%.1f / %.1f", l, l - a }')
    fi
    echo "| $c | $(fmt1 "$m") | $(ratio "$m" "$UNTR") | $pair | $(minmax ${TPS[$c]}) | $cost | $lost |"
  done
  echo
  [ -z "$PROC_NOTE" ] || echo "Processes followed (ebsym info of the first ebrec trace): $PROC_NOTE."
  if [ "$SERVER" = postgres ]; then
    echo "ebrec record and diagnose: -p for the postmaster and its long-lived children ($(server_pids | wc -l) pids) at the"
    echo "start of each run; the backends pgbench's connections fork are followed from their fork. bcc's"
    echo "profile, runqlat, syscount (without the kernel's own headers) trace every process."
  else
    echo "ebrec record and diagnose: -p for nginx's master and workers ($(server_pids | wc -l) pids); bcc's tools trace every process."
  fi
} | tee "$RESULTS"
log "written to $RESULTS"
