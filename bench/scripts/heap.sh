#!/usr/bin/env bash
# heap.sh: heap profiling of every allocation against heaptrack, on leveldb's db_bench
# fillrandom,readrandom (Debian source), in one run (issue 32).
#
# Rows, each db_bench on a fresh empty DB, one after the other:
#   untraced                     db_bench alone
#   heaptrack                    heaptrack -o H db_bench ... (LD_PRELOAD)
#   ebrec --alloc                the uprobe path
#   ebrec preload                ebrec --alloc --alloc-sampler preload --sample-bytes 1 (every
#                                allocation, in process: the shim walks the stacks and writes to
#                                ebrec's channel); allocations kept and lost from ebrec's exit
#                                summary
#   ebrec preload, probe sites   the same with EBTRACE_PRELOAD_PROBES=1: the shim calls its probe
#                                sites, the stacks are walked in the kernel (the way before the
#                                channel, and that of --stack-mode fp and dwarf)
# then the analysis, wall time and peak RSS (/usr/bin/time): heaptrack_print (everything, its
# defaults) on heaptrack's file against ebsym on the preload trace: symbolize (ebsym T -o S), then
# `ebsym heap`, `ebsym leaks` and `ebsym report` on the symbolized trace. Last, heaptrack_print's
# totals ("calls to allocation functions", "temporary memory allocations", "peak heap memory
# consumption", "total memory leaked" and "suppressed leaks", printed with 4 significant digits)
# beside `ebsym heap --json`'s totals (calls, temporary, peak_bytes, leaked_bytes + held_bytes),
# with their ratio.
#
# Usage: bench/scripts/heap.sh            (as root)
#   PROGRAM=db_bench          or ninja: ninja 1.11 (Debian source, bench/scripts/corpus.sh)
#                             printing the commands of a generated manifest (`ninja -t
#                             commands`): one thread, the same allocations at every run, so
#                             the totals compare like for like (db_bench's depend on how far
#                             its background compaction got)
#   NUM=300000                db_bench --num (fillrandom writes and readrandom reads)
#   BENCHMARKS=fillrandom,readrandom
#   THREADS=1                 db_bench --threads (each thread does NUM operations); e.g.
#                             THREADS=16 NUM=20000: a multi-threaded allocator load
#   OBJECTS=100000            ninja: the manifest's objects (100 per library)
#   EBREC=target/release/ebrec, EBSYM=target/release/ebsym (of this checkout by default; build
#                             them with cargo build --release -p ebrec -p ebtrace-ebsym)
#   EBTRACE_BENCH_CACHE=DIR   where db_bench is built once (default /var/tmp/ebtrace-bench)
#   KEEP=DIR                  keep heaptrack's file, the traces, the reports and logs there
#   RESULTS_DIR=target/ebtrace-artifacts/bench   where the table is written (heap-DATE.txt)
#   WAIT_IDLE_S=0             before each row, wait up to this long for the machine to be idle
#
# First run: builds db_bench as leveldb.sh does (build_db_bench in lib.sh: deb-src, build-dep,
# apt-get source leveldb 1.23, RelWithDebInfo, -fno-omit-frame-pointer) and installs heaptrack,
# time and python3 with apt. Later runs take about a minute at NUM=300000.
#
# Measured here on 2026-12-04 16:00 UTC (Debian 12, 2 vCPUs, idle before, glibc 2.36, gcc 12,
# heaptrack 1.4.0), release ebrec/ebsym of c321765; earlier runs and the differences are
# explained in docs/benchmarks.md:
#   PROGRAM=ninja OBJECTS=100000 (ninja 1.11 -t commands of a manifest of 100000 objects)
#   run                                            wall s   x untr.  notes
#   untraced                                         0.56      1.00
#   heaptrack                                        2.56      4.57  data 32K
#   ebrec --alloc (uprobes)                         20.53     36.66  alloc kept 4718001 lost 0; free kept 2775054 lost 894372
#   ebrec --alloc preload --sample-bytes 1           2.13      3.80  alloc kept 4718001 lost 0; free kept 3629863 lost 0
#     the same, probe sites (stacks in the kernel)  12.88     23.00
#   heaptrack_print (everything)                     0.54        55
#   ebsym symbolize (preload trace)                  5.34       121
#   ebsym heap (symbolized)                          0.68       138
#   ebsym leaks (symbolized)                         0.58       127
#   ebsym report (symbolized)                        2.47       148
#   allocator calls                                   4718001      4718001   1.0000
#   temporary allocations                              178286       178285   1.0000
#   peak heap bytes                                  73750000     73750844   1.0000
#   leaked + suppressed/held bytes                   62570000     62639381   1.0011
#
#   PROGRAM=db_bench (fillrandom,readrandom --num=300000 --threads=1)
#   untraced                                         1.76      1.00
#   heaptrack                                        3.20      1.82  data 1.6M
#   ebrec --alloc (uprobes)                         12.32      7.00  alloc kept 2123521 lost 0; free kept 2123510 lost 0
#   ebrec --alloc preload --sample-bytes 1           2.46      1.40  alloc kept 2179951 lost 0; free kept 2179939 lost 0
#     the same, probe sites (stacks in the kernel)   8.63      4.90
#   heaptrack_print (everything)                     0.42        56
#   ebsym symbolize (preload trace)                  4.05       116
#   ebsym heap (symbolized)                          0.40        61
#   ebsym leaks (symbolized)                         0.32        61
#   ebsym report (symbolized)                        1.90        92
#   allocator calls                                   2151029      2179951   1.0134
#   temporary allocations                              449627       449446   0.9996
#   peak heap bytes                                  12310000     12317077   1.0006
#   (db_bench's calls differ by run: how far its background compaction got)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

