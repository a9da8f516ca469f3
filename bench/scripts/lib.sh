# Shared helpers for the bench scripts (sourced, not run).
# shellcheck shell=bash

BENCH_CACHE=${EBTRACE_BENCH_CACHE:-/var/tmp/ebtrace-bench}
LIBC=${LIBC:-/lib/x86_64-linux-gnu/libc.so.6}
APT_UPDATED=0
APT_LOG=${APT_LOG:-$BENCH_CACHE/apt.log}

# run_apt ARGS...: apt-get with its output appended to $APT_LOG; shows the tail on failure.
run_apt() {
  mkdir -p "$(dirname "$APT_LOG")"
  log "apt-get $* (output in $APT_LOG)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get "$@" >>"$APT_LOG" 2>&1; then
    tail -n 30 "$APT_LOG" >&2
    die "apt-get $* failed"
  fi
}

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

die() { log "error: $*"; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "run as root (eBPF tracing needs it)"; }

apt_update_once() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    run_apt update
    APT_UPDATED=1
  fi
}

# apt_install PKG...: install the packages that are not installed yet.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update_once
  run_apt install -y --no-install-recommends "${missing[@]}"
}

# bpftrace's tracepoint probes look up event ids in tracefs; mount it only if it is missing.
ensure_tracefs() {
  if [ ! -e /sys/kernel/tracing/events ]; then
    log "mounting tracefs on /sys/kernel/tracing"
    mount -t tracefs tracefs /sys/kernel/tracing
  fi
}

# EBREC from the environment; prints nothing and returns 1 when unusable.
ebrec_available() {
  [ -n "${EBREC:-}" ] && [ -x "${EBREC}" ]
}

