#!/usr/bin/env bash
# malloc.sh: cost per traced malloc, in ns, for a tight malloc(64)+free loop (bench/cpp/malloc_loop.cpp)
# run at stack depth 1 and 30 (noinline recursion), so stack walking cost shows.
#
# Rows: untraced; bpftrace uprobe on libc malloc with an empty action (the floor: trap only);
# bpftrace @[ustack] = count() (both with /pid == cpid/, as bpftrace -c attaches its uprobes for
# all processes); bt-leak, bpftrace doing what ebrec --alloc does (malloc's size and stack at entry,
# the block at return, deleted at free); bcc stackcount c:malloc; bcc memleak (uprobes and uretprobes on malloc, calloc,
# realloc..., uprobe on free); ebrec record --alloc and --alloc=4096 (skipped unless
# EBREC=/path/to/ebrec). malloc_loop times its own loop with clock_gettime, so tracer start-up and
# shutdown are not counted. bpftrace and ebrec launch the program themselves (bpftrace -c,
# ebrec record -- CMD); the bcc tools attach by pid to a malloc_loop that waits on a FIFO, and
# the FIFO is written only after the tool printed that it is attached (stackcount: "Tracing";
# memleak: its first periodic report, since it prints "Attaching" before it attaches).
#
# Usage: bench/scripts/malloc.sh            (as root)
#   EBREC=/path/to/ebrec    add the ebrec rows
#   ITERS=2000000           malloc+free pairs per row
#   DEPTHS="1 30"           stack depths to run
#   MODES="untraced bt-floor ..."  run only these rows (names as in the table)
#   REPEAT=1                rounds over all rows; the table shows the median per row
#   WAIT_IDLE_S=0           before each row, wait up to this long for the machine to be idle
#   NOISY_RETRIES=0         rerun a row up to this many times while other processes used more
#                           than NOISE_LIMIT=10 % of the CPU during it
#   BCC_KERNEL_SOURCE=DIR   kernel headers for bcc; default: a merged copy of Debian's
#                           linux-headers-*-common and -amd64 trees, made once in the cache dir
#
# Installs when missing: g++, bpftrace, bpfcc-tools, linux-headers-amd64.
#
# Measured here on 2026-11-30 (Debian 12, kernel 6.18, 2 vCPUs KVM, glibc 2.36, bpftrace 0.17,
# bcc 0.26), 2,000,000 iterations, run with WAIT_IDLE_S=30 and others = 0% on every row; ebrec is
# a snapshot of the work-in-progress target/release/ebrec of 06:56 that day. ns per malloc+free:
#   mode               depth 1  x floor  x bt   depth 30  x floor  x bt
#   untraced              24.7    0.04   0.02      14.7    0.02   0.00   (10-25 ns across runs: noise)
#   bt-floor             676.6    1.00   0.44     858.8    1.00   0.28
#   bt-ustack           1527.7    2.26   1.00    3099.5    3.61   1.00
#   bcc-stackcount      1487.2    2.20   0.97    3900.6    4.54   1.26
#   bcc-memleak        10379.8   15.34   6.79   11052.7   12.87   3.57
#   ebrec-alloc         9518.7   14.07   6.23   11893.0   13.85   3.84   (BPF 530 / 1156 ns per run)
#   ebrec-alloc-4096    7682.0   11.35   5.03    8228.8    9.58   2.65   (none kept; BPF 74 / 80 ns per run)
# Again at 11:17 that day, after ebrec placed its probes past single-stepped instructions
# (free at +3) and kept calls in flight in task storage; ITERS=1000000 REPEAT=3, no bcc rows,
# others <= 2%, the bt-leak row new:
#   mode               depth 1  x floor  x bt   depth 30  x floor  x bt
#   untraced              18.8    0.02   0.01      19.2    0.02   0.01
#   bt-floor             824.8    1.00   0.43     833.8    1.00   0.23
#   bt-ustack           1940.2    2.35   1.00    3698.9    4.44   1.00
#   bt-leak            10150.4   12.31   5.23   13346.0   16.01   3.61
#   ebrec-alloc         4144.4    5.02   2.14    6502.2    7.80   1.76   (0.41x / 0.49x bt-leak)
#   ebrec-alloc-4096    2408.3    2.92   1.24    2459.5    2.95   0.66   (none kept: the three traps)
# The script took 247 s with the ebrec rows (WAIT_IDLE_S=30, 46 s of it waiting) and 79 s
# without them (plain run, bcc-memleak ~40 s of it; the first run also installs packages).
# --aggregate rows (counted per stack in the kernel), 2026-12-01 23:15, ITERS=1000000
# WAIT_IDLE_S=20, others <= 2%, release ebrec of that commit:
#   mode                  depth 1   x bt   depth 30   x bt
#   bt-floor                923.4   0.35     1188.2   0.26
#   bt-ustack              2643.6   1.00     4524.3   1.00
#   ebrec-alloc-nofree     3333.9   1.26     7818.3   1.73   (auto; BPF 6538 ns/run at d30)
#   ebrec-alloc-nofree-fp  3517.1   1.33     5233.4   1.16
#   ebrec-agg-nofree       3060.7   1.16     7626.0   1.69   (trace 5.3 KiB; BPF 6363 ns/run)
#   ebrec-agg-nofree-fp    2830.9   1.07     5219.0   1.15   (BPF 3884 ns/run)
#   ebrec-agg              5534.6   2.09    11183.4   2.47   (frees tracked: leak gauges)
#   ebrec-agg-fp           6133.3   2.32     8288.9   1.83
#   ebrec-alloc            6350.0   2.40    11258.8   2.49   (events, 3.3 MB trace)
# After the stack-walk work of 2026-12-02 (fp: ebrec's bounded BPF walk, not bpf_get_stack;
# a 2 KiB stack window in every mode; the row cache in auto), 03:01, same settings:
#   mode                  depth 1   x bt   depth 30   x bt
#   bt-floor               1119.1   0.43     1070.2   0.21
#   bt-ustack              2625.3   1.00     5000.2   1.00
#   ebrec-alloc-nofree     2696.3   1.03     4396.2   0.88
#   ebrec-alloc-nofree-fp  2440.5   0.93     3608.5   0.72
#   ebrec-agg-nofree       2336.5   0.89     4279.1   0.86
#   ebrec-agg-nofree-fp    2295.5   0.87     3343.2   0.67
#   ebrec-agg              5437.0   2.07     6989.4   1.40
#   ebrec-agg-fp           4932.3   1.88     6904.1   1.38
#   ebrec-alloc            5567.1   2.12     7852.8   1.57
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

