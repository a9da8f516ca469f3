#!/usr/bin/env bash
# dwarf.sh: whole stacks without frame pointers, perf record --call-graph dwarf against
# ebrec record --cpu --stack-mode dwarf + ebsym, on a C++ CPU loop built with -fomit-frame-pointer.
#
# The program is a variant of bench/cpp/spin.cpp, written by this script into its temp dir and
# built with `c++ -O2 -g -fomit-frame-pointer`: main -> spin::run -> spin::worker, which calls
# spin::hot and spin::cold (noinline, about 2:1 in CPU time) OPS times, on the main thread (spin.cpp
# runs its work on std::threads, whose stacks end in start_thread/clone and never reach main). No
# function keeps a frame pointer (main has a 0xa8-byte frame and uses rbp as an ordinary register),
# so a frame-pointer walk cannot reach main; only an unwinder with the binaries' CFI can. It prints "dspin: ops=N wall_ms=X cpu_ms=U ...".
#
# Rows (HZ, default 999 Hz):
#   untraced    the program alone
#   perf        perf record -e cpu-clock --call-graph dwarf -F HZ -o F -- dspin
#               (8 KiB of stack and the user registers copied per sample), then perf report --stdio
#               and perf script on F for the symbolized stacks
#   perf-z      the same with -z (zstd, level 1)
#   ebrec       ebrec record -q --cpu=HZ --stack-mode dwarf -o T -- dspin (only the live part of the
#               stack, at most 16 KiB, and each binary's .eh_frame once), then ebsym T -o S (unwinds
#               offline and symbolizes) and ebsym top S --kind cpu --json -n 100000 for the stacks
#
# Columns (medians of REPEAT runs): the program's CPU ms (getrusage: user + system, so the kernel's
# stack copies and the BPF program, which run in its context, are counted) and its overhead against
# untraced (CPU time, not wall time: others' builds keep this machine busy and move wall time a lot);
# the tracer's own CPU ms during recording (its children time less the program's); samples (perf:
# `perf report --stats`; ebrec: "kept" in its exit summary) and lost; output bytes (the whole file)
# and bytes per sample; "data B/smp": perf.data's data section per sample (its header carries the
# info and BTF of every BPF program loaded on the machine; ebrec: the whole file again); "x perf-z":
# B/smp against perf -z's; then, to unwind and symbolize: "sym s" and "sym MiB" are the wall
# seconds, CPU seconds and peak RSS of `perf report --stdio` / `ebsym T` (both unwind every sample,
# symbolize and print a report); "stacks s" / "stacks MiB" the same for `perf script` / `ebsym top
# --json` on the symbolized trace (the per-sample stacks this script reads); "hot" the samples whose
# stack has spin::hot or spin::cold; "main %" the share of those whose stack reaches main (perf
# script: a frame `main+0x...`; ebsym: a frame whose function is `main`, a row's count being its
# samples). Below the table: marginal bytes per sample, (bytes - bytes of a SHORT_OPS run) /
# (samples - its samples), which leaves out the fixed parts (perf's header and build-ids, ebrec's
# maps, build-ids and unwind tables), and what ebsym said about the unwinding.
#
# Usage: bench/scripts/dwarf.sh            (as root)
#   EBREC=/path/to/ebrec EBSYM=/path/to/ebsym   use these; otherwise the script runs
#                           `cargo build --release -p ebrec -p ebtrace-ebsym` (BUILD=0:
#                           take target/release as is); either way it runs copies of the two
#                           binaries, so a concurrent rebuild does not change them mid-run
#   OPS=20000000            operations (hot + cold) of the program, ~2.5 s of CPU here
#   SHORT_OPS=$((OPS / 10)) the short run of each tool for the marginal bytes (0: none)
#   HZ=999                  sampling rate
#   MODES="untraced perf perf-z ebrec"  run only these rows
#   REPEAT=3                rounds over all rows; the table shows the median per row
#   WAIT_IDLE_S=0           before each row, wait up to this long for the machine to be idle
#   KEEP=DIR                keep the perf.data files, traces and reports in DIR
#
# Installs when missing: g++, linux-perf, jq, time.
#
# Measured here on 2026-11-30 (Debian 12, kernel 6.18, 2 vCPUs KVM, perf 6.1, gcc 12), 20,000,000
# ops (~2.5 s of CPU), 999 Hz, REPEAT=3, WAIT_IDLE_S=20; ebrec and ebsym built from the working tree
# at 09:41 and 09:43 that day (`cargo build --release -p ebrec -p ebtrace-symbolize`).
# Others' builds and a db_bench kept the machine 51-100% busy before every row ("still busy after
# 20s" each time; others 68-74% during the rows), and the untraced CPU time alone moved 2393 / 2689
# / 2479 ms between rounds (+-6%), so the overhead column cannot rank the three tools:
#   row      cpu ms  ovh % tracer samples lost     bytes  B/smp data B/smp x perf-z | sym s cpu s MiB | stk s cpu s MiB |  hot main %
#   untraced   2479      -      -       -    -         -      -          -       - |                 |                 |    -      -
#   perf       2600   +4.9    387    2601    0  21994608 8456.2     8441.8  147.32 |  0.37  0.25  45 |  0.37  0.20  45 | 2588  100.0
#   perf-z     2585   +4.3    222    2587    0    148408   57.4       43.0    1.00 |  0.49  0.18  45 |  0.36  0.19  46 | 2577  100.0
#   ebrec      2567   +3.5    176    2572    0    125284   48.7       48.7    0.85 |  0.54  0.24  57 |  0.09  0.05  18 | 2565  100.0
#   marginal bytes per sample (against a 2,000,000-op run): perf 8439.8, perf-z 40.8, ebrec 12.8
#   ebrec: cpu kept 2572 lost 0; stackcopy kept 2571 lost 0; BPF 1885 ns/run
#   ebsym: unwound 2571 stacks: 2571 complete, 17991 frames (0 by frame pointers); tables: 3 in the trace
# (sym = perf report --stdio / ebsym T; stk = perf script / ebsym top --json on the symbolized trace.)
# So: perf's 8.4 KB per sample and perf -z's 43 bytes per sample of data section match the issue's
# reference (8.4 KB, 44 B). Bytes: ebrec's whole trace is 48.7 B/sample, below perf -z's whole file
# (57.4) but not its data section alone (43.0), because a run this short is dominated by ebrec's
# fixed part (~95 KB, of which 89 KB are the .eh_frame tables of libc, ld.so and the program: the
# same short run with --no-unwind-info gave 5.5 KB instead of 94.8 KB); per extra sample
# ebrec adds 12.8 bytes against perf -z's 40.8 (3.2x fewer): from these fits ebrec's file is the
# smaller from ~1,800 samples against perf -z's whole file and ~3,100 against its data section alone
# (about 3 s of one busy core at 999 Hz); the aim holds for any but the shortest recordings.
# Overhead: all three within the +-6% this machine resolves (ebrec +3.5%, perf -z +4.3%, perf
# +4.9%); ebrec uses the least CPU of its own (176 ms against 222 and 387). Complete stacks: 100%
# of the hot samples reach main with every tool (the one ebrec sample without a copy was taken
# during execve, in the tracer's child before the exec: its user frame is "outside any mapping").
# Unwinding and symbolizing: ebsym 0.24 CPU s and 57 MiB against perf report's 0.18-0.25 s and
# 45 MiB; at ~2,600 samples both are mostly fixed costs (reading libc's debug file); reading the
# stacks back from the symbolized trace (ebsym top --json) takes 0.05 s against perf script's 0.20.
# The rows took 300 s (240 s of them waiting for an idle machine that never came).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