# ebrec_note TRACE LOG: sets EBREC_NOTE ("trace SIZE; alloc kept N lost N; ...; BPF N ns/run")
# and EBREC_EVENTS (probe hits of the first event kind), from the summary ebrec prints at exit:
#   ebrec:   alloc  kept    100001  lost       0  filtered         0  probe hits     100001
#   ebrec:   BPF run time 168.9 ms for 300005 program runs (563 ns per run; ...
ebrec_note() {
  local size=- summary
  [ -f "$1" ] && size=$(awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1fKiB", b / 1024 }')
  summary=$(tr '\r' '\n' <"$2" | awk '
    /^ebrec: +[a-z_-]+ +kept +[0-9]+ +lost +[0-9]+/ {
      out = out sprintf("; %s kept %s lost %s", $2, $4, $6)
      if (hits == "") for (i = 1; i < NF; i++) if ($i == "hits") hits = $(i + 1)
    }
    /^ebrec: +BPF run time/ { if (match($0, /[0-9]+ ns per run/)) out = out "; BPF " substr($0, RSTART, RLENGTH - 11) " ns/run" }
    END { print (hits == "" ? "-" : hits) "|" out }')
  # shellcheck disable=SC2034 # read by the scripts
  EBREC_EVENTS=${summary%%|*}
  # shellcheck disable=SC2034
  EBREC_NOTE="trace $size${summary#*|}"
}


ebrec_skip_reason() {
  if [ -z "${EBREC:-}" ]; then echo "ebrec: skipped (EBREC not set)";
  else echo "ebrec: skipped (EBREC=$EBREC is not an executable file)"; fi
}

# ratio A B -> A/B with 2 decimals, or "-" when either is not a number.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'
}

# wait_for_line FILE REGEX TIMEOUT_S PID: wait until FILE has a line matching REGEX.
# Fails if PID (the tracer) exits first or the timeout passes.
wait_for_line() {
  local file=$1 re=$2 timeout=$3 pid=$4 i=0
  while ! grep -Eq "$re" "$file" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
    i=$((i + 1))
    [ "$i" -ge $((timeout * 10)) ] && return 1
  done
  return 0
}

# stop_pid PID [SIG]: SIG (default INT), then SIGTERM/SIGKILL if it does not exit; then reap it.
stop_pid() {
  local pid=$1 sig=${2:-INT} i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -"$sig" "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; sleep 1; fi
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

# Background processes started by a script are listed in BG_PIDS ("PID" or "PID:SIGNAL") and
# stopped by cleanup.
BG_PIDS=()
bg_cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do stop_pid "${p%%:*}" "$( [ "${p#*:}" != "$p" ] && echo "${p#*:}" || echo INT)"; done
  BG_PIDS=()
}

# busy_check: share of CPU time used over 1 s (all cores), as a percentage; warns above 15%.
# Other work on the machine (a cargo build...) skews every row, mostly the traced ones.
BUSY_PCT=0
busy_check() {
  local a b
  read -r -a a </proc/stat
  sleep 1
  read -r -a b </proc/stat
  local idle=$(((b[4] + b[5]) - (a[4] + a[5]))) total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  [ "$total" -gt 0 ] || total=1
  BUSY_PCT=$((100 - 100 * idle / total))
  if [ "$BUSY_PCT" -gt 15 ] && [ "${1:-}" != quiet ]; then
    log "warning: the machine is ${BUSY_PCT}% busy before the run; the numbers will be noisy"
    top -b -n2 -d0.5 -w 120 2>/dev/null | awk '/^top -/ { n++ } n == 2 && /^ *[0-9]+ / && $9 > 1 { print "  " $9 "% " $12 }' |
      head -n 3 >&2 || true
  fi
}

# median V...: median of the numeric values; the first value as is when none is numeric
# (so "-" and "failed" pass through).
median() {
  local nums
  nums=$(printf '%s\n' "$@" | { grep -E '^[0-9]+(\.[0-9]+)?$' || true; } | sort -g)
  if [ -z "$nums" ]; then echo "${1:--}"; return 0; fi
  awk '{ v[n++] = $1 } END {
    if (n % 2) { print v[int(n / 2)]; exit }
    m = sprintf("%.3f", (v[n / 2 - 1] + v[n / 2]) / 2); sub(/\.?0+$/, "", m); print m }' <<<"$nums"
}

# wait_idle: with WAIT_IDLE_S > 0, wait up to that many seconds until the machine has been idle
# (<= 15% busy) for 3 one-second checks in a row. The scripts call it before each row.
wait_idle() {
  local limit=${WAIT_IDLE_S:-0} t0=$SECONDS calm=0
  [ "$limit" -gt 0 ] || return 0
  while [ "$calm" -lt 3 ]; do
    busy_check quiet
    if [ "$BUSY_PCT" -le 15 ]; then calm=$((calm + 1)); else calm=0; fi
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      log "still busy (${BUSY_PCT}%) after ${limit}s; going on"
      return 0
    fi
  done
  [ $((SECONDS - t0)) -le 4 ] || log "machine idle after $((SECONDS - t0))s"
}

# is_noisy PCT: true when other processes used more than NOISE_LIMIT% (default 10) of the CPU.
is_noisy() { [ "$1" != - ] && [ "$1" -gt "${NOISE_LIMIT:-10}" ]; }

# noise_begin / noise_end: share of the machine's CPU used by processes other than this script's
# children while a row ran, in percent (sets NOISE_PCT). Works from /proc/stat and the shell's
# "times"; a row with more than a few percent of other work is suspect.
_NOISE_FILE=""
# _noise_snap: sets _NOISE_SNAP to "busy_jiffies children_cpu_seconds wall_seconds". It must run
# in this shell, not in $(...): "times" in a subshell does not see this shell's children.
_noise_snap() {
  local s busy=0 i
  read -r -a s </proc/stat
  for i in 1 2 3 6 7 8; do busy=$((busy + s[i])); done
  [ -n "$_NOISE_FILE" ] || _NOISE_FILE=$(mktemp "${TMPDIR:-/tmp}/ebtrace-times.XXXXXX")
  times >"$_NOISE_FILE"
  _NOISE_SNAP=$(awk -v busy="$busy" -v now="$(date +%s.%N)" 'NR == 2 {
      split($1, u, /[ms]/); split($2, k, /[ms]/)
      printf "%s %.3f %s\n", busy, u[1] * 60 + u[2] + k[1] * 60 + k[2], now }' "$_NOISE_FILE")
}
noise_begin() { _noise_snap; _NOISE_START=$_NOISE_SNAP; }
# noise_max A B: the larger of two NOISE_PCT values ("-" = unknown).
noise_max() {
  if [ "${1:--}" = - ]; then echo "${2:--}"; elif [ "${2:--}" = - ]; then echo "$1";
  elif [ "$1" -gt "$2" ]; then echo "$1"; else echo "$2"; fi
}
noise_end() {
  local hz
  _noise_snap
  hz=$(getconf CLK_TCK)
  # shellcheck disable=SC2034 # read by the scripts
  NOISE_PCT=$(awk -v a="$_NOISE_START" -v b="$_NOISE_SNAP" -v hz="$hz" -v ncpu="$(nproc)" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    wall = y[3] - x[3]; if (wall < 0.5) { print "-"; exit }  # too short for 10 ms ticks
    other = (y[1] - x[1]) / hz - (y[2] - x[2])
    p = 100 * other / (wall * ncpu); if (p < 0) p = 0; if (p > 100) p = 100
    printf "%.0f", p }')
}
noise_cleanup() { [ -z "$_NOISE_FILE" ] || rm -f "$_NOISE_FILE"; }

# bcc_headers: points bcc at kernel headers (BCC_KERNEL_SOURCE) when the running kernel has no
# build tree: a merged copy of Debian's linux-headers-*-common and -amd64 trees, made once in
# the cache dir. Returns 1 and sets BCC_WHY when there are none.
bcc_headers() {
  if [ -n "${BCC_KERNEL_SOURCE:-}" ] || [ -e "/lib/modules/$(uname -r)/build" ]; then
    return 0
  fi
  # Debian splits headers into -common and -amd64 trees; bcc wants one tree.
  local amd64 common merged
  # shellcheck disable=SC2012 # the names are Debian's
  amd64=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1)
  common=${amd64%-amd64}-common
  if [ -z "$amd64" ] || [ ! -d "$common" ]; then
    BCC_WHY="no /usr/src/linux-headers-*-amd64 and -common trees"
    return 1
  fi
  merged=$BENCH_CACHE/kheaders-$(basename "$amd64")
  if [ ! -f "$merged/.complete" ]; then
    log "merging $common and $amd64 into $merged for bcc"
    rm -rf "$merged"
    mkdir -p "$merged"
    cp -a "$common/." "$merged/"
    cp -a "$amd64/." "$merged/"
    touch "$merged/.complete"
  fi
  export BCC_KERNEL_SOURCE=$merged
}