ITERS=${ITERS:-2000000}
DEPTHS=${DEPTHS:-"1 30"}
REPEAT=${REPEAT:-1}
NOISY_RETRIES=${NOISY_RETRIES:-0}
MODES=${MODES:-"untraced bt-floor bt-ustack bt-leak bcc-stackcount bcc-memleak ebrec-alloc ebrec-alloc-4096 ebrec-agg-nofree ebrec-agg ebrec-preload-512k"}
SRC=$here/../cpp/malloc_loop.cpp

need_root

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-malloc.XXXXXX")
cleanup() {
  bg_cleanup
  noise_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install g++ bpftrace
ML=$TMP/malloc_loop
log "building $ML"
"${CXX:-c++}" -O2 -g -fno-omit-frame-pointer -o "$ML" "$SRC"

# --- bcc setup: returns 1 and sets BCC_WHY when bcc cannot run here -------------------------
BCC_WHY=""
setup_bcc() {
  apt_install bpfcc-tools linux-headers-amd64 || { BCC_WHY="could not install bpfcc-tools/linux-headers-amd64"; return 1; }
  bcc_headers || return 1
  # Smoke test: compile and attach stackcount to a waiting malloc_loop.
  if ! run_bcc_once smoke stackcount-bpfcc '^Tracing' 1000 1 c:malloc; then
    BCC_WHY="stackcount does not work here: $(grep -Ev '^\s*$' "$TMP/smoke.tool" | tail -n 3 | tr '\n' ' ')"
    return 1
  fi
  return 0
}

# run_bcc_once NAME TOOL READY_REGEX ITERS DEPTH ARGS...: start malloc_loop waiting on a FIFO,
# attach TOOL -p PID ARGS, wait for READY_REGEX in its output, release the loop, wait for it,
# stop the tool with SIGINT. Sets BCC_NS to malloc_loop's ns per malloc; tool output is in
# $TMP/NAME.tool. (Background jobs of a script ignore SIGINT, and Python then keeps ignoring it,
# hence env --default-signal=INT.)
run_bcc_once() {
  local name=$1 tool=$2 ready=$3 iters=$4 depth=$5; shift 5
  local fifo=$TMP/$name.fifo mlpid tpid
  BCC_NS=""
  rm -f "$fifo"
  mkfifo "$fifo"
  "$ML" --iters "$iters" --depth "$depth" --wait-fifo "$fifo" >"$TMP/$name.ml" 2>&1 &
  mlpid=$!
  BG_PIDS+=("$mlpid:TERM")
  env --default-signal=INT "$tool" -p "$mlpid" "$@" >"$TMP/$name.tool" 2>&1 &
  tpid=$!
  BG_PIDS+=("$tpid")
  if ! wait_for_line "$TMP/$name.tool" "$ready" 120 "$tpid"; then
    stop_pid "$tpid"
    kill "$mlpid" 2>/dev/null || true
    wait "$mlpid" 2>/dev/null || true
    BG_PIDS=()
    return 1
  fi
  # shellcheck disable=SC2016 # $1 is expanded by the inner sh
  timeout 10 sh -c 'echo go > "$1"' sh "$fifo"
  wait "$mlpid" || true
  stop_pid "$tpid"
  BG_PIDS=()
  BCC_NS=$(awk -F'ns_per_malloc=' '/ns_per_malloc=/ { print $2 }' "$TMP/$name.ml")
  [ -n "$BCC_NS" ]
}

ns_of() { awk -F'ns_per_malloc=' '/ns_per_malloc=/ { print $2 }' "$1" | tail -n1 | grep . || echo -; }

declare -A NS EV NOTE NZ

record() { # MODE DEPTH NS EVENTS NOTE; NS keeps every run's value, space-separated
  NS[$1,$2]="${NS[$1,$2]:-} $3"
  EV[$1,$2]=$4
  NOTE[$1]=$5
  printf '  %-18s depth %-3s %10s ns/malloc  events=%s %s\n' "$1" "$2" "$3" "$4" "$5" >&2
}

run_mode() { # MODE DEPTH
  local mode=$1 d=$2 out=$TMP/$1.$2.out
  case $mode in
    untraced)
      "$ML" --iters "$ITERS" --depth "$d" >"$out" 2>&1
      record "$mode" "$d" "$(ns_of "$out")" - "" ;;
    bt-floor | bt-ustack | bt-leak)
      # bpftrace -c attaches its uprobes for every process (not just the child), so filter.
      local prog="uprobe:$LIBC:malloc /pid == cpid/ {}"
      [ "$mode" = bt-ustack ] && prog="uprobe:$LIBC:malloc /pid == cpid/ { @[ustack] = count(); }"
      # What a bpftrace user writes for leaks (ebrec --alloc's equivalent): size and stack at
      # entry, the block at return, forgotten at free.
      [ "$mode" = bt-leak ] && prog="uprobe:$LIBC:malloc /pid == cpid/ { @size[tid] = arg0; @stk[tid] = ustack; }
        uretprobe:$LIBC:malloc /pid == cpid/ { @live[retval] = @size[tid]; @where[retval] = @stk[tid]; delete(@size[tid]); delete(@stk[tid]); }
        uprobe:$LIBC:free /pid == cpid/ { delete(@live[arg0]); delete(@where[arg0]); }"
      log "$mode depth $d: bpftrace -e '$prog' -c malloc_loop"
      if ! bpftrace -e "$prog" -c "$ML --iters $ITERS --depth $d" >"$out" 2>&1; then
        tail -n 5 "$out" >&2
        record "$mode" "$d" failed - "bpftrace failed"
        return 0
      fi
      local ev=-
      # @[ustack] map entries end in "]: COUNT"; their sum is the number of probe hits.
      [ "$mode" = bt-ustack ] && ev=$(awk '/^\]: [0-9]+$/ { s += $2 } END { print s + 0 }' "$out")
      record "$mode" "$d" "$(ns_of "$out")" "$ev" "" ;;
    bcc-stackcount | bcc-memleak)
      if [ "$BCC_OK" != 1 ]; then
        record "$mode" "$d" - - "bcc: skipped ($BCC_WHY)"
        return 0
      fi
      local tool=stackcount-bpfcc ready='^Tracing' args=(c:malloc)
      if [ "$mode" = bcc-memleak ]; then
        # memleak prints "Attaching" before attaching; its first report (1 s interval) is after.
        tool=memleak-bpfcc ready='Top [0-9]+ stacks' args=(1)
      fi
      log "$mode depth $d: $tool -p PID ${args[*]}"
      if ! run_bcc_once "$mode.$d" "$tool" "$ready" "$ITERS" "$d" "${args[@]}"; then
        tail -n 5 "$TMP/$mode.$d.tool" >&2
        record "$mode" "$d" failed - "$tool failed"
        return 0
      fi
      local ev=-
      # stackcount prints each stack followed by a line holding only its count.
      [ "$mode" = bcc-stackcount ] && ev=$(awk '/^ +[0-9]+$/ { s += $1 } END { print s + 0 }' "$TMP/$mode.$d.tool")
      record "$mode" "$d" "$BCC_NS" "$ev" "" ;;
    ebrec-*)
      if ! ebrec_available; then
        record "$mode" "$d" - - "$(ebrec_skip_reason)"
        return 0
      fi
      local trace=$TMP/$mode.$d.pb.zst flags
      case "$mode" in
        ebrec-alloc) flags=(--alloc) ;;
        ebrec-alloc-4096) flags=(--alloc=4096) ;;
        ebrec-alloc-nofree) flags=(--alloc --no-free) ;;
        ebrec-alloc-classic) flags=(--alloc --alloc-probes classic) ;;
        ebrec-alloc-4096-classic) flags=(--alloc=4096 --alloc-probes classic) ;;
        ebrec-alloc-nofree-classic) flags=(--alloc --no-free --alloc-probes classic) ;;
        ebrec-sample-512k) flags=(--alloc --sample-bytes 524288) ;;
        # counted per stack in the kernel (no event per call)
        ebrec-agg-nofree) flags=(--alloc --aggregate --no-free) ;;
        ebrec-agg-nofree-fp) flags=(--alloc --aggregate --no-free --stack-mode fp) ;;
        ebrec-agg) flags=(--alloc --aggregate) ;;
        ebrec-agg-fp) flags=(--alloc --aggregate --stack-mode fp) ;;
        ebrec-alloc-nofree-fp) flags=(--alloc --no-free --stack-mode fp) ;;
        # sampled by bytes inside the process by ebrec's preloaded shim: no trap per call
        ebrec-preload-512k) flags=(--alloc --alloc-sampler preload --sample-bytes 524288) ;;
        *) die "unknown mode $mode" ;;
      esac
      log "$mode depth $d: $EBREC record -o $trace ${flags[*]} -- malloc_loop"
      if ! "$EBREC" record --bpf-stats -o "$trace" "${flags[@]}" -- "$ML" --iters "$ITERS" --depth "$d" >"$out" 2>&1; then
        tail -n 10 "$out" >&2
        record "$mode" "$d" failed - "ebrec failed"
        return 0
      fi
      ebrec_note "$trace" "$out"
      record "$mode" "$d" "$(ns_of "$out")" "$EBREC_EVENTS" "$EBREC_NOTE"
      rm -f "$trace" ;;
    *) die "unknown mode $mode" ;;
  esac
}