PROGRAM=${PROGRAM:-db_bench}
NUM=${NUM:-300000}
BENCHMARKS=${BENCHMARKS:-fillrandom,readrandom}
THREADS=${THREADS:-1}
OBJECTS=${OBJECTS:-100000}
repo=$(cd "$here/../.." && pwd)
EBREC=${EBREC:-$repo/target/release/ebrec}
EBSYM=${EBSYM:-$repo/target/release/ebsym}
KEEP=${KEEP:-}
RESULTS_DIR=${RESULTS_DIR:-$repo/target/ebtrace-artifacts/bench}

need_root
for b in "$EBREC" "$EBSYM"; do
  [ -x "$b" ] || die "$b is missing: cargo build --release -p ebrec -p ebtrace-ebsym (or set EBREC/EBSYM)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-heap.XXXXXX")
cleanup() {
  bg_cleanup
  if [ -n "$KEEP" ] && [ -d "$TMP" ]; then
    mkdir -p "$KEEP" && cp -a "$TMP"/. "$KEEP"/ 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install heaptrack time python3
case "$PROGRAM" in
  db_bench)
    build_db_bench
    what="leveldb db_bench $BENCHMARKS --num=$NUM --threads=$THREADS"
    ;;
  ninja)
    CORPUS=ninja "$here/corpus.sh" >/dev/null
    NINJA=${EBTRACE_BENCH_CACHE:-/var/tmp/ebtrace-bench}/corpus/ninja/build/ninja
    [ -x "$NINJA" ] || die "ninja was not built (bench/scripts/corpus.sh)"
    mkdir -p "$TMP/nj"
    python3 - "$TMP/nj/build.ninja" "$OBJECTS" <<'PY'
