#!/usr/bin/env bash
# request.sh: cost per request of ebrec record --request usdt:... against bpftrace pairing the
# same USDT probes, in ns. bench/cpp/usdt_loop.cpp runs ITERS requests, each
# DTRACE_PROBE1(bench, request__start, i), bench::work(i) (noinline, a few ns of work),
# DTRACE_PROBE1(bench, request__done, i), on THREADS threads, and times the loops itself
# (clock_gettime around them), so tracer start-up and shutdown are not counted.
#
# Rows (bpftrace rows filter /pid == cpid/ at the start: bpftrace -c attaches its uprobes for
# every process that maps the binary, not only the child; the done probe needs no filter in
# bt-request, it only acts on threads that have a start time):
#   untraced
#   bt-floor        usdt start {} + usdt done {}: the two traps, nothing else
#   bt-request      start { @s[tid] = nsecs; } done /@s[tid]/ { @lat = hist(nsecs - @s[tid]);
#                   delete(@s[tid]); }: the pairing per thread, a latency histogram, what
#                   --request measures
#   ebrec-request   ebrec record --request usdt:bench:request__start,request__done -- usdt_loop:
#                   every request kept, start to done, paired per thread in the kernel
#   ebrec-request-split  the same plus --offcpu: the kernel's split of each request's time (on
#                   CPU, run queue, off CPU), carried by the done's event, and the off-CPU hooks
# The ebrec rows run when EBREC=/path/to/ebrec is set; if that ebrec refuses --request, they say
# skipped with its error.
#
# Columns (medians of REPEAT runs): ns per request (usdt_loop's wall clock around the loops / ITERS);
# cpu ns per request (its threads' CPU time around their loops, summed, / ITERS: includes the
# traps and BPF programs, but not the time lost to other processes, so it is the steadier number
# on a shared machine); ratios of cpu ns to bt-floor and bt-request, and of wall ns to
# bt-request's; the tracer's own CPU ms (its children time minus usdt_loop's: bpftrace's or
# ebrec's user space); requests seen by the tool (bpftrace: sum of the @lat histogram; ebrec:
# the requests `ebsym requests --json` pairs in the trace, not counted in tracer ms; without
# ebsym, the usdt probe hits / 2); others; notes (ebrec's kept/lost per family and BPF ns per
# run, from its summary; ebsym's nested / unmatched_done / open_at_end when not 0).
#
# Usage: bench/scripts/request.sh            (as root)
#   EBREC=/path/to/ebrec    add the ebrec rows (run from a copy: a rebuild during the run is not seen)
#   EBSYM=/path/to/ebsym    count ebrec's requests with it (default: the ebsym beside EBREC)
#   ITERS=1000000           requests per row
#   THREADS=1               usdt_loop's threads (each runs ITERS/THREADS requests)
#   MODES="untraced bt-floor ..."  run only these rows (names as above)
#   REPEAT=3                rounds over all rows; the table shows the median per row
#   WAIT_IDLE_S=0           before each row, wait up to this long for the machine to be idle
#   NOISY_RETRIES=0         rerun a row up to this many times while other processes used more
#                           than NOISE_LIMIT=10 % of the CPU during it
#
# Installs when missing: g++, systemtap-sdt-dev (<sys/sdt.h>), bpftrace.
#
# Measured here on 2026-12-07 (Debian 12.11, kernel 6.18.44, 2 vCPUs, bpftrace 0.17, gcc 12.2),
# commit 879ddb2, 1,000,000 requests per row, REPEAT=3; ebrec: target/release/ebrec as built at
# 12:17 that day from a clean checkout of 879ddb2 (without the uncommitted edits of the time).
# THREADS=1, at 12:18, quiet (others <= 1% on every row):
#   mode                 |    ns/req    cpu ns | x floor   x bt | wall x bt | tracer ms  requests | others  notes
#   untraced             |       5.7       4.1 |    0.00   0.00 |      0.00 |         -         - |      -
#   bt-floor             |     957.8     957.6 |    1.00   0.67 |      0.67 |        65         - |     1%
#   bt-request           |    1427.1    1426.8 |    1.49   1.00 |      1.00 |        64   1000000 |     1%
#   ebrec-request        |    1480.9    1480.4 |    1.55   1.04 |      1.04 |       594    996458 |     1%  trace 2306.4KiB; usdt kept 1992920 lost 7080; BPF 245 ns/run; nested 3; unmatched_done 1
#   ebrec-request-split  |    1609.4    1600.7 |    1.67   1.12 |      1.13 |      1129   1000000 |     1%  trace 3309.2KiB; usdt kept 2000000 lost 0; BPF 317 ns/run
# ebrec --request costs about bpftrace's pairing in the target (1.04x its cpu ns; its BPF program
# 245 ns a probe hit, the two traps ~950 ns of the ~1480), plus ~0.6 us of its own CPU per request
# in user space (it streams both the start and the done event, 2 per request, and pairs them
# offline); --offcpu adds ~120 ns per request (median; 73-277 by round) and doubles ebrec's own CPU. ebrec-request lost
# events in every round (630, 2075, 7080 of 2,000,000: a lost done makes the next start "nested"),
# the split row none. The rows took 35 s.
# THREADS=4 (on 2 CPUs: the target saturates the machine), at 12:19, with another engineer's cargo
# build running (others 59-67% on every row; wall ns are not comparable, read cpu ns):
#   mode                 |    ns/req    cpu ns | x floor   x bt | wall x bt | tracer ms  requests | others  notes
#   untraced             |       3.0       3.7 |    0.00   0.00 |      0.00 |         -         - |      -
#   bt-floor             |     924.1     930.7 |    1.00   0.67 |      0.65 |        54         - |    67%
#   bt-request           |    1411.2    1385.2 |    1.49   1.00 |      1.00 |        61   1000000 |    61%
#   ebrec-request        |    1700.9    1507.3 |    1.62   1.09 |      1.21 |       349    734929 |    59%  trace 1947.0KiB; usdt kept 1469955 lost 530045; BPF 248 ns/run; nested 69; unmatched_done 28
#   ebrec-request-split  |    1998.5    1604.0 |    1.72   1.16 |      1.42 |       888    662253 |    59%  trace 2124.6KiB; offcpu kept 4 lost 0; usdt kept 1324565 lost 675435; BPF 309 ns/run; nested 39; unmatched_done 20
# With 4 busy threads on 2 CPUs ebrec's reader does not keep up with ~1.2 million events a
# second: 21-34% of the usdt events lost in every round (requests seen 66-79% of 1,000,000),
# where bpftrace's in-kernel histogram counts all. A rerun at 12:21 (WAIT_IDLE_S=60, still
# 56-69% others) lost 25-46%; by hand, --sched normal lost as much, --ringbuf-size 128 MiB
# still 13%. The rows took 37 s.
# Then the kernel holding each start hit for its done (one event a request, on main after
# 879ddb2: "request: the kernel holds each start hit for its done", and the probe's role in its
# cookie), beside 879ddb2 in the same quarter hour, THREADS=1, REPEAT=3, quiet (others <= 1%),
# release builds copied to /tmp (12:47-12:48 UTC):
#   mode                 |    ns/req    cpu ns | x floor   x bt | tracer ms  requests | notes
#   879ddb2:
#   bt-floor             |     881.1     880.9 |    1.00   0.66 |        56         - |
#   bt-request           |    1328.5    1328.4 |    1.51   1.00 |        67   1000000 |
#   ebrec-request        |    1458.1    1457.1 |    1.65   1.10 |       562    997767 | usdt kept 1995535 lost 4465; BPF 235 ns/run; unmatched_done 1
#   ebrec-request-split  |    1554.9    1546.9 |    1.76   1.16 |      1034   1000000 | usdt kept 2000000 lost 0; BPF 343 ns/run
#   held starts:
#   bt-floor             |     895.9     895.3 |    1.00   0.67 |        54         - |
#   bt-request           |    1344.9    1344.2 |    1.50   1.00 |        60   1000000 |
#   ebrec-request        |    1444.7    1444.2 |    1.61   1.07 |       449   1000000 | usdt kept 2000000 lost 0; BPF 227 ns/run
#   ebrec-request-split  |    1414.5    1406.7 |    1.57   1.05 |      1068   1000000 | usdt kept 2000000 lost 0; BPF 228 ns/run
# ("usdt kept" counts the hits written: the recorder writes the held start beside its done.)
# In the target, about the same (1.07x bpftrace's cpu ns against 1.10x; with --offcpu 1.05x against
# 1.16x); the recorder's own CPU 20% lower (449 against 562 ms a million requests) and no loss. With
# THREADS=4 on the 2 CPUs (1,000,000 requests as fast as 4 threads go: ~1 M a second), REPEAT=1,
# alternated twice: the held build lost 263,226 and 353,024 hits' worth (requests seen 736,774 and
# 646,976), 879ddb2 613,977 and 468,180 (692,962 and 765,870): the recorder, a SCHED_BATCH thread
# beside 4 busy ones, writes about as many requests a second either way (each still two hits in
# the trace); bpftrace's in-kernel histogram counts all.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

