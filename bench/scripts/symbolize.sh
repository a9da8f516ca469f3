#!/usr/bin/env bash
# symbolize.sh: `ebsym addr2line` against llvm-symbolizer, gimli's addr2line (the Rust crate's
# CLI), blazesym's CLI (blazecli), binutils addr2line and elfutils eu-addr2line on large real
# binaries with full DWARF: the same N addresses (function starts, random offsets inside
# functions, random text addresses; fixed seed) with inline frames and demangling. Prints
# seconds, addresses/s, peak RSS and ratios to binutils and llvm-symbolizer; the first 1,000
# addresses from a cold start (a new process: what a script asking for one stack pays); then
# how many answers of each binutils-format tool equal ebsym's, and on how many addresses
# ebsym's whole inline chains (function, file and line of every frame) equal
# llvm-symbolizer's, names compared after demangler formatting (the rules of the
# differential test, ebsym/tests/symbolize/llvm_compare.rs).
# A benchmark, not a test: it fails only when a tool cannot run.
#
# Binaries: the corpus of bench/scripts/corpus.sh (protoc, cppcheck, ninja from Debian source,
# and leveldb's db_bench when bench/scripts/leveldb.sh built it), built on first use (about
# 20 minutes); BINS="a b" for others.
#
# Rows: ebsym-1 / ebsym-2        `ebsym addr2line -e BIN -f -i -C` at RAYON_NUM_THREADS=1, 2
#       ebsym-lib-1 / -2         the same through the library's batched parallel path
#                                (ebtrace_symbolize::addr2line_stream; target/release/symbolize
#                                from bench/src/bin/symbolize.rs)
#       binutils                 addr2line -f -i -C -e BIN
#       llvm-symbolizer          llvm-symbolizer-19 --obj=BIN (inlines and demangling are its
#                                defaults)
#       gimli-addr2line          the addr2line crate's CLI (cargo install addr2line --features
#                                bin, into $EBTRACE_BENCH_CACHE/tools), -f -i -C
#       blazesym                 blazecli symbolize elf --path BIN ADDR... (cargo install
#                                blazecli; addresses as arguments, it reads no stdin)
#       eu-addr2line             eu-addr2line -f -i -C -e BIN, on the first EU_N addresses only
#                                (it does a few hundred per second)
#       *-cold1k                 ebsym-2 and llvm-symbolizer on the first 1,000 addresses
#
# Usage: bench/scripts/symbolize.sh
#   N=100000          addresses per binary
#   EU_N=5000         addresses for eu-addr2line (its rate is measured on those)
#   REPEAT=3          runs per row; the table shows the fastest
#   BINS="a b"        other binaries instead of the corpus
#   EBSYM=path        the ebsym to measure (default target/release/ebsym, built if missing)
#   EBTRACE_BENCH_CACHE=DIR   where the corpus and the tools are kept (default /var/tmp/ebtrace-bench)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

N=${N:-100000}
EU_N=${EU_N:-5000}
REPEAT=${REPEAT:-3}
LLVM_SYMBOLIZER=${LLVM_SYMBOLIZER:-$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-symbolize.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

[ -x /usr/bin/time ] || apt_install time
command -v addr2line >/dev/null || apt_install binutils
command -v eu-addr2line >/dev/null || apt_install elfutils

if [ -z "${EBSYM:-}" ]; then
  EBSYM=$root/target/release/ebsym
  [ -x "$EBSYM" ] || (cd "$root" && cargo build --release -q -p ebtrace-ebsym)
fi
LIBSYM=$root/target/release/symbolize
(cd "$root" && cargo build --release -q -p ebtrace-bench --bin symbolize) || LIBSYM=

TOOLS=$BENCH_CACHE/tools/bin
install_tool() { # BIN CRATE ARGS...
  local bin=$1 crate=$2
  shift 2
  [ -x "$TOOLS/$bin" ] && return 0
  log "cargo install $crate $* into $BENCH_CACHE/tools (once)"
  cargo install --quiet --root "$BENCH_CACHE/tools" "$crate" "$@" >&2 || log "$crate: not installed"
}
install_tool addr2line addr2line --version 0.27.1 --features bin
install_tool blazecli blazecli --version 0.1.14

if [ -z "${BINS:-}" ]; then
  BINS=$("$here/corpus.sh" | tr '\n' ' ')
fi

# addresses BIN N SEED: N hex addresses in BIN's executable sections: 2/5 function starts,
# 2/5 random offsets inside functions, 1/5 uniform random text addresses.
addresses() {
  perl -e '
    use strict; use warnings;
    my ($bin, $n, $seed) = @ARGV; srand($seed);
    my ($lo, $hi) = (~0, 0);
    open(my $s, "-|", "readelf", "-SW", $bin) or die;
    while (<$s>) {
      next unless /\]\s+(\S+)\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+(\S+)/;
      next unless index($4, "X") >= 0;
      my ($a, $z) = (hex $2, hex $3);
      $lo = $a if $a < $lo; $hi = $a + $z if $a + $z > $hi;
    }
    die "no executable section in $bin\n" unless $lo < $hi;
    open(my $r, "-|", "readelf", "-sW", $bin) or die;
    my (%seen, @f);
    while (<$r>) {
      my @c = split;
      next unless @c >= 8 && $c[3] eq "FUNC" && $c[6] ne "UND";
      my $a = hex $c[1]; my $z = $c[2] =~ /^0x/ ? hex $c[2] : $c[2];
      push @f, [$a, $z] if $z > 0 && $a >= $lo && $a < $hi && !$seen{$a}++;
    }
    die "no function symbols in $bin\n" unless @f;
    for my $i (0 .. $n - 1) {
      my $k = $i % 5; my $g = $f[int(rand(@f))];
      my $a = $k < 2 ? $g->[0] : $k < 4 ? $g->[0] + int(rand($g->[1])) : $lo + int(rand($hi - $lo));
      printf "0x%x\n", $a;
    }' "$@"
}