OPS=${OPS:-20000000}
SHORT_OPS=${SHORT_OPS:-$((OPS / 10))}
HZ=${HZ:-999}
REPEAT=${REPEAT:-3}
MODES=${MODES:-"untraced perf perf-z ebrec"}
KEEP=${KEEP:-}
BUILD=${BUILD:-1}

need_root

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-dwarf.XXXXXX")
cleanup() {
  bg_cleanup
  noise_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install g++ linux-perf jq time
[ -z "$KEEP" ] || mkdir -p "$KEEP"

# The ebtrace binaries: given, or built; copied so that others' rebuilds do not swap them mid-run.
if [[ " $MODES " == *" ebrec "* ]]; then
  if [ -z "${EBREC:-}" ] || [ -z "${EBSYM:-}" ]; then
    if [ "$BUILD" = 1 ]; then
      log "cargo build --release -p ebrec -p ebtrace-ebsym (may wait on the target dir's lock)"
      (cd "$root" && cargo build --release -p ebrec -p ebtrace-ebsym) >"$TMP/build.log" 2>&1 ||
        { tail -n 20 "$TMP/build.log" >&2; die "cargo build failed"; }
    fi
    EBREC=${EBREC:-$root/target/release/ebrec}
    EBSYM=${EBSYM:-$root/target/release/ebsym}
  fi
  [ -x "$EBREC" ] || die "EBREC=$EBREC is not an executable file"
  [ -x "$EBSYM" ] || die "EBSYM=$EBSYM is not an executable file"
  cp "$EBREC" "$TMP/ebrec"
  cp "$EBSYM" "$TMP/ebsym"
  log "ebrec: $EBREC ($(date -u -r "$EBREC" +%FT%TZ)), ebsym: $EBSYM ($(date -u -r "$EBSYM" +%FT%TZ))"
  EBREC=$TMP/ebrec
  EBSYM=$TMP/ebsym
fi

# The program: spin.cpp's hot and cold, called from main's thread through two more frames.
cat >"$TMP/dspin.cpp" <<'EOF'
// dspin: spin.cpp's two-function loop on the main thread, for unwinding without frame pointers.
//   dspin [OPS]   prints "dspin: ops=N wall_ms=X cpu_ms=U checksum=C"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sys/resource.h>

namespace spin {

template <int ROUNDS> inline uint64_t mix(uint64_t x) {
  for (int i = 0; i < ROUNDS; i++) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 32;
  }
  return x;
}

__attribute__((noinline)) uint64_t hot(uint64_t x) {
  x = mix<16>(x);
  asm volatile("" : "+r"(x));
  return x;
}

__attribute__((noinline)) uint64_t cold(uint64_t x) {
  x = mix<8>(x);
  asm volatile("" : "+r"(x));
  return x;
}

__attribute__((noinline)) uint64_t worker(long ops, uint64_t seed) {
  uint64_t x = seed;
  for (long i = 0; i < ops; i++) {
    x = hot(x + uint64_t(i));
    x = cold(x);
  }
  asm volatile("" : "+r"(x));
  return x;
}

// Not a tail call (the result is changed after the call), so run stays on the stack.
__attribute__((noinline)) uint64_t run(long ops) {
  uint64_t x = worker(ops, 1);
  asm volatile("" : "+r"(x));
  return x + 1;
}

}  // namespace spin

