#!/usr/bin/env bash
# cpu.sh: cost and size of on-CPU stack sampling, perf record against ebrec record --cpu, on a busy
# C++ program (bench/cpp/spin.cpp: one thread per core, a fixed amount of work split about 2:1
# between two noinline functions, spin::hot and spin::cold; it times itself).
#
# Rows, at each sampling rate (HZS, default 99 and 999 Hz per CPU): perf record -g -F HZ
# (perf.data as is), perf record -g -z -F HZ (zstd-compressed perf.data), ebrec record --cpu=HZ
# (skipped unless EBREC=/path/to/ebrec); plus one untraced row. All three launch spin themselves
# (perf record -- CMD, ebrec record -- CMD) and sample user and kernel stacks (frame pointers) of
# the cpu-clock software event (this VM has no hardware PMU; perf gets -e cpu-clock so that it does
# not depend on the fallback). spin's clock runs from its first thread's start to the last join,
# so tracer start-up and shutdown (perf's build-id pass) are not counted.
#
# Columns (medians of REPEAT runs): spin's wall ms and its overhead % against untraced; spin's CPU
# ms (getrusage: user + system, which includes the sampling interrupts and BPF programs that ran
# on its CPUs) and its overhead %: on a shared machine the CPU time is the steadier of the two,
# since wall time also moves with whatever else runs; the tracer's own CPU ms (the tool's children
# time minus spin's: mostly start-up and shutdown, e.g. perf's build-id pass); samples (perf:
# `perf report --stats` SAMPLE events; ebrec: "kept" in its exit summary), lost samples, samples
# as % of expected (spin's CPU time x HZ); output bytes (the whole file), bytes per sample and that
# against perf -z at the same rate; others (CPU used by unrelated processes during the row).
# perf's notes give its data section alone (the rest of perf.data is its header, whose features
# include the info and BTF of every BPF program loaded on the machine, so it grows when other
# tracers or tests run). Below the table, per tool, the marginal bytes per sample: (bytes at 999 - bytes at 99) /
# (samples at 999 - samples at 99), which leaves out the fixed part (perf's header and build-id
# table, ebrec's maps and build-ids) that dominates short runs at 99 Hz.
#
# Usage: bench/scripts/cpu.sh            (as root)
#   EBREC=/path/to/ebrec    add the ebrec rows
#   OPS=20000000            operations per spin thread (~5 s per row here)
#   THREADS=$(nproc)        spin threads
#   HZS="99 999"            sampling rates
#   MODES="untraced perf perf-z ebrec"  run only these rows
#   REPEAT=3                rounds over all rows; the table shows the median per row
#   WAIT_IDLE_S=0           before each row, wait up to this long for the machine to be idle
#   NOISY_RETRIES=0         rerun a row up to this many times while other processes used more
#                           than NOISE_LIMIT=10 % of the CPU during it
#   KEEP=DIR                keep the perf.data files and traces in DIR
#
# Installs when missing: g++, linux-perf.
#
# Measured here on 2026-11-30 (Debian 12, kernel 6.18, 2 vCPUs KVM, perf 6.1, gcc 12), 2 threads x
# 20,000,000 ops (~4.7 s of CPU each row), REPEAT=3, WAIT_IDLE_S=20; ebrec: a copy of the
# work-in-progress target/release/ebrec built at 08:47 that day. Other engineers' cargo builds kept
# the machine busy the whole time (others 51-73%, "still busy after 20s" before every row), so
# the wall columns are noise (the untraced median happened to fall in quiet spells); spin's CPU
# time is the number to read, and it moved by +-3% between identical runs:
#   row        wall ms  ovh %  cpu ms  ovh %  tracer  samples lost exp%   bytes  B/smp x perf-z
#   untraced    4811.0      -    4716      -       -        -    -    -       -      -       -
#   perf-99     7157.2  +48.8    4793   +1.6     231      472    0   99   74752  158.4    1.72  (data section 77.8 B/smp)
#   perf-z-99   7583.9  +57.6    4861   +3.1     155      478    0   99   44130   92.3    1.00  (data section 13.7 B/smp)
#   ebrec-99    8063.0  +67.6    4907   +4.1     127      483    0   99    5900   12.2    0.13  (BPF 4816 ns/run)
#   perf-999    4450.2   -7.5    4750   +0.7     317     4748    0  100  381804   80.4    4.88  (data section 72.6 B/smp)
#   perf-z-999  6909.9  +43.6    4735   +0.4     205     4732    0  100   78023   16.5    1.00  (data section 8.5 B/smp)
#   ebrec-999   8285.4  +72.2    4720   +0.1     112     4753    0  101   23319    4.9    0.30  (BPF 1153 ns/run)
#   marginal bytes per sample (99 -> 999 Hz): perf 71.8; perf-z 8.0; ebrec 4.1
# So: the cost to the target is within what this machine can resolve for all three (+-4%, at 99
# and at 999 Hz); ebrec uses the least CPU of its own (~0.1 s a run against 0.2 s for perf -z and
# 0.3 s for perf, mostly start-up and shutdown); ebrec's trace is 4.1-4.9 bytes per sample at
# 999 Hz, about half of perf -z's data section alone (8.0-8.5) and a third of its whole file (16.5, of
# which ~38 KiB is perf's header). Every sample expected from spin's CPU time was there (exp% 99-101)
# and none was lost. An earlier full run (same ebrec and machine state) gave the same picture:
# cpu ovh +0.4 / +2.4 / +2.3 % at 999 Hz, bytes per sample 80.2 / 15.8 / 4.7.
# The rows took 535 s (of which about 400 s waiting for an idle machine that never came).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