import sys
libs = max(1, int(sys.argv[2]) // 100)
with open(sys.argv[1], "w") as f:
    f.write("rule cc\n  command = g++ -O2 -c $in -o $out\nrule ar\n  command = ar rcs $out $in\n"
            "rule link\n  command = g++ -o $out $in\n")
    for l in range(libs):
        objs = [f"obj/lib{l}/f{i}.o" for i in range(100)]
        for i, o in enumerate(objs):
            f.write(f"build {o}: cc src/lib{l}/f{i}.cc | include/h{l}.h include/h{(l + 1) % libs}.h include/common.h\n")
        f.write(f"build lib/lib{l}.a: ar {' '.join(objs)}\n")
    f.write("build app: link " + " ".join(f"lib/lib{l}.a" for l in range(libs)) + "\ndefault app\n")
PY
    what="ninja 1.11 -t commands of a manifest of $OBJECTS objects"
    ;;
  *) die "PROGRAM is db_bench or ninja, not '$PROGRAM'" ;;
esac

# cmd TAG: the program's command line in the array `cmd` (db_bench: on a fresh DB of its own)
cmd() {
  case "$PROGRAM" in
    db_bench) cmd=("$DB_BENCH" --db="$TMP/db-$1" --num="$NUM" --benchmarks="$BENCHMARKS" --threads="$THREADS") ;;
    ninja) cmd=("$NINJA" -C "$TMP/nj" -t commands) ;;
  esac
}

# timed NAME CMD...: runs CMD with stdout in $TMP/NAME.out and stderr in $TMP/NAME.log; wall
# seconds and peak RSS (KiB) from /usr/bin/time in $TMP/NAME.time ("WALL RSS").
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

busy_check
BUSY_BEFORE=$BUSY_PCT
t_start=$SECONDS

cmd untraced
timed untraced "${cmd[@]}"
rm -rf "$TMP/db-untraced"
cmd ht
timed heaptrack heaptrack -o "$TMP/ht" "${cmd[@]}"
rm -rf "$TMP/db-ht"
ht_file=$(ls "$TMP"/ht.* 2>/dev/null | head -n1)
[ -n "$ht_file" ] || die "heaptrack wrote no data file (log: $TMP/heaptrack.log)"
cmd up
timed ebrec-uprobe "$EBREC" record --alloc -o "$TMP/up.pb.zst" -- "${cmd[@]}"
rm -rf "$TMP/db-up"
cmd pre
timed ebrec-preload "$EBREC" record --alloc --alloc-sampler preload --sample-bytes 1 -o "$TMP/t.pb.zst" -- \
  "${cmd[@]}"
rm -rf "$TMP/db-pre"
cmd prp
timed ebrec-preload-probes env EBTRACE_PRELOAD_PROBES=1 "$EBREC" record --alloc --alloc-sampler preload \
  --sample-bytes 1 -o "$TMP/p.pb.zst" -- "${cmd[@]}"
rm -rf "$TMP/db-prp" "$TMP/p.pb.zst"