static double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

int main(int argc, char **argv) {
  long ops = argc > 1 ? atol(argv[1]) : 20000000;
  if (ops <= 0) {
    fprintf(stderr, "usage: dspin [OPS]\n");
    return 2;
  }
  double t0 = now_ms();
  uint64_t r = spin::run(ops);
  double t1 = now_ms();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("dspin: ops=%ld wall_ms=%.1f cpu_ms=%.0f checksum=%016llx\n", ops, t1 - t0, cpu_ms,
         (unsigned long long)r);
  return 0;
}
EOF
PROG=$TMP/dspin
log "building $PROG (-O2 -g -fomit-frame-pointer)"
"${CXX:-c++}" -O2 -g -fomit-frame-pointer -o "$PROG" "$TMP/dspin.cpp"

# field NAME FILE: value of NAME=... on the program's output line, or "-".
field() { awk -v k="$1=" '$1 == "dspin:" { for (i = 2; i <= NF; i++) if (index($i, k) == 1) v = substr($i, length(k) + 1) } END { print (v == "" ? "-" : v) }' "$2"; }

# children_cpu_ms: user + system time of this shell's reaped children so far, in ms (sets CHILD_MS;
# must run in this shell, not in $(...)).
CHILD_MS=0
children_cpu_ms() {
  times >"$TMP/times"
  CHILD_MS=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, k, /[ms]/)
    printf "%.0f", (u[1] * 60 + u[2] + k[1] * 60 + k[2]) * 1000 }' "$TMP/times")
}

# timed OUT CMD...: runs CMD with stdout to OUT (stderr to OUT.err); sets TIMED to
# "WALL_S CPU_S PEAK_MIB" (/usr/bin/time), or "- - -" when CMD fails.
TIMED=""
timed() {
  local out=$1
  shift
  if /usr/bin/time -f '%e %U %S %M' -o "$TMP/time" "$@" >"$out" 2>"$out.err"; then
    TIMED=$(awk 'END { printf "%.2f %.2f %.0f", $1, $2 + $3, $4 / 1024 }' "$TMP/time")
  else
    log "failed: $* (stderr: $(tail -n 3 "$out.err" | tr '\n' ' '))"
    TIMED="- - -"
  fi
}

