#!/usr/bin/env bash
# corpus.sh: builds the symbolizer's corpus of large real C++ programs from Debian source
# packages, each with its own build system, -g -O2 (DWARF 5, gcc 12), into
# $EBTRACE_BENCH_CACHE/corpus, once; later runs reuse what is there. Prints the path of every
# binary it has, one per line, on stdout (what bench/scripts/symbolize.sh and the corpus
# differential test take: `BINS="$(bench/scripts/corpus.sh)"`).
#
#   protoc     protobuf 3.21.12, CMake (-Dprotobuf_BUILD_TESTS=OFF): the ≥ 50 MB one
#   cppcheck   cppcheck 2.10, CMake, the command-line program only
#   ninja      ninja-build 1.11.1, CMake
#   db_bench   leveldb 1.23's, as bench/scripts/leveldb.sh builds it (RelWithDebInfo), if present
#
# Usage: bench/scripts/corpus.sh            (as root: it enables deb-src and installs build deps)
#   CORPUS="protoc cppcheck ninja"   which programs to build
#   JOBS=$(nproc)                    parallel compile jobs
# Build time here (2 vCPUs): protoc about 25 min, cppcheck about 15 min, ninja 1 min.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

CORPUS=${CORPUS:-"protoc cppcheck ninja"}
JOBS=${JOBS:-$(nproc)}
DIR=$BENCH_CACHE/corpus
FLAGS="-g -O2"

enable_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources
  if grep -rqs '^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
    { [ -f "$f" ] && grep -qs '^Types:.*deb-src' "$f"; }; then
    return 0
  fi
  [ -f "$f" ] || die "no deb-src entry and no $f to add one to"
  log "enabling deb-src in $f (backup: $f.ebtrace-bak)"
  [ -e "$f.ebtrace-bak" ] || cp "$f" "$f.ebtrace-bak"
  local tmp
  tmp=$(mktemp)
  awk 'BEGIN{RS=""; ORS="\n\n"}
       { if ($0 !~ /-security/ && $0 !~ /Types:[^\n]*deb-src/) sub(/Types: deb/, "Types: deb deb-src"); print }' \
    "$f" >"$tmp"
  cat "$tmp" >"$f"
  rm -f "$tmp"
  APT_UPDATED=0
}

# source PKG: unpacks the Debian source of PKG into $DIR/PKG/src once; prints its directory.
source_of() {
  local pkg=$1 d=$DIR/$1/src
  if ! ls -d "$d"/"$pkg"-*/ >/dev/null 2>&1; then
    enable_deb_src
    apt_install dpkg-dev
    apt_update_once
    rm -rf "$d"
    mkdir -p "$d"
    (cd "$d" && run_apt source "$pkg")
  fi
  ls -d "$d"/"$pkg"-*/ | head -n1
}

# cmake_build NAME PKG TARGET OUTPUT CMAKE_ARGS...: builds TARGET of PKG's source with CMake
# into $DIR/NAME/build; OUTPUT is the binary's path relative to the build directory.
cmake_build() {
  local name=$1 pkg=$2 target=$3 output=$4
  shift 4
  local build=$DIR/$name/build
  if [ -x "$build/$output" ]; then
    readlink -f "$build/$output"
    return 0
  fi
  apt_install cmake g++ make zlib1g-dev
  local src
  src=$(source_of "$pkg")
  log "building $name from $src (once; log: $DIR/$name/build.log)"
  rm -rf "$build"
  mkdir -p "$build"
  (cd "$build" &&
    cmake -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" "$@" "$src" \
      >"$DIR/$name/build.log" 2>&1 &&
    cmake --build . --target "$target" -j "$JOBS" >>"$DIR/$name/build.log" 2>&1) ||
    { tail -n 30 "$DIR/$name/build.log" >&2; die "$name build failed (log: $DIR/$name/build.log)"; }
  [ -x "$build/$output" ] || die "$name: $build/$output was not built"
  # protoc is a symlink to protoc-3.21.12.0: the file itself.
  local bin
  bin=$(readlink -f "$build/$output")
  log "$name: $(du -h "$bin" | cut -f1) at $bin"
  echo "$bin"
}

mkdir -p "$DIR"
for p in $CORPUS; do
  case $p in
    protoc) cmake_build protoc protobuf protoc protoc -Dprotobuf_BUILD_TESTS=OFF \
      -Dprotobuf_BUILD_SHARED_LIBS=OFF ;;
    cppcheck) cmake_build cppcheck cppcheck cppcheck bin/cppcheck -DBUILD_GUI=OFF -DBUILD_TESTS=OFF \
      -DHAVE_RULES=OFF -DUSE_MATCHCOMPILER=Off ;;
    ninja) cmake_build ninja ninja-build ninja ninja -DBUILD_TESTING=OFF ;;
    *) die "unknown corpus program $p (protoc, cppcheck, ninja)" ;;
  esac
done
db_bench=$BENCH_CACHE/leveldb/build/db_bench
[ -x "$db_bench" ] && echo "$db_bench"
exit 0