timed heaptrack_print heaptrack_print -f "$ht_file"
timed symbolize "$EBSYM" "$TMP/t.pb.zst" -o "$TMP/t.sym.pb.zst"
timed heap "$EBSYM" heap "$TMP/t.sym.pb.zst" --json
timed leaks "$EBSYM" leaks "$TMP/t.sym.pb.zst"
timed report "$EBSYM" report "$TMP/t.sym.pb.zst" -o "$TMP/report.html"
run_s=$((SECONDS - t_start))

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/heap-$(date -u +%Y%m%d-%H%M).txt
{
  echo "$what, $(heaptrack --version 2>/dev/null | head -n1), $(nproc) cores, kernel $(uname -r), $(date -u '+%F %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo -), CPU ${BUSY_BEFORE}% busy before, run ${run_s}s"
  printf '%-44s %8s %9s  %s\n' "run" "wall s" "x untr." "notes"
  u=$(wall untraced)
  printf '%-44s %8s %9s  %s\n' "untraced" "$u" "1.00" ""
  printf '%-44s %8s %9s  %s\n' "heaptrack" "$(wall heaptrack)" "$(ratio "$(wall heaptrack)" "$u")" \
    "data $(du -h "$ht_file" | cut -f1)"
  ebrec_note "$TMP/up.pb.zst" "$TMP/ebrec-uprobe.log"
  printf '%-44s %8s %9s  %s\n' "ebrec --alloc (uprobes)" "$(wall ebrec-uprobe)" \
    "$(ratio "$(wall ebrec-uprobe)" "$u")" "$EBREC_NOTE"
  ebrec_note "$TMP/t.pb.zst" "$TMP/ebrec-preload.log"
  printf '%-44s %8s %9s  %s\n' "ebrec --alloc preload --sample-bytes 1" "$(wall ebrec-preload)" \
    "$(ratio "$(wall ebrec-preload)" "$u")" "$EBREC_NOTE"
  ebrec_note "" "$TMP/ebrec-preload-probes.log"
  printf '%-44s %8s %9s  %s\n' "  the same, probe sites (stacks in the kernel)" "$(wall ebrec-preload-probes)" \
    "$(ratio "$(wall ebrec-preload-probes)" "$u")" "$EBREC_NOTE"
  echo
  printf '%-44s %8s %9s\n' "analysis" "wall s" "peak RSS MB"
  printf '%-44s %8s %9s\n' "heaptrack_print (everything)" "$(wall heaptrack_print)" "$(rss_mb heaptrack_print)"
  printf '%-44s %8s %9s\n' "ebsym symbolize (preload trace)" "$(wall symbolize)" "$(rss_mb symbolize)"
  for r in heap leaks report; do
    printf '%-44s %8s %9s\n' "ebsym $r (symbolized)" "$(wall "$r")" "$(rss_mb "$r")"
  done
  echo
  python3 - "$TMP/heaptrack_print.out" "$TMP/heap.out" <<'PY'
import json, re, sys

text = open(sys.argv[1]).read()
heap = json.load(open(sys.argv[2]))
t = heap["totals"]


def grab(pat):
    m = re.search(pat, text, re.M)
    return m.group(1) if m else None


def size(s):
    # heaptrack_print's sizes: "10.33M", "5.34K", "52B" (powers of 1000).
    m = re.match(r"^([0-9.]+)([KMGT]?)B?$", s or "")
    return round(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]) if m else None


ht = {
    "calls": int(grab(r"^calls to allocation functions: (\d+)") or 0),
    "temporary": int(grab(r"^temporary memory allocations: (\d+)") or 0),
    "peak": size(grab(r"^peak heap memory consumption: (\S+)")),
    "leaked": size(grab(r"^total memory leaked: (\S+)")),
    "suppressed": size(grab(r"^suppressed leaks: (\S+)")) or 0,
}
eb = {
    "calls": t.get("calls"),
    "temporary": t.get("temporary"),
    "peak": t.get("peak_bytes"),
    "leaked": t.get("leaked_bytes"),
    "suppressed": t.get("held_bytes"),
}
W = "{:<44} {:>12} {:>12} {:>8}"
print(W.format("totals", "heaptrack", "ebsym heap", "ratio"))
names = {
    "calls": "allocator calls",
    "temporary": "temporary allocations",
    "peak": "peak heap bytes",
    "leaked": "leaked bytes (ebsym: to act on)",
    "suppressed": "suppressed (heaptrack) / held (ebsym) bytes",
}
for k, name in names.items():
    a, b = ht[k], eb[k]
    r = f"{b / a:.4f}" if isinstance(a, (int, float)) and a and isinstance(b, (int, float)) else "-"
    print(W.format(name, a if a is not None else "-", b if b is not None else "-", r))
la, lb = (ht["leaked"] or 0) + ht["suppressed"], (eb["leaked"] or 0) + (eb["suppressed"] or 0)
print(W.format("leaked + suppressed/held bytes", la, lb, f"{lb / la:.4f}" if la else "-"))
print(f"(heaptrack_print prints sizes with 4 significant digits; ebsym heap exact: {heap.get('exact')}"
      + ("; " + "; ".join(heap.get("inexact", [])) if heap.get("inexact") else "") + ")")
PY
} | tee "$out"
echo "(written to $out; KEEP=DIR keeps heaptrack's file, the traces and the logs)"
