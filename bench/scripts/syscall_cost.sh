#!/usr/bin/env bash
# What a recording costs each system call, of a process it traces and of one it does not
# (issue 30: "BPF time per syscall of a process that is not traced: <= 100 ns for the whole
# diagnose set; of a traced process: <= 400 ns with every family on").
#
# The workload is `perf bench syscall basic` (a getppid loop; it prints ns per call). Each
# configuration is measured ROUNDS times, round-robin, and its median printed beside the
# untraced median, as extra ns per call:
#   untraced                      no recorder
#   ebrec <set>, other process    ebrec records a sleeping process; the loop is not traced
#   ebrec <set>, traced           ebrec starts the loop itself (-- perf bench ...)
#   bpftrace, other process       raw_syscalls sys_enter+sys_exit timing one pid (not the loop)
#   bpftrace, traced              the same, filtered to the loop's pid
#   bt-floor                      bpftrace's least program on raw_syscalls sys_enter and
#                                 sys_exit: a pid test that fails (pid 1), nothing else;
#                                 what the reference tool's cheapest filter costs a process
#                                 it does not trace (bpftrace 0.17 attaches these as perf
#                                 event tracepoints, dearer to dispatch than ebrec's tp_btf)
# <set> is `ebrec diagnose`'s families (--cpu --offcpu --lock --memgrowth --syscalls --bio
# --runq --tcp), and --syscalls alone. BPF stats stay off (they cost every run ~30 ns).
# Also --offcpu alone with the loop not traced: as it records (user stacks at the return to
# user space, on rseq_update: no program at system calls), and with EBTRACE_OFFCPU_SYS_EXIT=1
# (at the next syscall exit, the way before: every system call on the slow path):
#   ebrec-offcpu-other, ebrec-offcpu-sysexit-other (not in the default CONFIGS)
# And the few-call families (--lock --memgrowth --tcp: futex, mmap/munmap/brk, accept) on
# their own per-syscall tracepoints, against the same on the raw tracepoints' chain
# (EBTRACE_SYSCALL_HUB_ONLY=1, as before), the loop not traced and traced:
#   ebrec-few-other, ebrec-few-hub-other, ebrec-few-traced, ebrec-few-hub-traced
#   (not in the default CONFIGS)
#
#   bench/scripts/syscall_cost.sh                 # EBREC=target/release/ebrec by default
#   ROUNDS=7 LOOPS=5000000 bench/scripts/syscall_cost.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=lib.sh
. "$here/lib.sh"
need_root

ROUNDS=${ROUNDS:-5}
LOOPS=${LOOPS:-3000000}
EBREC=${EBREC:-$root/target/release/ebrec}
[ -x "$EBREC" ] || die "no ebrec at $EBREC (cargo build --release -p ebrec, or set EBREC)"
command -v perf >/dev/null || apt_install linux-perf
command -v bpftrace >/dev/null || apt_install bpftrace
ensure_tracefs

