#!/usr/bin/env bash
# scaling.sh: does the analysis scale with distinct stacks? (issue 50)
#
# Synthetic symbolized allocation traces of a C++ program at 1x, 4x and 16x (SCALES) the
# distinct stacks and events (bench/src/bin/scaling.rs: at 1x 1,250 stacks of 20-60 frames
# with long templated names, sharing their outer frames, and 125,000 allocations; 16x is
# 20,000 stacks and 2 M allocations, about a large code generator's trace), then `ebsym
# heap`, `leaks`, `top` and `report` on each under /usr/bin/time: wall seconds and peak RSS,
# with each size's growth over 1x beside (linear growth: x4 and x16).
#
# Then a real program, when heaptrack is installed: heaptrack_print beside ebsym on the same
# program's runs. HEAP_KEEP=DIR takes heap.sh's kept files (KEEP=DIR bench/scripts/heap.sh:
# ht.* and t.sym.pb.zst); otherwise, as root with EBREC set, REAL=shop (the default)
# records testdata/cpp/shop.cpp (SECONDS=2) here with heaptrack and with `ebrec record
# --alloc --alloc-sampler preload --sample-bytes 1`; REAL=compiler records Debian's C++
# compiler (cc1plus -O2) on bench/cpp/templates.cpp with heaptrack and with `ebrec record
# --alloc` (3.3 M allocations, ~125,000 distinct stacks; heaptrack's run of it may not
# finish: its counts are then those of an aborted compile). The trace is symbolized with
# ebsym. Each command: heap, leaks, top --kind alloc, report, pprof --kind alloc, diff
# (the trace against itself).
#
# Usage: bench/scripts/scaling.sh
#   SCALES="1 4 16"
#   EBSYM=target/release/ebsym   GEN=target/release/scaling
#                    (cargo build --release -p ebtrace-ebsym -p ebtrace-bench --bin scaling)
#   EBREC=target/release/ebrec   for the real program's recording (optional)
#   HEAP_KEEP=DIR                heap.sh's kept files instead of recording shop here
#   REAL=shop|compiler|none      the real program recorded here (default shop)
#   KEEP=DIR                     keep the traces, outputs and logs there
#   RESULTS_DIR=target/ebtrace-artifacts/bench   where the table is written (scaling-DATE.txt)
#   WAIT_IDLE_S=0                before each row, wait up to this long for an idle machine
#
# Measured: see docs/benchmarks.md, "Analysis against distinct stacks".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

repo=$(cd "$here/../.." && pwd)
SCALES=${SCALES:-1 4 16}
EBSYM=${EBSYM:-$repo/target/release/ebsym}
GEN=${GEN:-$repo/target/release/scaling}
EBREC=${EBREC:-}
HEAP_KEEP=${HEAP_KEEP:-}
SECONDS_RUN=${SECONDS_RUN:-2}
KEEP=${KEEP:-}
RESULTS_DIR=${RESULTS_DIR:-$repo/target/ebtrace-artifacts/bench}
REAL=${REAL:-shop}
COMMANDS=(heap leaks top report pprof diff)