# perf_stat FILE: "SAMPLES LOST" from perf report --stats (the aggregated block comes first).
perf_stat() {
  perf report -i "$1" --stats 2>/dev/null | awk '
    /SAMPLE events:/ && s == "" { s = $3 }
    /LOST(_SAMPLES)? events:/ { l += $3 }
    END { print (s == "" ? "-" : s), l + 0 }'
}

# perf_main FILE: "HOT MAIN" from perf script output: samples with a spin::hot or spin::cold
# frame, and those of them with a main frame too.
perf_main() {
  awk 'BEGIN { RS = "" }
    { h = ($0 ~ /\n[ \t]*[0-9a-f]+ spin::(hot|cold)[+ ]/); m = ($0 ~ /\n[ \t]*[0-9a-f]+ main[+ ]/)
      if (h) hot++; if (h && m) main++ }
    END { print hot + 0, main + 0 }' "$1"
}

# ebsym_main FILE: the same from `ebsym top --json` (a row's count is its samples).
ebsym_main() {
  jq -r '[.rows[] | {c: .count, f: [.frames[].function]}
          | select(any(.f[]; test("^spin::(hot|cold)\\(")))]
         | "\(map(.c) | add // 0) \(map(select(any(.f[]; . == "main")) | .c) | add // 0)"' "$1"
}

# Per-row lists of per-run values, space-separated (filled through add, read through med).
# shellcheck disable=SC2034
declare -A CPUMS TCPU SAMP LOST BYTES DBYTES SYMW SYMC SYMM STKW STKC STKM HOT MAIN NOTE NZ

add() { # ARRAY ROW VALUE: append a per-run value
  local -n _runs=$1
  _runs[$2]="${_runs[$2]:-} $3"
}