OPS=${OPS:-20000000}
THREADS=${THREADS:-$(nproc)}
HZS=${HZS:-"99 999"}
REPEAT=${REPEAT:-3}
NOISY_RETRIES=${NOISY_RETRIES:-0}
MODES=${MODES:-"untraced perf perf-z ebrec"}
KEEP=${KEEP:-}
SRC=$here/../cpp/spin.cpp

need_root

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-cpu.XXXXXX")
cleanup() {
  bg_cleanup
  noise_cleanup
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install g++ linux-perf
[ -z "$KEEP" ] || mkdir -p "$KEEP"
SPIN=$TMP/spin
log "building $SPIN"
"${CXX:-c++}" -O2 -g -fno-omit-frame-pointer -pthread -o "$SPIN" "$SRC"
SPIN_CMD=("$SPIN" --threads "$THREADS" --ops "$OPS")

# field NAME FILE: value of NAME=... on spin's output line, or "-".
field() { awk -v k="$1=" '$1 == "spin:" { for (i = 2; i <= NF; i++) if (index($i, k) == 1) v = substr($i, length(k) + 1) } END { print (v == "" ? "-" : v) }' "$2"; }

# children_cpu_ms: user + system time of this shell's reaped children so far, in ms. Must run in
# this shell ("times" in $(...) would see the subshell's children), so it sets CHILD_MS.
CHILD_MS=0
children_cpu_ms() {
  times >"$TMP/times"
  CHILD_MS=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, k, /[ms]/)
    printf "%.0f", (u[1] * 60 + u[2] + k[1] * 60 + k[2]) * 1000 }' "$TMP/times")
}

# perf_stat FILE: "SAMPLES LOST" from perf report --stats (the aggregated block comes first).
perf_stat() {
  perf report -i "$1" --stats 2>/dev/null | awk '
    /SAMPLE events:/ && s == "" { s = $3 }
    /LOST(_SAMPLES)? events:/ { l += $3 }
    END { print (s == "" ? "-" : s), l + 0 }'
}

declare -A WALL SAMP LOST BYTES TCPU CPUMS NOTE NZ

record() { # ROW WALL_MS SAMPLES LOST BYTES TRACER_CPU_MS SPIN_CPU_MS NOTE; per-run values space-separated
  WALL[$1]="${WALL[$1]:-} $2"
  SAMP[$1]="${SAMP[$1]:-} $3"
  LOST[$1]="${LOST[$1]:-} $4"
  BYTES[$1]="${BYTES[$1]:-} $5"
  TCPU[$1]="${TCPU[$1]:-} $6"
  CPUMS[$1]="${CPUMS[$1]:-} $7"
  NOTE[$1]=$8
  printf '  %-12s wall %8s ms  samples %7s lost %s  bytes %9s  tracer cpu %6s ms  %s\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$8" >&2
}

# keep_file ROW FILE: copy FILE to $KEEP (when set), then remove it.
keep_file() {
  [ -z "$KEEP" ] || cp "$2" "$KEEP/$1.${2##*.}"
  rm -f "$2"
}