for b in "$EBSYM" "$GEN"; do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ebtrace-ebsym -p ebtrace-bench --bin scaling"
done
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-scaling.XXXXXX")
cleanup() {
  if [ -n "$KEEP" ] && [ -d "$TMP" ]; then
    mkdir -p "$KEEP" && cp -a "$TMP"/. "$KEEP"/ 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# timed NAME CMD...: stdout in $TMP/NAME.out, stderr in $TMP/NAME.log, "WALL RSS_KIB" in
# $TMP/NAME.time.
timed() {
  local name=$1
  shift
  wait_idle
  log "$name: $*"
  /usr/bin/time -f '%e %M' -o "$TMP/$name.time" "$@" >"$TMP/$name.out" 2>"$TMP/$name.log" ||
    { tail -n 20 "$TMP/$name.log" >&2; die "$name failed (log kept with KEEP=DIR)"; }
}
wall() { awk '{ print $1 }' "$TMP/$1.time"; }
rss_mb() { awk '{ printf "%.0f", $2 / 1024 }' "$TMP/$1.time"; }

# run_commands TAG TRACE: the four commands on TRACE, timed as TAG-COMMAND.
run_commands() {
  local tag=$1 trace=$2
  timed "$tag-heap" "$EBSYM" heap "$trace"
  timed "$tag-leaks" "$EBSYM" leaks "$trace"
  timed "$tag-top" "$EBSYM" top "$trace" --kind alloc
  timed "$tag-report" "$EBSYM" report "$trace" -o "$TMP/$tag.html"
  timed "$tag-pprof" "$EBSYM" pprof "$trace" --kind alloc -o "$TMP/$tag.pb.gz"
  timed "$tag-diff" "$EBSYM" diff "$trace" "$trace" --kind alloc
}

busy_check
BUSY_BEFORE=$BUSY_PCT
t_start=$SECONDS
declare -A EVENTS STACKS SIZE
for s in $SCALES; do
  log "writing the ${s}x trace"
  read -r ev st < <("$GEN" "$s" "$TMP/x$s.pb.zst")
  EVENTS[$s]=$ev
  STACKS[$s]=$st
  SIZE[$s]=$(awk -v b="$(stat -c %s "$TMP/x$s.pb.zst")" 'BEGIN { printf "%.1f", b / 1048576 }')
  run_commands "x$s" "$TMP/x$s.pb.zst"
  rm -f "$TMP/x$s.pb.zst"
done

# The real program: heaptrack_print beside ebsym.
real=""
if command -v heaptrack_print >/dev/null; then
  if [ -n "$HEAP_KEEP" ]; then
    ht_file=$(ls "$HEAP_KEEP"/ht.* 2>/dev/null | head -n1)
    real_trace=$HEAP_KEEP/t.sym.pb.zst
    [ -n "$ht_file" ] && [ -f "$real_trace" ] || die "HEAP_KEEP=$HEAP_KEEP has no ht.* and t.sym.pb.zst"
    real="heap.sh's program (HEAP_KEEP=$HEAP_KEEP)"
  elif [ "$REAL" = shop ] && ebrec_available && [ "$(id -u)" -eq 0 ]; then
    g++ -O2 -g -fno-omit-frame-pointer -pthread -std=c++17 -Wl,--build-id \
      -o "$TMP/shop" "$repo/testdata/cpp/shop.cpp"
    timed rec-heaptrack heaptrack -o "$TMP/ht" "$TMP/shop" --seconds "$SECONDS_RUN"
    ht_file=$(ls "$TMP"/ht.* | head -n1)
    timed rec-ebrec "$EBREC" record --alloc --alloc-sampler preload --sample-bytes 1 \
      -o "$TMP/shop.pb.zst" -- "$TMP/shop" --seconds "$SECONDS_RUN"
    timed symbolize "$EBSYM" "$TMP/shop.pb.zst" -o "$TMP/shop.sym.pb.zst"
    real_trace=$TMP/shop.sym.pb.zst
    real="testdata/cpp/shop.cpp --seconds $SECONDS_RUN (every allocation)"
  elif [ "$REAL" = compiler ] && ebrec_available && [ "$(id -u)" -eq 0 ]; then
    cc1plus=$(g++ -print-prog-name=cc1plus)
    [ -x "$cc1plus" ] || die "no cc1plus ($cc1plus)"
    g++ -std=c++17 -O2 -E "$repo/bench/cpp/templates.cpp" -o "$TMP/templates.ii"
    compile=("$cc1plus" -quiet -O2 -std=c++17 "$TMP/templates.ii" -o /dev/null)
    # heaptrack's run may abort (a std::bad_alloc here): its file is read all the same.
    /usr/bin/time -f '%e %M' -o "$TMP/rec-heaptrack.time" heaptrack -o "$TMP/ht" \
      "${compile[@]}" >"$TMP/rec-heaptrack.out" 2>"$TMP/rec-heaptrack.log" || true
    ht_file=$(ls "$TMP"/ht.* 2>/dev/null | head -n1)
    [ -n "$ht_file" ] || die "heaptrack wrote no file (log kept with KEEP=DIR)"
    timed rec-ebrec "$EBREC" record --alloc -o "$TMP/cc.pb.zst" -- "${compile[@]}"
    timed symbolize "$EBSYM" "$TMP/cc.pb.zst" -o "$TMP/cc.sym.pb.zst"
    real_trace=$TMP/cc.sym.pb.zst
    real="$cc1plus -O2 on bench/cpp/templates.cpp (every allocation)"
  fi
  if [ -n "$real" ]; then
    timed heaptrack_print heaptrack_print -f "$ht_file"
    run_commands real "$real_trace"
  fi
fi
run_s=$((SECONDS - t_start))

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/scaling-$(date -u +%Y%m%d-%H%M).txt
first=${SCALES%% *}
{
  echo "ebsym on synthetic symbolized traces, $(nproc) cores, kernel $(uname -r), $(date -u '+%F %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo -), CPU ${BUSY_BEFORE}% busy before, run ${run_s}s"
  printf '%-6s %8s %10s %8s' "scale" "stacks" "events" "MiB"
  for c in "${COMMANDS[@]}"; do printf ' %17s' "$c s / MB"; done
  printf ' %12s\n' "report/heap"
  for s in $SCALES; do
    printf '%-6s %8s %10s %8s' "${s}x" "${STACKS[$s]}" "${EVENTS[$s]}" "${SIZE[$s]}"
    for c in "${COMMANDS[@]}"; do printf ' %17s' "$(wall "x$s-$c") / $(rss_mb "x$s-$c")"; done
    printf ' %12s\n' "$(ratio "$(wall "x$s-report")" "$(wall "x$s-heap")")"
  done
  echo "growth over ${first}x (time x / memory x):"
  for s in $SCALES; do
    [ "$s" = "$first" ] && continue
    printf '%-6s %8s %10s %8s' "${s}x" "x$(ratio "${STACKS[$s]}" "${STACKS[$first]}")" \
      "x$(ratio "${EVENTS[$s]}" "${EVENTS[$first]}")" ""
    for c in "${COMMANDS[@]}"; do
      printf ' %17s' "x$(ratio "$(wall "x$s-$c")" "$(wall "x$first-$c")") / x$(ratio "$(rss_mb "x$s-$c")" "$(rss_mb "x$first-$c")")"
    done
    echo
  done
  if [ -n "$real" ]; then
    echo
    echo "real program: $real; $(heaptrack --version 2>/dev/null | head -n1)"
    printf '%-36s %8s %9s %12s\n' "analysis" "wall s" "peak MB" "x heaptrack"
    printf '%-36s %8s %9s %12s\n' "heaptrack_print (everything)" "$(wall heaptrack_print)" \
      "$(rss_mb heaptrack_print)" "1.00"
    for c in "${COMMANDS[@]}"; do
      printf '%-36s %8s %9s %12s\n' "ebsym $c" "$(wall "real-$c")" "$(rss_mb "real-$c")" \
        "$(ratio "$(wall "real-$c")" "$(wall heaptrack_print)")"
    done
  fi
} | tee "$out"
log "table written to $out"
