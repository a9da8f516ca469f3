#!/usr/bin/env bash
# symbolize_trace.sh: the whole path on a large real program: ebrec records protobuf's protoc
# (81 MB, from bench/scripts/corpus.sh) generating C++, Java, Python, C#, Objective-C and Ruby
# code for protobuf's own .proto files, with --alloc=ALLOC_MIN and --cpu=999; then
#   ebsym TRACE -o OUT        symbolize (and print the top stacks of each kind, as a user sees
#                             it): seconds and peak RSS
#   llvm-symbolizer           the same protoc addresses (those of OUT's SymbolizedAddress
#                             records for protoc's build-id, file offsets turned into addresses
#                             with its PT_LOAD segments), one process: seconds and peak RSS
# A benchmark, not a test. Needs root and EBREC (and EBSYM, default target/release/ebsym).
#
# Usage: EBREC=target/release/ebrec bench/scripts/symbolize_trace.sh
#   ALLOC_MIN=4096   the --alloc threshold (lower: more stacks, a longer recording)
#   TRACE=FILE       use this raw trace instead of recording one
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

ALLOC_MIN=${ALLOC_MIN:-4096}
EBSYM=${EBSYM:-$root/target/release/ebsym}
LLVM_SYMBOLIZER=${LLVM_SYMBOLIZER:-$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer)}
[ -x "$EBSYM" ] || (cd "$root" && cargo build --release -q -p ebtrace-ebsym)
[ -x /usr/bin/time ] || apt_install time

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebtrace-symtrace.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# (Into a file: `| head -n1` would kill corpus.sh with SIGPIPE, and pipefail this script.)
CORPUS=protoc "$here/corpus.sh" >"$TMP/corpus"
protoc=$(head -n1 "$TMP/corpus")
src=$(find "$BENCH_CACHE"/corpus/protobuf/src -maxdepth 2 -path '*/protobuf-*/src' | head -n1)

if [ -z "${TRACE:-}" ]; then
  need_root
  ebrec_available || die "set EBREC=/path/to/ebrec"
  mkdir -p "$TMP/out"
  protos=$(cd "$src" && ls google/protobuf/*.proto | grep -v test | head -n 12 | tr '\n' ' ')
  cat >"$TMP/work.sh" <<EOF
#!/bin/sh
for i in 1 2 3; do
  "$protoc" -I"$src" --cpp_out="$TMP/out" --java_out="$TMP/out" --python_out="$TMP/out" \
    --csharp_out="$TMP/out" --objc_out="$TMP/out" --ruby_out="$TMP/out" $protos || exit 1
done
EOF
  chmod +x "$TMP/work.sh"
  TRACE=$TMP/protoc.pb.zst
  log "recording protoc under ebrec --alloc=$ALLOC_MIN --cpu=999"
  "$EBREC" record -o "$TRACE" --alloc="$ALLOC_MIN" --cpu=999 -- "$TMP/work.sh" >"$TMP/ebrec.log" 2>&1 ||
    { tail -n 20 "$TMP/ebrec.log" >&2; die "ebrec failed"; }
fi

busy_check || true
OUT=$TMP/protoc.sym.pb.zst
/usr/bin/time -o "$TMP/t-ebsym" -f '%e %M' "$EBSYM" "$TRACE" -o "$OUT" >"$TMP/ebsym.out" 2>"$TMP/ebsym.err" ||
  { tail -n 20 "$TMP/ebsym.err" >&2; die "ebsym failed"; }
read -r ebsym_s ebsym_kb <"$TMP/t-ebsym"
# The symbolization alone: the top reports of `ebsym TRACE` read the output again.
/usr/bin/time -o "$TMP/t-top" -f '%e %M' "$EBSYM" top "$OUT" --kind alloc >/dev/null 2>&1 || true
read -r top_s top_kb <"$TMP/t-top"

# protoc's build-id, as the trace's BuildId record spells it (decimal bytes).
bid=$(readelf -n "$protoc" | awk '/Build ID/ { print $3 }')
"$EBSYM" dump "$OUT" >"$TMP/dump" 2>/dev/null
perl -e '
  my ($bid, $dump, $bin) = @ARGV;
  # PT_LOAD: (file offset, vaddr, file size).
  my @segs;
  open(my $r2, "-|", "readelf", "-lW", $bin) or die;
  while (<$r2>) { push @segs, [hex $1, hex $2, hex $3] if /LOAD\s+(0x\S+)\s+(0x\S+)\s+\S+\s+(0x\S+)/ }
  open(my $d, "<", $dump) or die;
  my $id;
  while (<$d>) {
    if (/^BuildId\(BuildId \{ id: (\d+), value: \[([^\]]*)\]/) {
      my $hex = join "", map { sprintf "%02x", $_ } split /,\s*/, $2;
      $id = $1 if $hex eq $bid;
    } elsif (defined $id && /^SymbolizedAddress\(SymbolizedAddress \{ build_id: $id, address: (\d+)/) {
      my $off = $1;
      for my $s (@segs) {
        my ($o, $v, $z) = @$s;
        if ($off >= $o && $off < $o + $z) { printf "0x%x\n", $off - $o + $v; last }
      }
    }
  }' "$bid" "$TMP/dump" "$protoc" >"$TMP/addrs"
n=$(wc -l <"$TMP/addrs")
[ "$n" -gt 0 ] || die "no protoc addresses in $OUT"
/usr/bin/time -o "$TMP/t-llvm" -f '%e %M' "$LLVM_SYMBOLIZER" --obj="$protoc" <"$TMP/addrs" >/dev/null
read -r llvm_s llvm_kb <"$TMP/t-llvm"
/usr/bin/time -o "$TMP/t-a2l" -f '%e %M' "$EBSYM" addr2line -e "$protoc" -f -i -C <"$TMP/addrs" >/dev/null
read -r a2l_s a2l_kb <"$TMP/t-a2l"

printf 'whole path on protoc (%s): trace %s MiB, %s distinct protoc addresses (CPU %s%% busy before)\n' \
  "$(date -u +%Y-%m-%d)" "$(awk -v b="$(stat -c %s "$TRACE")" 'BEGIN { printf "%.1f", b / 1048576 }')" "$n" "$BUSY_PCT"
printf '%-44s %9s %9s\n' step seconds 'RSS MiB'
row() { printf '%-44s %9s %9s\n' "$1" "$2" "$(awk -v k="$3" 'BEGIN { printf "%.0f", k / 1024 }')"; }
row "ebsym TRACE -o OUT (all modules + top reports)" "$ebsym_s" "$ebsym_kb"
row "ebsym top OUT --kind alloc (the report alone)" "$top_s" "$top_kb"
row "ebsym addr2line, protoc's addresses" "$a2l_s" "$a2l_kb"
row "llvm-symbolizer, protoc's addresses" "$llvm_s" "$llvm_kb"
grep -E '^ebsym: .*protoc' "$TMP/ebsym.err" | head -n 2 || true