DIAG=(--cpu --offcpu=1000 --lock=100 --memgrowth --syscalls=1000 --bio --runq=1000 --tcp)
FEW=(--lock=100 --memgrowth --tcp)
work=$(mktemp -d /tmp/ebtrace-syscost.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# ns per call of one `perf bench syscall basic` run, from its "usecs/op" line.
bench() {
  perf bench syscall basic -l "$LOOPS" 2>&1 | awk '/usecs\/op/ { printf "%.1f\n", $1 * 1000 }'
}

# Waits for ebrec's "recording" line in LOG (its probes are attached then).
wait_recording() {
  local i
  for i in $(seq 1 200); do
    grep -q "^ebrec: recording" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  die "ebrec did not start: $(tail -3 "$1")"
}

# One measurement of configuration $1: prints ns per call.
measure() {
  local cfg=$1 ns pid bt
  case "$cfg" in
    untraced) bench ;;
    ebrec-diag-other | ebrec-sys-other | ebrec-offcpu-other | ebrec-offcpu-sysexit-other | \
      ebrec-few-other | ebrec-few-hub-other)
      sleep 600 & pid=$!
      local flags=("${DIAG[@]}") sysexit=0 hub=0
      case "$cfg" in ebrec-few-*) flags=("${FEW[@]}") ;; esac
      [ "$cfg" = ebrec-few-hub-other ] && hub=1
      [ "$cfg" = ebrec-sys-other ] && flags=(--syscalls=1000)
      [ "$cfg" = ebrec-offcpu-other ] && flags=(--offcpu=1000)
      [ "$cfg" = ebrec-offcpu-sysexit-other ] && flags=(--offcpu=1000) && sysexit=1
      EBTRACE_OFFCPU_SYS_EXIT=$sysexit EBTRACE_SYSCALL_HUB_ONLY=$hub \
        "$EBREC" record -q -o "$work/t.pb.zst" "${flags[@]}" -p "$pid" 2>"$work/ebrec.log" &
      local rec=$!
      wait_recording "$work/ebrec.log"
      ns=$(bench)
      kill -INT "$rec"; wait "$rec" || true
      kill "$pid"; wait "$pid" 2>/dev/null || true
      echo "$ns" ;;
    ebrec-diag-traced | ebrec-sys-traced | ebrec-few-traced | ebrec-few-hub-traced)
      local flags=("${DIAG[@]}") hub=0
      [ "$cfg" = ebrec-sys-traced ] && flags=(--syscalls=1000)
      case "$cfg" in ebrec-few-*) flags=("${FEW[@]}") ;; esac
      [ "$cfg" = ebrec-few-hub-traced ] && hub=1
      EBTRACE_SYSCALL_HUB_ONLY=$hub "$EBREC" record -q -o "$work/t.pb.zst" "${flags[@]}" -- \
        perf bench syscall basic -l "$LOOPS" >"$work/out" 2>"$work/ebrec.log"
      awk '/usecs\/op/ { printf "%.1f\n", $1 * 1000 }' "$work/out" ;;
    bt-floor)
      bpftrace -e 'tracepoint:raw_syscalls:sys_enter /pid == 1/ { @e = count(); }
        tracepoint:raw_syscalls:sys_exit /pid == 1/ { @x = count(); }' >"$work/bt.log" 2>&1 &
      local btp=$! i
      for i in $(seq 1 200); do grep -q "Attaching" "$work/bt.log" 2>/dev/null && break; sleep 0.05; done
      grep -q "Attaching" "$work/bt.log" || die "bpftrace did not attach: $(tail -3 "$work/bt.log")"
      sleep 0.5
      ns=$(bench)
      kill -INT "$btp"; wait "$btp" || true
      echo "$ns" ;;
    bt-other | bt-traced)
      # bpftrace times the syscalls of one pid: a sleeping process, or the loop itself
      # (its pid is not known before it starts: it is started stopped, under a shell).
      if [ "$cfg" = bt-other ]; then
        sleep 600 & pid=$!
        bt=$pid
      else
        bash -c 'kill -STOP $$; exec perf bench syscall basic -l '"$LOOPS" >"$work/out" 2>&1 &
        pid=$!
        bt=$pid
      fi
      bpftrace -e "tracepoint:raw_syscalls:sys_enter /pid == $bt/ { @s[tid] = nsecs; }
        tracepoint:raw_syscalls:sys_exit /pid == $bt && @s[tid]/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); }" \
        >"$work/bt.log" 2>&1 &
      local btp=$!
      local i
      for i in $(seq 1 200); do grep -q "Attaching" "$work/bt.log" 2>/dev/null && break; sleep 0.05; done
      sleep 0.5
      if [ "$cfg" = bt-other ]; then
        ns=$(bench)
        kill "$pid"; wait "$pid" 2>/dev/null || true
      else
        kill -CONT "$pid"; wait "$pid" || true
        ns=$(awk '/usecs\/op/ { printf "%.1f\n", $1 * 1000 }' "$work/out")
      fi
      kill -INT "$btp"; wait "$btp" || true
      grep -q "@h" "$work/bt.log" || [ "$cfg" = bt-other ] || die "bpftrace printed no histogram: $(tail -3 "$work/bt.log")"
      echo "$ns" ;;
  esac
}

CONFIGS=(${CONFIGS:-untraced ebrec-diag-other ebrec-diag-traced ebrec-sys-other ebrec-sys-traced bt-other bt-traced})
declare -A got
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CONFIGS[@]}"; do
    v=$(measure "$c")
    [ -n "$v" ] || die "$c: no ns/call"
    got[$c]="${got[$c]:-} $v"
    log "round $r $c: $v ns/call"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
base=$(echo "${got[untraced]}" | median)
out="$root/target/ebtrace-artifacts/bench"
mkdir -p "$out"
res="$out/syscall-cost-$(date -u +%Y%m%dT%H%M%SZ).md"
{
  echo "syscall_cost.sh: perf bench syscall basic -l $LOOPS, $ROUNDS rounds, medians; $(nproc) CPUs,"
  echo "kernel $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC'); ebrec $EBREC; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| config | ns per call (median) | extra ns per call | all rounds |"
  echo "| --- | ---: | ---: | --- |"
  for c in "${CONFIGS[@]}"; do
    m=$(echo "${got[$c]}" | median)
    echo "| $c | $m | $(awk -v a="$m" -v b="$base" 'BEGIN { printf "%+.0f", a - b }') |${got[$c]} |"
  done
} | tee "$res"
log "written to $res"