ITERS=${ITERS:-1000000}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-1}
NOISY_RETRIES=${NOISY_RETRIES:-0}
MODES=${MODES:-"untraced bt-floor bt-request ebrec-request ebrec-request-split"}
SRC=$here/../cpp/usdt_loop.cpp
PROVIDER=bench
START=request__start
DONE=request__done

need_root

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-request.XXXXXX")
cleanup() {
  bg_cleanup
  noise_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install g++ systemtap-sdt-dev bpftrace
# Copies of ebrec and ebsym (ebsym beside EBREC unless EBSYM is set), so that a rebuild of them
# during the run does not change the rows.
EBSYM=${EBSYM:-}
if ebrec_available; then
  [ -n "$EBSYM" ] || EBSYM=$(dirname "$EBREC")/ebsym
  log "ebrec: $EBREC ($(date -u -r "$EBREC" +%FT%TZ))"
  cp "$EBREC" "$TMP/ebrec"
  EBREC=$TMP/ebrec
  if [ -x "$EBSYM" ]; then
    log "ebsym: $EBSYM ($(date -u -r "$EBSYM" +%FT%TZ))"
    cp "$EBSYM" "$TMP/ebsym"
    EBSYM=$TMP/ebsym
  else
    log "no ebsym at $EBSYM: ebrec's requests seen are its usdt probe hits / 2"
    EBSYM=""
  fi
fi
UL=$TMP/usdt_loop
log "building $UL"
"${CXX:-c++}" -O2 -g -fno-omit-frame-pointer -pthread -o "$UL" "$SRC"
# bpftrace -l lists the binary's probes from its .note.stapsdt notes (read whole: grep -q would
# stop reading early and, with pipefail, fail on bpftrace's SIGPIPE).
listed=$(bpftrace -l "usdt:$UL:$PROVIDER:*" 2>&1 || true)
for p in $START $DONE; do
  grep -q ":$PROVIDER:$p\$" <<<"$listed" ||
    die "bpftrace lists no usdt:$UL:$PROVIDER:$p (bpftrace -l 'usdt:$UL:*' says: $listed)"
done

# field NAME FILE: value of NAME=... on usdt_loop's output line, or "-".
field() { awk -v k="$1=" '$1 == "usdt_loop:" { for (i = 2; i <= NF; i++) if (index($i, k) == 1) v = substr($i, length(k) + 1) } END { print (v == "" ? "-" : v) }' "$2"; }

# children_cpu_ms: user + system time of this shell's reaped children so far, in ms. Must run in
# this shell ("times" in $(...) would see the subshell's children), so it sets CHILD_MS.
CHILD_MS=0
children_cpu_ms() {
  times >"$TMP/times"
  CHILD_MS=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, k, /[ms]/)
    printf "%.0f", (u[1] * 60 + u[2] + k[1] * 60 + k[2]) * 1000 }' "$TMP/times")
}
# tracer_ms C0 C1 OUT: CPU ms of the tool between C0 and C1 (CHILD_MS before and after it ran),
# less usdt_loop's own.
tracer_ms() {
  awk -v a="$1" -v b="$2" -v s="$(field cpu_ms "$3")" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", b - a - s; else print "-" }'
}