# run_row MODE OPS [short]: one run of the row; "short" runs only record (for the marginal bytes)
# and sets SHORT_BYTES and SHORT_SAMPLES.
SHORT_BYTES=- SHORT_SAMPLES=-
run_row() {
  local mode=$1 ops=$2 short=${3:-} out c0 cpu tcpu bytes dbytes samples lost hot main w c m
  out=$TMP/$mode.out
  case $mode in
    untraced)
      "$PROG" "$ops" >"$out" 2>&1
      add CPUMS untraced "$(field cpu_ms "$out")"
      log "  untraced: cpu $(field cpu_ms "$out") ms, wall $(field wall_ms "$out") ms" ;;
    perf | perf-z)
      local data=$TMP/$mode.data z=()
      [ "$mode" = perf-z ] && z=(-z)
      children_cpu_ms; c0=$CHILD_MS
      if ! perf record -o "$data" -e cpu-clock --call-graph dwarf "${z[@]}" -F "$HZ" -- "$PROG" "$ops" >"$out" 2>&1; then
        tail -n 5 "$out" >&2
        NOTE[$mode]="perf record failed"
        return 0
      fi
      children_cpu_ms
      cpu=$(field cpu_ms "$out")
      bytes=$(stat -c %s "$data")
      read -r samples lost < <(perf_stat "$data")
      if [ -n "$short" ]; then SHORT_BYTES=$bytes SHORT_SAMPLES=$samples; rm -f "$data"; return 0; fi
      tcpu=$(awk -v a="$c0" -v b="$CHILD_MS" -v s="$cpu" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", b - a - s; else print "-" }')
      dbytes=$(perf report -i "$data" --header-only 2>/dev/null | awk '/^# data size *:/ { print $NF }')
      timed "$TMP/$mode.report" perf report -i "$data" --stdio
      read -r w c m <<<"$TIMED"
      add SYMW "$mode" "$w"; add SYMC "$mode" "$c"; add SYMM "$mode" "$m"
      timed "$TMP/$mode.script" perf script -i "$data"
      read -r w c m <<<"$TIMED"
      add STKW "$mode" "$w"; add STKC "$mode" "$c"; add STKM "$mode" "$m"
      read -r hot main < <(perf_main "$TMP/$mode.script")
      add CPUMS "$mode" "$cpu"; add TCPU "$mode" "$tcpu"; add SAMP "$mode" "$samples"; add LOST "$mode" "$lost"
      add BYTES "$mode" "$bytes"; add DBYTES "$mode" "${dbytes:--}"; add HOT "$mode" "$hot"; add MAIN "$mode" "$main"
      log "  $mode: cpu $cpu ms, tracer $tcpu ms, $samples samples ($lost lost), $bytes bytes (data $dbytes), report $(echo "${SYMW[$mode]}" | awk '{ print $NF }') s, $main of $hot hot samples reach main"
      if [ -n "$KEEP" ]; then cp "$data" "$TMP/$mode.report" "$KEEP/"; gzip -c "$TMP/$mode.script" >"$KEEP/$mode.script.gz"; fi
      rm -f "$data" "$TMP/$mode.script" ;;
    ebrec)
      local trace=$TMP/ebrec.pb.zst sym=$TMP/ebrec.sym.pb.zst
      rm -f "$trace" "$sym"
      children_cpu_ms; c0=$CHILD_MS
      if ! "$EBREC" record -q --bpf-stats -o "$trace" --cpu="$HZ" --stack-mode dwarf -- "$PROG" "$ops" >"$out" 2>&1; then
        tail -n 10 "$out" >&2
        NOTE[ebrec]="ebrec failed: $(tail -n 1 "$out")"
        return 0
      fi
      children_cpu_ms
      cpu=$(field cpu_ms "$out")
      bytes=$(stat -c %s "$trace")
      # "ebrec:   cpu  kept N  lost N  filtered N  probe hits N"
      read -r samples lost < <(tr '\r' '\n' <"$out" | awk '$1 == "ebrec:" && $2 == "cpu" && $3 == "kept" { k = $4; l = $6 }
        END { print (k == "" ? "-" : k), (l == "" ? "-" : l) }')
      if [ -n "$short" ]; then SHORT_BYTES=$bytes SHORT_SAMPLES=$samples; return 0; fi
      tcpu=$(awk -v a="$c0" -v b="$CHILD_MS" -v s="$cpu" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", b - a - s; else print "-" }')
      ebrec_note "$trace" "$out"
      timed "$TMP/ebrec.report" "$EBSYM" "$trace" -o "$sym"
      read -r w c m <<<"$TIMED"
      add SYMW ebrec "$w"; add SYMC ebrec "$c"; add SYMM ebrec "$m"
      hot=- main=-
      if [ -f "$sym" ]; then
        timed "$TMP/ebrec.json" "$EBSYM" top "$sym" --kind cpu --json -n 100000
        read -r w c m <<<"$TIMED"
        add STKW ebrec "$w"; add STKC ebrec "$c"; add STKM ebrec "$m"
        [ "$w" = - ] || read -r hot main < <(ebsym_main "$TMP/ebrec.json")
      fi
      # ebsym's summary lines about the unwinding (stacks unwound, cut short and why).
      EBSYM_SAYS=$(cat "$TMP/ebrec.report.err" "$TMP/ebrec.report" | grep -E '^ebsym: unwound|cut short' | sort -u | tr '\n' ' ' || true)
      add CPUMS ebrec "$cpu"; add TCPU ebrec "$tcpu"; add SAMP ebrec "$samples"; add LOST ebrec "$lost"
      add BYTES ebrec "$bytes"; add DBYTES ebrec "$bytes"; add HOT ebrec "$hot"; add MAIN ebrec "$main"
      NOTE[ebrec]="${EBREC_NOTE#trace *; }"
      log "  ebrec: cpu $cpu ms, tracer $tcpu ms, $samples samples ($lost lost), $bytes bytes, ebsym $(echo "${SYMW[ebrec]}" | awk '{ print $NF }') s, $main of $hot hot samples reach main"
      if [ -n "$KEEP" ]; then cp "$trace" "$sym" "$TMP/ebrec.json" "$TMP/ebrec.report" "$KEEP/"; cp "$TMP/ebrec.report.err" "$KEEP/ebsym.stderr"; fi
      rm -f "$trace" "$sym" ;;
    *) die "unknown mode $mode" ;;
  esac
}

EBSYM_SAYS=""
busy_check
BUSY_BEFORE=$BUSY_PCT
start=$(date +%s)
for rep in $(seq 1 "$REPEAT"); do
  [ "$REPEAT" -gt 1 ] && log "round $rep of $REPEAT"
  for mode in $MODES; do
    wait_idle
    noise_begin
    log "$mode"
    run_row "$mode" "$OPS"
    noise_end
    NZ[$mode]=$(noise_max "${NZ[$mode]:--}" "$NOISE_PCT")
  done