# timed NAME THREADS INPUT OUT CMD...: the fastest of REPEAT runs; sets T_SEC and T_RSS (KiB).
timed() {
  local name=$1 threads=$2 input=$3 out=$4 i best= rss=
  shift 4
  for i in $(seq 1 "$REPEAT"); do
    RAYON_NUM_THREADS=$threads /usr/bin/time -o "$TMP/time" -f '%e %M' "$@" <"$input" >"$out" 2>"$TMP/err" ||
      { log "$name failed: $(tail -n 3 "$TMP/err")"; T_SEC=-; T_RSS=-; return 0; }
    read -r sec kb <"$TMP/time"
    if [ -z "$best" ] || awk -v a="$sec" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$sec; rss=$kb; fi
  done
  T_SEC=$best
  T_RSS=$rss
}

busy_check || true
log "CPU ${BUSY_PCT}% busy before the runs (2 cores here; other work skews the rows)"
printf 'symbolize benchmark: %s addresses per binary (eu-addr2line: first %s), fastest of %s, %s\n' \
  "$N" "$EU_N" "$REPEAT" "$(date -u +%Y-%m-%d)"

for bin in $BINS; do
  addresses "$bin" "$N" 1 >"$TMP/addrs"
  head -n "$EU_N" "$TMP/addrs" >"$TMP/addrs-eu"
  uniq=$(sort -u "$TMP/addrs" | wc -l)
  printf '\n%s: %s MiB, %s distinct addresses of %s\n' "$bin" \
    "$(awk -v b="$(stat -c %s "$bin")" 'BEGIN { printf "%.1f", b / 1048576 }')" "$uniq" "$N"
  rows=()
  declare -A SEC=() RSS=() CNT=()
  run_row() { # NAME THREADS INPUT COUNT CMD...
    local name=$1 threads=$2 input=$3 count=$4
    shift 4
    timed "$name" "$threads" "$input" "$TMP/out-$name" "$@"
    rows+=("$name"); SEC[$name]=$T_SEC; RSS[$name]=$T_RSS; CNT[$name]=$count
  }
  run_row ebsym-1 1 "$TMP/addrs" "$N" "$EBSYM" addr2line -e "$bin" -f -i -C
  run_row ebsym-2 2 "$TMP/addrs" "$N" "$EBSYM" addr2line -e "$bin" -f -i -C
  if [ -n "$LIBSYM" ]; then
    run_row ebsym-lib-1 1 "$TMP/addrs" "$N" "$LIBSYM" -e "$bin" -f -i -C
    run_row ebsym-lib-2 2 "$TMP/addrs" "$N" "$LIBSYM" -e "$bin" -f -i -C
  fi
  run_row binutils 1 "$TMP/addrs" "$N" addr2line -f -i -C -e "$bin"
  if [ -n "$LLVM_SYMBOLIZER" ]; then
    run_row llvm-symbolizer 1 "$TMP/addrs" "$N" "$LLVM_SYMBOLIZER" --obj="$bin"
  fi
  [ -x "$TOOLS/addr2line" ] && run_row gimli-addr2line 1 "$TMP/addrs" "$N" "$TOOLS/addr2line" -e "$bin" -f -i -C
  if [ -x "$TOOLS/blazecli" ]; then
    # blazecli takes the addresses as arguments (one process: 100k fit in ARG_MAX).
    mapfile -t addr_args <"$TMP/addrs"
    run_row blazesym 1 /dev/null "$N" "$TOOLS/blazecli" symbolize elf --path "$bin" "${addr_args[@]}"
  fi
  run_row eu-addr2line 1 "$TMP/addrs-eu" "$EU_N" eu-addr2line -f -i -C -e "$bin"
  head -n 1000 "$TMP/addrs" >"$TMP/addrs-1k"
  # Cold start: a new process for 1,000 addresses (the page cache is warm from the rows above).
  run_row ebsym-cold1k 2 "$TMP/addrs-1k" 1000 "$EBSYM" addr2line -e "$bin" -f -i -C
  if [ -n "$LLVM_SYMBOLIZER" ]; then
    run_row llvm-cold1k 1 "$TMP/addrs-1k" 1000 "$LLVM_SYMBOLIZER" --obj="$bin"
  fi

  rate() { awk -v n="${CNT[$1]}" -v s="${SEC[$1]}" 'BEGIN { if (s ~ /^[0-9.]+$/) printf "%.0f", n / (s > 0 ? s : 0.001); else printf "-" }'; }
  printf '%-16s %9s %8s %12s %9s %11s %11s\n' tool addresses seconds 'addresses/s' 'RSS MiB' 'x binutils' 'x llvm-sym'
  for r in "${rows[@]}"; do
    printf '%-16s %9s %8s %12s %9s %11s %11s\n' "$r" "${CNT[$r]}" "${SEC[$r]}" "$(rate "$r")" \
      "$(awk -v k="${RSS[$r]}" 'BEGIN { if (k ~ /^[0-9]+$/) printf "%.0f", k / 1024; else printf "-" }')" \
      "$(ratio "$(rate "$r")" "$(rate binutils)")" \
      "$( [ -n "${SEC[llvm-symbolizer]:-}" ] && ratio "$(rate "$r")" "$(rate llvm-symbolizer)" || echo -)"
  done

  # Agreement with binutils: output lines (a line-by-line diff), and whole answers per address
  # (runs with -a, which prints each address before its frames).
  total=$(wc -l <"$TMP/out-binutils")
  differ=$(diff "$TMP/out-ebsym-1" "$TMP/out-binutils" | grep -c '^>' || true)
  same_12=$(cmp -s "$TMP/out-ebsym-1" "$TMP/out-ebsym-2" && echo identical || echo DIFFERENT)
  "$EBSYM" addr2line -a -e "$bin" -f -i -C <"$TMP/addrs" >"$TMP/a-ebsym"
  addr2line -a -f -i -C -e "$bin" <"$TMP/addrs" >"$TMP/a-binutils"
  per_addr=$(paste -d '\t' <(awk '/^0x[0-9a-f]+$/ && length($0) == 18 { if (b != "") print b; b = "" } { b = b "|" $0 } END { print b }' "$TMP/a-ebsym") \
                           <(awk '/^0x[0-9a-f]+$/ && length($0) == 18 { if (b != "") print b; b = "" } { b = b "|" $0 } END { print b }' "$TMP/a-binutils") |
             awk -F '\t' '{ n++; if ($1 == $2) s++ } END { printf "%d of %d (%.2f%%)", s, n, 100 * s / n }')
  # The binutils-format tools against ebsym, whole answers per address (with -a).
  if [ -x "$TOOLS/addr2line" ]; then
    "$TOOLS/addr2line" -a -e "$bin" -f -i -C <"$TMP/addrs" >"$TMP/a-gimli"
    per_addr_gimli=$(paste -d '\t' <(awk '/^0x[0-9a-f]+$/ && length($0) == 18 { if (b != "") print b; b = "" } { b = b "|" $0 } END { print b }' "$TMP/a-ebsym") \
                                  <(awk '/^0x[0-9a-f]+$/ && length($0) == 18 { if (b != "") print b; b = "" } { b = b "|" $0 } END { print b }' "$TMP/a-gimli") |
                     awk -F '\t' '{ n++; if ($1 == $2) s++ } END { printf "%d of %d (%.2f%%)", s, n, 100 * s / n }')
    printf 'gimli addr2line: whole answers per address equal to ebsym addr2line'"'"'s: %s\n' "$per_addr_gimli"
  fi
  printf 'agreement with binutils: lines %d of %d (%.2f%%); whole answers per address %s; ebsym at 1 and 2 threads: %s\n' \
    "$((total - differ))" "$total" "$(awk -v t="$total" -v d="$differ" 'BEGIN { print 100 * (t - d) / t }')" \
    "$per_addr" "$same_12"
  if [ -n "$LIBSYM" ]; then
    cmp -s "$TMP/out-ebsym-1" "$TMP/out-ebsym-lib-2" && echo "ebsym-lib output: identical to ebsym's" ||
      echo "ebsym-lib output: DIFFERENT from ebsym's"
    # Whole inline chains against llvm-symbolizer (ebsym's library with the options of
    # `ebsym TRACE`; see bench/src/bin/symbolize.rs).
    if [ -n "$LLVM_SYMBOLIZER" ]; then
      "$LIBSYM" --vs-llvm "$LLVM_SYMBOLIZER" -e "$bin" <"$TMP/addrs" ||
        log "agreement with llvm-symbolizer could not be measured"
    fi
  fi
  unset SEC RSS CNT
done