# hist_sum FILE: sum of the counts of bpftrace's hist() lines ("[512, 1K)  958222 |@@@@|").
hist_sum() { awk '/^[[(].*\|/ { sub(/\|.*/, ""); s += $NF } END { print s + 0 }' "$1"; }

# usdt_requests LOG: probe hits of ebrec's usdt family / 2 (a start and a done per request),
# from its summary ("ebrec:   usdt      kept ... probe hits   2000000"), or "-".
usdt_requests() {
  tr '\r' '\n' <"$1" | awk '$1 == "ebrec:" && $2 == "usdt" && $3 == "kept" {
      for (i = 3; i < NF; i++) if ($i == "hits") h = $(i + 1) }
    END { if (h == "") print "-"; else printf "%d\n", h / 2 }'
}

# ebsym_requests TRACE: sets REQ_SEEN to the requests ebsym pairs in TRACE (ebsym requests
# --json: "count") and REQ_NOTE to its nested / unmatched_done / open_at_end when not 0; REQ_SEEN
# is "-" when there is no ebsym or it fails. Its JSON is indented by two spaces per level: the
# top-level keys are the lines indented by exactly two.
ebsym_requests() {
  REQ_SEEN=- REQ_NOTE=""
  [ -n "$EBSYM" ] || return 0
  "$EBSYM" requests "$1" --json >"$TMP/requests.json" 2>"$TMP/requests.err" || {
    REQ_NOTE="; ebsym requests failed: $(head -n1 "$TMP/requests.err")"
    return 0
  }
  REQ_SEEN=$(awk -F'[:,]' '/^  "count": / { print $2 + 0 }' "$TMP/requests.json")
  REQ_NOTE=$(awk -F'[:,]' '/^  "(nested|unmatched_done|open_at_end)": / && $2 + 0 > 0 {
      k = $1; gsub(/[ "]/, "", k); printf "; %s %d", k, $2 }' "$TMP/requests.json")
  [ -n "$REQ_SEEN" ] || REQ_SEEN=-
}

declare -A NS CNS TMS EV NOTE NZ

record() { # MODE OUT TRACER_MS REQUESTS NOTE; per-run values kept space-separated
  local ns=- cns=-
  [ -f "$2" ] && ns=$(field ns_per_request "$2") cns=$(field cpu_ns_per_request "$2")
  NS[$1]="${NS[$1]:-} $ns"
  CNS[$1]="${CNS[$1]:-} $cns"
  TMS[$1]="${TMS[$1]:-} $3"
  EV[$1]=$4
  NOTE[$1]=$5
  printf '  %-20s %10s ns/req  cpu %10s ns/req  tracer %6s ms  requests=%s %s\n' "$1" "$ns" "$cns" "$3" "$4" "$5" >&2
}

run_mode() { # MODE
  local mode=$1 out=$TMP/$1.out prog c0 tms
  local s="usdt:$UL:$PROVIDER:$START" d="usdt:$UL:$PROVIDER:$DONE"
  case $mode in
    untraced)
      "$UL" --iters "$ITERS" --threads "$THREADS" >"$out" 2>&1
      record "$mode" "$out" - - "" ;;
    bt-floor | bt-request)
      case $mode in
        bt-floor) prog="$s /pid == cpid/ {} $d /pid == cpid/ {}" ;;
        bt-request) prog="$s /pid == cpid/ { @s[tid] = nsecs; } $d /@s[tid]/ { @lat = hist(nsecs - @s[tid]); delete(@s[tid]); }" ;;
      esac
      log "$mode: bpftrace -e '$prog' -c usdt_loop"
      children_cpu_ms; c0=$CHILD_MS
      if ! bpftrace -e "$prog" -c "$UL --iters $ITERS --threads $THREADS" >"$out" 2>&1; then
        tail -n 5 "$out" >&2
        record "$mode" - - - "bpftrace failed"
        return 0
      fi
      children_cpu_ms
      tms=$(tracer_ms "$c0" "$CHILD_MS" "$out")
      local ev=-
      [ "$mode" = bt-floor ] || ev=$(hist_sum "$out")
      record "$mode" "$out" "$tms" "$ev" "" ;;
    ebrec-request | ebrec-request-split)
      if ! ebrec_available; then
        record "$mode" - - - "$(ebrec_skip_reason)"
        return 0
      fi
      local trace=$TMP/$mode.pb.zst extra=()
      [ "$mode" = ebrec-request-split ] && extra=(--offcpu)
      log "$mode: $EBREC record -o $trace --request usdt:$PROVIDER:$START,$DONE ${extra[*]} -- usdt_loop"
      children_cpu_ms; c0=$CHILD_MS
      if ! "$EBREC" record -q --bpf-stats -o "$trace" --request "usdt:$PROVIDER:$START,$DONE" "${extra[@]}" \
        -- "$UL" --iters "$ITERS" --threads "$THREADS" >"$out" 2>&1; then
        tail -n 10 "$out" >&2
        local why
        why=$(grep -m1 -iE 'error' "$out" || tail -n1 "$out")
        record "$mode" - - - "ebrec: skipped ($why)"
        return 0
      fi
      children_cpu_ms
      tms=$(tracer_ms "$c0" "$CHILD_MS" "$out")
      ebrec_note "$trace" "$out"
      ebsym_requests "$trace"
      # Without ebsym, the usdt probe hits / 2.
      [ "$REQ_SEEN" != - ] || REQ_SEEN=$(usdt_requests "$out")
      record "$mode" "$out" "$tms" "$REQ_SEEN" "$EBREC_NOTE$REQ_NOTE"
      rm -f "$trace" ;;
    *) die "unknown mode $mode" ;;
  esac
}