done
declare -A MARG
if [ "$SHORT_OPS" -gt 0 ]; then
  for mode in $MODES; do
    [ "$mode" = untraced ] && continue
    SHORT_BYTES=- SHORT_SAMPLES=-
    log "$mode: short run ($SHORT_OPS ops) for the marginal bytes"
    run_row "$mode" "$SHORT_OPS" short
    # shellcheck disable=SC2086 # per-run lists split on purpose
    MARG[$mode]=$(awk -v b1="$SHORT_BYTES" -v s1="$SHORT_SAMPLES" -v b2="$(median ${BYTES[$mode]:-})" \
      -v s2="$(median ${SAMP[$mode]:-})" 'BEGIN {
      if (b1 b2 s1 s2 ~ /^[0-9]+$/ && s2 > s1) printf "%.1f B/smp (%d samples, %d bytes in the short run)", (b2 - b1) / (s2 - s1), s1, b1; else print "-" }')
  done
fi
end=$(date +%s)

# med ROW ARRAY: median of a row's per-run values.
med() {
  local -n _list=$2
  # shellcheck disable=SC2086 # the per-run list is split on purpose
  median ${_list[$1]:-}
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%+.1f", 100 * (a - b) / b; else print "-" }'; }
per() { awk -v b="$1" -v s="$2" 'BEGIN { if (b ~ /^[0-9.]+$/ && s ~ /^[0-9]+$/ && s > 0) printf "%.1f", b / s; else print "-" }'; }

echo
echo "dspin (main -> run -> worker -> hot/cold, -O2 -g -fomit-frame-pointer, $OPS ops), $HZ Hz, $(nproc) cores,"
echo "kernel $(uname -r), $(perf --version), $(date -u +%F), CPU ${BUSY_BEFORE}% busy before; medians of $REPEAT run(s)."
echo "cpu = the program's CPU ms (user + system); ovh = against untraced; tracer = the recorder's own CPU ms;"
echo "B/smp = file bytes / samples; data B/smp = perf.data's data section (ebrec: the whole file); sym = perf report"
echo "--stdio / ebsym T (unwind + symbolize + report): wall s, CPU s, peak MiB; stacks = perf script / ebsym top --json"
echo "on the symbolized trace; hot = samples in spin::hot or spin::cold; main % = share of those reaching main"
base=$(med untraced CPUMS)
zbps=$(per "$(med perf-z BYTES)" "$(med perf-z SAMP)")
fmt='%-9s | %6s %6s | %6s | %7s %4s | %9s %7s %7s %6s | %5s %5s %4s | %5s %5s %4s | %6s %7s | %5s\n'
# shellcheck disable=SC2059 # the format is shared by the header and the rows
printf "$fmt" row "cpu ms" "ovh %" tracer samples lost bytes "B/smp" "data B" "x pf-z" "sym s" "cpu s" MiB "stk s" "cpu s" MiB hot "main %" others
for mode in $MODES; do
  cpu=$(med "$mode" CPUMS)
  ovh=-
  [ "$mode" = untraced ] || ovh=$(pct "$cpu" "$base")
  samples=$(med "$mode" SAMP)
  bytes=$(med "$mode" BYTES)
  bps=$(per "$bytes" "$samples")
  hot=$(med "$mode" HOT)
  mainp=$(awk -v h="$hot" -v m="$(med "$mode" MAIN)" 'BEGIN { if (h ~ /^[0-9.]+$/ && m ~ /^[0-9.]+$/ && h > 0) printf "%.1f", 100 * m / h; else print "-" }')
  nz=${NZ[$mode]:--}
  [ "$nz" = - ] || nz="$nz%"
  # shellcheck disable=SC2059
  printf "$fmt" "$mode" "$cpu" "$ovh" "$(med "$mode" TCPU)" "$samples" "$(med "$mode" LOST)" "$bytes" "$bps" \
    "$(per "$(med "$mode" DBYTES)" "$samples")" "$(ratio "$bps" "$zbps")" \
    "$(med "$mode" SYMW)" "$(med "$mode" SYMC)" "$(med "$mode" SYMM)" \
    "$(med "$mode" STKW)" "$(med "$mode" STKC)" "$(med "$mode" STKM)" "$hot" "$mainp" "$nz"
done
for mode in $MODES; do
  [ "$mode" = untraced ] || [ -z "${MARG[$mode]:-}" ] || echo "marginal bytes per sample, $mode: ${MARG[$mode]}"
done
[ -z "${NOTE[ebrec]:-}" ] || echo "ebrec: ${NOTE[ebrec]}"
[ -z "$EBSYM_SAYS" ] || echo "ebsym (last run): $EBSYM_SAYS"
echo "(rows took $((end - start)) s; others = most CPU used by other processes during a run of the row, % of all cores)"