# leveldb's db_bench, built once from Debian source into $LEVELDB_CACHE (leveldb.sh, leaks.sh).
LEVELDB_CACHE=$BENCH_CACHE/leveldb
DB_BENCH=$LEVELDB_CACHE/build/db_bench

# enable_deb_src: adds "deb-src" to the Types: line of the main archive's stanza (not -security)
# in /etc/apt/sources.list.d/debian.sources (backup: debian.sources.ebtrace-bak), then apt-get
# update. Nothing to do when there is a deb-src entry already.
enable_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources tmp
  if [ -f "$f" ]; then
    if awk 'BEGIN{RS=""} $0 !~ /-security/ && $0 ~ /Types:[^\n]*deb-src/ {found=1} END{exit !found}' "$f"; then
      return 0
    fi
    log "enabling deb-src in $f (backup: $f.ebtrace-bak)"
    [ -e "$f.ebtrace-bak" ] || cp "$f" "$f.ebtrace-bak"
    tmp=$(mktemp)
    awk 'BEGIN{RS=""; ORS="\n\n"}
         { if ($0 !~ /-security/ && $0 !~ /Types:[^\n]*deb-src/) sub(/Types: deb/, "Types: deb deb-src"); print }' \
      "$f" >"$tmp"
    cat "$tmp" >"$f"
    rm -f "$tmp"
  elif ! grep -rqs '^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    die "no deb-src entry and no $f to add one to; add a deb-src line for the main archive"
  else
    return 0
  fi
  APT_UPDATED=0
  apt_update_once
}

# build_db_bench: $DB_BENCH, once (later calls return at once): deb-src, apt-get build-dep
# leveldb, apt-get source leveldb (1.23) into $LEVELDB_CACHE/src, then db_bench alone with
# cmake, RelWithDebInfo and -fno-omit-frame-pointer (log: $LEVELDB_CACHE/build.log).
build_db_bench() {
  if [ -x "$DB_BENCH" ]; then
    return 0
  fi
  log "building db_bench into $LEVELDB_CACHE (once)"
  mkdir -p "$LEVELDB_CACHE"
  enable_deb_src
  apt_install dpkg-dev cmake g++ libsnappy-dev
  if ! ls -d "$LEVELDB_CACHE"/src/leveldb-*/ >/dev/null 2>&1; then
    apt_update_once
    run_apt build-dep -y leveldb
    rm -rf "$LEVELDB_CACHE/src"
    mkdir -p "$LEVELDB_CACHE/src"
    (cd "$LEVELDB_CACHE/src" && run_apt source leveldb)
  fi
  local src
  src=$(ls -d "$LEVELDB_CACHE"/src/leveldb-*/ | head -n1)
  rm -rf "$LEVELDB_CACHE/build"
  mkdir -p "$LEVELDB_CACHE/build"
  (cd "$LEVELDB_CACHE/build" &&
    cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-fno-omit-frame-pointer \
      -DCMAKE_C_FLAGS=-fno-omit-frame-pointer -DLEVELDB_BUILD_TESTS=OFF \
      -DLEVELDB_BUILD_BENCHMARKS=ON "$src" >"$LEVELDB_CACHE/build.log" 2>&1 &&
    cmake --build . --target db_bench -j "$(nproc)" >>"$LEVELDB_CACHE/build.log" 2>&1) ||
    { tail -n 30 "$LEVELDB_CACHE/build.log" >&2; die "db_bench build failed (log: $LEVELDB_CACHE/build.log)"; }
  [ -x "$DB_BENCH" ] || die "db_bench was not built"
}