busy_check
BUSY_BEFORE=$BUSY_PCT
start=$(date +%s)
for rep in $(seq 1 "$REPEAT"); do
  [ "$REPEAT" -gt 1 ] && log "round $rep of $REPEAT"
  for mode in $MODES; do
    try=0
    while :; do
      saved=("${NS[$mode]:-}" "${CNS[$mode]:-}" "${TMS[$mode]:-}")
      wait_idle
      noise_begin
      run_mode "$mode"
      noise_end
      if is_noisy "$NOISE_PCT" && [ "$try" -lt "$NOISY_RETRIES" ]; then
        try=$((try + 1))
        log "$mode: other processes used ${NOISE_PCT}% of the CPU; again ($try of $NOISY_RETRIES)"
        NS[$mode]=${saved[0]} CNS[$mode]=${saved[1]} TMS[$mode]=${saved[2]}
        continue
      fi
      break
    done
    NZ[$mode]=$(noise_max "${NZ[$mode]:--}" "$NOISE_PCT")
  done
done
end=$(date +%s)

echo
echo "$ITERS requests (usdt start + bench::work + usdt done) per row on $THREADS thread(s), $(nproc) cores, kernel $(uname -r), $(date -u +%F), CPU ${BUSY_BEFORE}% busy before"
echo "Medians of $REPEAT run(s). ns = wall ns per request, cpu ns = usdt_loop's CPU ns per request (both timed by usdt_loop);"
echo "x floor, x bt = cpu ns / that of bt-floor (two empty usdt probes), bt-request (paired per thread, latency histogram);"
echo "wall x bt = ns / bt-request's ns; tracer = the tool's own CPU ms; requests = seen by the tool"
declare -A MED MEDC
for k in "${!NS[@]}"; do
  # shellcheck disable=SC2086 # the per-run list is split on purpose
  MED[$k]=$(median ${NS[$k]})
  # shellcheck disable=SC2086
  MEDC[$k]=$(median ${CNS[$k]})
done
fmt='%-20s | %9s %9s | %7s %6s | %9s | %9s %9s | %6s  %s\n'
# shellcheck disable=SC2059 # the format is shared by the header and the rows
printf "$fmt" mode "ns/req" "cpu ns" "x floor" "x bt" "wall x bt" "tracer ms" requests others notes
for mode in $MODES; do
  ns=${MED[$mode]:--} cns=${MEDC[$mode]:--}
  nz=${NZ[$mode]:--}
  [ "$nz" = - ] || nz="$nz%"
  # shellcheck disable=SC2086
  tms=$(median ${TMS[$mode]:--})
  # shellcheck disable=SC2059
  printf "$fmt" "$mode" "$ns" "$cns" "$(ratio "$cns" "${MEDC[bt-floor]:--}")" "$(ratio "$cns" "${MEDC[bt-request]:--}")" \
    "$(ratio "$ns" "${MED[bt-request]:--}")" "$tms" "${EV[$mode]:--}" "$nz" "${NOTE[$mode]:-}"
done
echo "(rows took $((end - start)) s; others = most CPU used by other processes during a run of the row,"
echo " % of all cores: above ~5% the row is noisy)"