BCC_OK=0
case " $MODES " in
  *" bcc-"*)
    if setup_bcc; then BCC_OK=1; else log "bcc: skipped ($BCC_WHY)"; fi ;;
esac

busy_check
BUSY_BEFORE=$BUSY_PCT
start=$(date +%s)
for rep in $(seq 1 "$REPEAT"); do
  [ "$REPEAT" -gt 1 ] && log "round $rep of $REPEAT"
  for d in $DEPTHS; do
    for mode in $MODES; do
      try=0
      while :; do
        saved=${NS[$mode,$d]:-}
        wait_idle
        noise_begin
        run_mode "$mode" "$d"
        noise_end
        if is_noisy "$NOISE_PCT" && [ "$try" -lt "$NOISY_RETRIES" ]; then
          try=$((try + 1))
          log "$mode depth $d: other processes used ${NOISE_PCT}% of the CPU; again ($try of $NOISY_RETRIES)"
          NS[$mode,$d]=$saved
          continue
        fi
        break
      done
      NZ[$mode]=$(noise_max "${NZ[$mode]:--}" "$NOISE_PCT")
    done
  done
done
end=$(date +%s)

echo
echo "malloc(64)+free loop, $ITERS iterations per row, $(nproc) cores, kernel $(uname -r), $(date -u +%F), CPU ${BUSY_BEFORE}% busy before"
echo "ns = ns per malloc+free pair as timed by malloc_loop (median of $REPEAT run(s)); x floor = / bpftrace empty uprobe;"
echo "x bt = / bpftrace @[ustack]=count(); events = probe hits counted by the tool"
declare -A MED
for k in "${!NS[@]}"; do
  # shellcheck disable=SC2086 # the per-run list is split on purpose
  MED[$k]=$(median ${NS[$k]})
done
hdr=$(printf '%-18s' mode)
for d in $DEPTHS; do hdr+=$(printf ' | %9s %7s %6s %9s' "d$d ns" "x floor" "x bt" events); done
hdr+=$(printf ' | %6s' others)
echo "$hdr  notes"
for mode in $MODES; do
  line=$(printf '%-18s' "$mode")
  for d in $DEPTHS; do
    ns=${MED[$mode,$d]:--}
    line+=$(printf ' | %9s %7s %6s %9s' "$ns" "$(ratio "$ns" "${MED[bt-floor,$d]:--}")" \
      "$(ratio "$ns" "${MED[bt-ustack,$d]:--}")" "${EV[$mode,$d]:--}")
  done
  nz=${NZ[$mode]:--}
  [ "$nz" = - ] || nz="$nz%"
  line+=$(printf ' | %6s' "$nz")
  echo "$line  ${NOTE[$mode]:-}"
done
echo "(rows took $((end - start)) s; others = most CPU used by other processes during a run of the row,"
echo " % of all cores: above ~5% the row is noisy)"