run_row() { # MODE HZ
  local mode=$1 hz=$2 row out c0 wall cpu bytes samples lost tcpu
  row=$mode-$hz
  [ "$mode" = untraced ] && row=untraced
  out=$TMP/$row.out
  case $mode in
    untraced)
      "${SPIN_CMD[@]}" >"$out" 2>&1
      record "$row" "$(field wall_ms "$out")" - - - - "$(field cpu_ms "$out")" "" ;;
    perf | perf-z)
      local data=$TMP/$row.data z=()
      [ "$mode" = perf-z ] && z=(-z)
      log "$row: perf record -e cpu-clock -g ${z[*]} -F $hz -- spin"
      children_cpu_ms; c0=$CHILD_MS
      if ! perf record -o "$data" -e cpu-clock -g "${z[@]}" -F "$hz" -- "${SPIN_CMD[@]}" >"$out" 2>&1; then
        tail -n 5 "$out" >&2
        record "$row" failed - - - - - "perf record failed"
        return 0
      fi
      children_cpu_ms
      wall=$(field wall_ms "$out")
      cpu=$(field cpu_ms "$out")
      bytes=$(stat -c %s "$data")
      read -r samples lost < <(perf_stat "$data")
      tcpu=$(awk -v a="$c0" -v b="$CHILD_MS" -v s="$cpu" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", b - a - s; else print "-" }')
      # The data section alone: the rest of the file is the header and its features, which
      # include the info and BTF of every BPF program loaded on the machine at the time, so
      # its size changes with what else runs.
      local dsize note
      dsize=$(perf report -i "$data" --header-only 2>/dev/null | awk '/^# data size *:/ { print $NF }')
      note=$(awk -v d="$dsize" -v s="$samples" -v b="$bytes" 'BEGIN {
        if (d ~ /^[0-9]+$/ && s ~ /^[0-9]+$/ && s > 0) printf "data section %d B = %.1f B/smp, rest %d B", d, d / s, b - d }')
      record "$row" "$wall" "$samples" "$lost" "$bytes" "$tcpu" "$cpu" "$note"
      keep_file "$row" "$data" ;;
    ebrec)
      if ! ebrec_available; then
        record "$row" - - - - - - "$(ebrec_skip_reason)"
        return 0
      fi
      local trace=$TMP/$row.pb.zst
      log "$row: $EBREC record -o $trace --cpu=$hz -- spin"
      children_cpu_ms; c0=$CHILD_MS
      if ! "$EBREC" record -q --bpf-stats -o "$trace" --cpu="$hz" -- "${SPIN_CMD[@]}" >"$out" 2>&1; then
        tail -n 10 "$out" >&2
        record "$row" failed - - - - - "ebrec failed"
        return 0
      fi
      children_cpu_ms
      wall=$(field wall_ms "$out")
      cpu=$(field cpu_ms "$out")
      bytes=$(stat -c %s "$trace")
      ebrec_note "$trace" "$out"
      # "ebrec:   cpu  kept N  lost N  filtered N  probe hits N"
      read -r samples lost < <(tr '\r' '\n' <"$out" | awk '$1 == "ebrec:" && $2 == "cpu" && $3 == "kept" { k = $4; l = $6 }
        END { print (k == "" ? "-" : k), (l == "" ? "-" : l) }')
      tcpu=$(awk -v a="$c0" -v b="$CHILD_MS" -v s="$cpu" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", b - a - s; else print "-" }')
      record "$row" "$wall" "$samples" "$lost" "$bytes" "$tcpu" "$cpu" "${EBREC_NOTE#trace *; }"
      keep_file "$row" "$trace" ;;
    *) die "unknown mode $mode" ;;
  esac
}

# The rows of one round, in order: untraced, then each tool at each rate.
ROWS=()
for mode in $MODES; do [ "$mode" = untraced ] && ROWS+=(untraced:0); done
for hz in $HZS; do
  for mode in $MODES; do [ "$mode" = untraced ] || ROWS+=("$mode:$hz"); done
done

