#!/usr/bin/env bash
# agent.sh: ebrec agent soak (issue 19, "Benchmark and soak"): the agent on a busy leveldb
# db_bench for DURATION with a push every window (--window 10) to a Pyroscope-API server on
# 127.0.0.1 (ebrec/tests/e2e/conformance/pyroscope.py: it validates and stores every push as
# Pyroscope's /ingest would take it), the backend down for OUTAGE seconds in the middle.
#
# Workload: db_bench readwhilewriting (--threads=2) back to back in one process on a DB filled
# once, the process restarted every RESTART_S (300 s), so the agent (--comm '^db_bench$')
# follows a new target now and then (ebrec/tests/e2e/agent.rs covers fast churn).
# Families: --cpu --offcpu --lock (the continuous-profiling kinds).
#
# Printed every SAMPLE_S (default 60 s) and summed at the end, phase by phase (before, during and
# after the outage): agent RSS (VmRSS, MiB: min, max, and the least-squares slope in MiB per
# minute: the aim is flat, also while the backend is down), agent CPU (user+system over the
# phase, % of one core), pushes ok and failed attempts, windows dropped (from the agent's
# /metrics), push latency (Pyroscope request stored minus the window's end, p50/p99/max, s), and
# the recovery (seconds from the backend's return to its first stored push).
#
# Usage: bench/scripts/agent.sh         (as root)
#   EBREC=/path/to/ebrec   (default target/release/ebrec)
#   DURATION=3600 OUTAGE=300 OUTAGE_AT=   (default OUTAGE_AT = (DURATION - OUTAGE) / 2)
#   SAMPLE_S=60 NUM=200000 READS=5000 RESTART_S=300 KEEP=DIR (keep the windows, logs, pushes)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
need_root
EBREC=${EBREC:-$root/target/release/ebrec}
[ -x "$EBREC" ] || die "no ebrec at $EBREC (cargo build --release -p ebrec)"
DURATION=${DURATION:-3600}
OUTAGE=${OUTAGE:-300}
OUTAGE_AT=${OUTAGE_AT:-$(((DURATION - OUTAGE) / 2))}
SAMPLE_S=${SAMPLE_S:-60}
RESTART_S=${RESTART_S:-300}
NUM=${NUM:-200000}
READS=${READS:-5000}
LEVELDB_CACHE=$BENCH_CACHE/leveldb
DB_BENCH=$LEVELDB_CACHE/build/db_bench
build_db_bench

work=${KEEP:-$(mktemp -d /var/tmp/ebtrace-agent-soak.XXXX)}
mkdir -p "$work/pushes" "$work/windows"
log "work dir $work"
db=$work/db
"$DB_BENCH" --db="$db" --benchmarks=fillrandom,compact --num="$NUM" >/dev/null