busy_check
BUSY_BEFORE=$BUSY_PCT
start=$(date +%s)
for rep in $(seq 1 "$REPEAT"); do
  [ "$REPEAT" -gt 1 ] && log "round $rep of $REPEAT"
  for r in "${ROWS[@]}"; do
    mode=${r%%:*} hz=${r#*:}
    row=$mode-$hz
    [ "$mode" = untraced ] && row=untraced
    try=0
    while :; do
      saved=("${WALL[$row]:-}" "${SAMP[$row]:-}" "${LOST[$row]:-}" "${BYTES[$row]:-}" "${TCPU[$row]:-}" "${CPUMS[$row]:-}")
      wait_idle
      noise_begin
      run_row "$mode" "$hz"
      noise_end
      if is_noisy "$NOISE_PCT" && [ "$try" -lt "$NOISY_RETRIES" ]; then
        try=$((try + 1))
        log "$row: other processes used ${NOISE_PCT}% of the CPU; again ($try of $NOISY_RETRIES)"
        WALL[$row]=${saved[0]} SAMP[$row]=${saved[1]} LOST[$row]=${saved[2]}
        BYTES[$row]=${saved[3]} TCPU[$row]=${saved[4]} CPUMS[$row]=${saved[5]}
        continue
      fi
      break
    done
    NZ[$row]=$(noise_max "${NZ[$row]:--}" "$NOISE_PCT")
  done
done
end=$(date +%s)

# med ARRAY_VALUES: median of a space-separated per-run list.
med() {
  # shellcheck disable=SC2086 # the per-run list is split on purpose
  median $1
}

# pct A B: (A - B) / B in percent with a sign, or "-".
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%+.1f", 100 * (a - b) / b; else print "-" }'; }

echo
echo "spin ($THREADS threads x $OPS ops, 2:1 hot:cold), $(nproc) cores, kernel $(uname -r), $(date -u +%F), CPU ${BUSY_BEFORE}% busy before"
echo "Medians of $REPEAT run(s). wall = spin's own wall time; cpu = spin's CPU time (user + system, which includes the"
echo "sampling interrupts and BPF programs run on its CPUs); ovh = against untraced; tracer = the tool's own CPU ms;"
echo "exp% = samples / (spin CPU s x HZ); B/smp = output file bytes / samples; x perf-z = B/smp / perf -z's at the same rate"
base=$(med "${WALL[untraced]:-}")
basecpu=$(med "${CPUMS[untraced]:-}")
fmt='%-12s | %8s %7s | %8s %7s | %7s | %7s %5s %5s | %9s %7s %8s | %6s  %s\n'
# shellcheck disable=SC2059 # the format is shared by the header and the rows
printf "$fmt" row "wall ms" "ovh %" "cpu ms" "ovh %" "tracer" samples lost "exp%" bytes "B/smp" "x perf-z" others notes
for r in "${ROWS[@]}"; do
  mode=${r%%:*} hz=${r#*:}
  row=$mode-$hz
  [ "$mode" = untraced ] && row=untraced
  wall=$(med "${WALL[$row]:-}")
  samples=$(med "${SAMP[$row]:-}")
  bytes=$(med "${BYTES[$row]:-}")
  cpu=$(med "${CPUMS[$row]:-}")
  tcpu=$(med "${TCPU[$row]:-}")
  ovh=- covh=-
  if [ "$row" != untraced ]; then
    ovh=$(pct "$wall" "$base")
    covh=$(pct "$cpu" "$basecpu")
  fi
  exp=$(awk -v s="$samples" -v c="$cpu" -v hz="$hz" 'BEGIN { if (s ~ /^[0-9]+$/ && c ~ /^[0-9.]+$/ && c * hz > 0) printf "%.0f", 100 * s / (c / 1000 * hz); else print "-" }')
  bps=$(awk -v b="$bytes" -v s="$samples" 'BEGIN { if (b ~ /^[0-9]+$/ && s ~ /^[0-9]+$/ && s > 0) printf "%.1f", b / s; else print "-" }')
  zbytes=$(med "${BYTES[perf-z-$hz]:-}") zsamp=$(med "${SAMP[perf-z-$hz]:-}")
  zbps=$(awk -v b="$zbytes" -v s="$zsamp" 'BEGIN { if (b ~ /^[0-9]+$/ && s ~ /^[0-9]+$/ && s > 0) printf "%.3f", b / s; else print "-" }')
  nz=${NZ[$row]:--}
  [ "$nz" = - ] || nz="$nz%"
  # shellcheck disable=SC2059
  printf "$fmt" "$row" "$wall" "$ovh" "$cpu" "$covh" "$tcpu" \
    "$samples" "$(med "${LOST[$row]:-}")" "$exp" "$bytes" "$bps" "$(ratio "$bps" "$zbps")" "$nz" "${NOTE[$row]:-}"
done
# Marginal bytes per sample between the lowest and the highest rate.
# shellcheck disable=SC2086 # a list on purpose
lo=$(printf '%s\n' $HZS | sort -n | head -n1)
# shellcheck disable=SC2086
hi=$(printf '%s\n' $HZS | sort -n | tail -n1)
if [ "$lo" != "$hi" ]; then
  line="marginal bytes per sample ($lo -> $hi Hz):"
  for mode in $MODES; do
    [ "$mode" = untraced ] && continue
    m=$(awk -v b1="$(med "${BYTES[$mode-$lo]:-}")" -v b2="$(med "${BYTES[$mode-$hi]:-}")" \
      -v s1="$(med "${SAMP[$mode-$lo]:-}")" -v s2="$(med "${SAMP[$mode-$hi]:-}")" 'BEGIN {
      if (b1 b2 s1 s2 ~ /^[0-9]+$/ && s2 > s1) printf "%.1f", (b2 - b1) / (s2 - s1); else print "-" }')
    line+=" $mode $m;"
  done
  echo "${line%;}"
fi
echo "(rows took $((end - start)) s; others = most CPU used by other processes during a run of the row,"
echo " % of all cores: above ~5% the row is noisy)"