port=$((20000 + RANDOM % 10000))
mport=$((port + 1))
server=
starts=0
start_server() {
  # Each start stores into its own directory (the server numbers its requests from 1).
  starts=$((starts + 1))
  mkdir -p "$work/pushes/$starts"
  python3 "$root/ebrec/tests/e2e/conformance/pyroscope.py" --port "$port" --out "$work/pushes/$starts" \
    >>"$work/server.log" 2>&1 &
  server=$!
}
stop_server() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=; }
loop_pid=
agent=
cleanup() {
  stop_server
  [ -n "$loop_pid" ] && kill "$loop_pid" 2>/dev/null || true
  pkill -f "$DB_BENCH --db=$db" 2>/dev/null || true
  [ -n "$agent" ] && kill "$agent" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
start_server
sleep 1

# A long-running db_bench (readwhilewriting back to back in one process), restarted every
# RESTART_S: a service with the odd restart, each new process found by --comm.
benches=$(printf 'readwhilewriting,%.0s' $(seq 1 2000))
(
  while :; do
    timeout "$RESTART_S" "$DB_BENCH" --db="$db" --use_existing_db=1 --benchmarks="${benches%,}" \
      --threads=2 --num="$NUM" --reads="$READS" >/dev/null 2>&1 || true
  done
) &
loop_pid=$!

"$EBREC" agent --cpu --offcpu --lock --comm '^db_bench$' --window 10 --keep 6 \
  --push "pyroscope+http://127.0.0.1:$port" --service db_bench --metrics "127.0.0.1:$mport" \
  --duration "$DURATION" -o "$work/windows/agent.pb.zst" 2>"$work/agent.log" &
agent=$!
wait_for_line "$work/agent.log" "recording to" 60 "$agent" || die "the agent did not start: $(tail -3 "$work/agent.log")"
t0=$(date +%s)
hz=$(getconf CLK_TCK)

metric() { # NAME [LABEL-MATCH]: the sum of a metric's samples on the agent's /metrics
  curl -s "http://127.0.0.1:$mport/metrics" | awk -v n="$1" -v m="${2:-}" \
    '$1 ~ "^"n"({|$)" && index($1, m) { s += $2 } END { printf "%d", s }'
}
samples=$work/samples.tsv
echo -e "t\tphase\trss_kib\tcpu_ticks\tpushed\tfailed\tdropped" >"$samples"
phase=before
outage_done=0
back_at=
while kill -0 "$agent" 2>/dev/null; do
  now=$(($(date +%s) - t0))
  if [ "$phase" = before ] && [ "$now" -ge "$OUTAGE_AT" ]; then
    log "backend down for ${OUTAGE}s"
    stop_server
    phase=during
  elif [ "$phase" = during ] && [ "$now" -ge $((OUTAGE_AT + OUTAGE)) ]; then
    log "backend back"
    start_server
    back_at=$(date +%s.%N)
    phase=after
  fi
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status" 2>/dev/null || echo 0)
  cpu=$(awk '{print $14 + $15}' "/proc/$agent/stat" 2>/dev/null || echo 0)
  echo -e "$now\t$phase\t$rss\t$cpu\t$(metric ebrec_pushes_total result=\"ok\")\t$(metric ebrec_pushes_total result=\"error\")\t$(metric ebrec_push_dropped_total)" >>"$samples"
  if [ $((now % SAMPLE_S)) -lt 10 ]; then
    tail -n1 "$samples" >&2
  fi
  sleep 10
done
wait "$agent" || log "the agent exited with $?"

python3 - "$samples" "$work/pushes" "$hz" "${back_at:-0}" <<'PY'
import json, os, sys, statistics
samples, pushes, hz, back_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
rows = [l.rstrip("\n").split("\t") for l in open(samples)][1:]
rows = [(int(t), p, int(r), int(c), int(o), int(f), int(d)) for t, p, r, c, o, f, d in rows]
def slope(xs, ys):
    n = len(xs)
    if n < 2: return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0
print("| phase | s | RSS MiB min-max | RSS slope MiB/min | agent CPU % of a core | pushes ok | failed attempts | windows dropped |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for ph in ("before", "during", "after"):
    r = [x for x in rows if x[1] == ph]
    if len(r) < 2: continue
    span = r[-1][0] - r[0][0]
    rss = [x[2] / 1024 for x in r]
    cpu = (r[-1][3] - r[0][3]) / hz / max(span, 1) * 100
    print(f"| {ph} | {span} | {min(rss):.1f}-{max(rss):.1f} | {slope([x[0] / 60 for x in r], rss):+.2f} | {cpu:.2f} | {r[-1][4] - r[0][4]} | {r[-1][5] - r[0][5]} | {r[-1][6] - r[0][6]} |")
lat, first_after = [], None
for d, _, names in os.walk(pushes):
  for n in names:
    if not n.endswith(".json"): continue
    p = os.path.join(d, n)
    try: q = json.load(open(p))["query"]
    except Exception: continue
    stored = os.path.getmtime(p)
    lat.append(stored - int(q["until"]))
    if back_at and stored >= back_at and (first_after is None or stored < first_after): first_after = stored
if lat:
    lat.sort()
    print(f"\npushes stored {len(lat)}; latency from the window's end (s): p50 {statistics.median(lat):.2f}, p99 {lat[int(len(lat) * 0.99) - 1]:.2f}, max {lat[-1]:.2f}")
if first_after:
    print(f"recovery: the first push stored {first_after - back_at:.1f} s after the backend came back")
PY
