#!/usr/bin/env bash
# Builds and runs a few of tessera's examples against several xtensor / xtl / xsimd
# releases and prints a table of PASS/FAIL per combination (docs/dependencies.md).
#
#   tools/check_dependency_versions.sh            # the default combinations, below
#   COMBOS="system 0.27.1/0.8.2/14.3.0" tools/check_dependency_versions.sh
#
# The releases come from git mirrors of xtensor-stack's repositories: each tag used
# is extracted once (git archive) into $DEPS_DIR/<name>-<tag>/ and put on the include
# path with -isystem, ahead of /usr/include. "system" means: no -isystem for that
# library, whatever the compiler finds by itself (Debian 12: xtensor 0.24.3, xtl 0.7.2,
# xsimd 8.1.0).
#
# Environment (all optional):
#   XTENSOR_MIRROR, XTL_MIRROR, XSIMD_MIRROR
#                git directories (bare or not) of github.com/xtensor-stack/{xtensor,xtl,xsimd};
#                default /work/.mirror/xtensor-stack+<name>/repo, else $DEPS_DIR/<name>.git
#   COMBOS       space-separated XTENSOR/XTL/XSIMD[/use-xsimd] triples of tags or "system";
#                "/use-xsimd" adds -DXTENSOR_USE_XSIMD (as ConanCenter's xtensor package does).
#                "newest" and "oldest" are expanded (see default_combos below).
#   EXAMPLES     example names (examples/<name>.cpp), default: data_sharding global_view shard_map
#                collectives_tour block_matmul (the last two run xsimd's reductions and matmul kernel)
#   CXX          compiler, default g++;  CXXFLAGS  extra flags
#   DEPS_DIR     default build/deps (relative to the repository root)
#
# Each example is compiled with `$CXX -std=c++20 -O1 -pthread -I include -isystem ...`,
# run, and its output compared with examples/<name>.expected (as the examples' ctest
# tests do). Logs: $DEPS_DIR/logs/<combination>/<example>.log. Exit status: 0 if every
# cell passed, 1 if one failed, 2 if a mirror was missing (its combinations are SKIP).
#
# Compiles run one at a time (nice), so the script leaves the machine's other cores free.
#
# xtensor 0.26 moved its headers (<xtensor/xtensor.hpp> -> <xtensor/containers/xtensor.hpp>,
# ...). tessera's headers cope (tessera/detail/xtensor/), but the examples include
# xtensor's headers by their 0.24 names, as a user's program written for 0.24 would; for
# releases with the new layout the script generates forwarding headers under
# $DEPS_DIR/old-names-<tag>/xtensor/<name>.hpp for the examples' sake only.

set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DEPS_DIR=${DEPS_DIR:-build/deps}
CXX=${CXX:-g++}
CXXFLAGS=${CXXFLAGS:-}
EXAMPLES=${EXAMPLES:-"data_sharding global_view shard_map collectives_tour block_matmul"}
mkdir -p "$DEPS_DIR"
DEPS_DIR=$(cd "$DEPS_DIR" && pwd)

mirror_default() {  # name
  local m="/work/.mirror/xtensor-stack+$1/repo"
  if [ -d "$m" ]; then echo "$m"; else echo "$DEPS_DIR/$1.git"; fi
}
XTENSOR_MIRROR=${XTENSOR_MIRROR:-$(mirror_default xtensor)}
XTL_MIRROR=${XTL_MIRROR:-$(mirror_default xtl)}
XSIMD_MIRROR=${XSIMD_MIRROR:-$(mirror_default xsimd)}

mirror_of() {  # name -> path
  case $1 in
    xtensor) echo "$XTENSOR_MIRROR" ;;
    xtl) echo "$XTL_MIRROR" ;;
    xsimd) echo "$XSIMD_MIRROR" ;;
  esac
}

missing_mirrors=""
have_mirror() {  # name
  local m
  m=$(mirror_of "$1")
  if git --git-dir="$m" rev-parse --git-dir >/dev/null 2>&1; then return 0; fi
  case " $missing_mirrors " in
    *" $1 "*) ;;
    *)
      missing_mirrors="$missing_mirrors $1"
      local var
      var=$(echo "$1" | tr '[:lower:]' '[:upper:]')_MIRROR
      {
        echo "note: no git mirror of $1 at $m."
        echo "      Clone one:  git clone --bare https://github.com/xtensor-stack/$1.git $DEPS_DIR/$1.git"
        echo "      or point $var at an existing clone. Combinations that need $1 releases are SKIP."
      } >&2
      ;;
  esac
  return 1
}

# Release tags only (x.y.z), newest first.
tags() { git --git-dir="$(mirror_of "$1")" tag --sort=-v:refname | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$'; }
newest_tag() { tags "$1" | sed -n 1p; }
oldest_tag_of_series() { tags "$1" | grep -E "^$2\." | tail -n 1; }  # name, "0.24" or "8"

# The xtl release an xtensor tag asks for in its CMakeLists.txt (xtl_REQUIRED_VERSION).
xtl_required_by() {
  git --git-dir="$XTENSOR_MIRROR" show "$1:CMakeLists.txt" |
    sed -n -E 's/^[[:space:]]*set\(xtl_REQUIRED_VERSION[[:space:]]+([0-9.]+)\).*/\1/p' | sed -n 1p
}

default_combos() {  # sets COMBOS (not in a subshell, so that each missing mirror is reported once)
  local out="system"
  if have_mirror xtensor && have_mirror xtl && have_mirror xsimd; then
    local xt_new xt_old xs_old
    xt_new=$(newest_tag xtensor)
    xt_old=$(oldest_tag_of_series xtensor 0.24)
    xs_old=$(oldest_tag_of_series xsimd 8)
    # oldest: the first 0.24 release, the xtl it asks for, the first xsimd 8.
    out="$out $xt_old/$(xtl_required_by "$xt_old")/$xs_old"
    # the newest 0.24 (old header layout) with the newest xsimd.
    out="$out $(tags xtensor | grep -E '^0\.24\.' | sed -n 1p)/$(tags xtl | grep -E '^0\.7\.' | sed -n 1p)/$(newest_tag xsimd)"
    # 0.26.0 (new layout, first release) with what it asks for.
    out="$out 0.26.0/$(xtl_required_by 0.26.0)/13.2.0"
    # newest: newest xtensor, newest xtl, newest xsimd; and again with XTENSOR_USE_XSIMD.
    out="$out $xt_new/$(newest_tag xtl)/$(newest_tag xsimd)"
    out="$out $xt_new/$(newest_tag xtl)/$(newest_tag xsimd)/use-xsimd"
  else
    out="$out newest oldest"  # reported as SKIP, with the note above
  fi
  COMBOS=$out
}

[ -n "${COMBOS:-}" ] || default_combos

# Extracts <name> at <tag> into $DEPS_DIR/<name>-<tag>; prints the include directory.
extract() {  # name tag
  local dir="$DEPS_DIR/$1-$2"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    git --git-dir="$(mirror_of "$1")" archive "$2" include | tar -x -C "$dir"
    touch "$dir/.complete"
  fi
  echo "$dir/include"
}

# For an xtensor with the 0.26 layout: <xtensor/NAME.hpp> forwarding to <xtensor/DIR/NAME.hpp>.
old_names() {  # xtensor include dir, tag
  local dir="$DEPS_DIR/old-names-$2"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$dir/xtensor"
    (cd "$1" && find xtensor -mindepth 2 -name '*.hpp') | while read -r rel; do
      printf '#pragma once\n// generated by tools/check_dependency_versions.sh: the 0.24 name, for the examples\n#include <%s>\n' \
        "$rel" >"$dir/xtensor/$(basename "$rel")"
    done
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# The versions the compiler sees with these flags, read from the libraries' config headers.
versions() {  # flags...
  printf '%s\n' '#include "tessera/detail/xtensor/config.hpp"' '#include <xtl/xtl_config.hpp>' \
    '#include <xsimd/config/xsimd_config.hpp>' \
    'xtensor XTENSOR_VERSION_MAJOR.XTENSOR_VERSION_MINOR.XTENSOR_VERSION_PATCH' \
    'xtl XTL_VERSION_MAJOR.XTL_VERSION_MINOR.XTL_VERSION_PATCH' \
    'xsimd XSIMD_VERSION_MAJOR.XSIMD_VERSION_MINOR.XSIMD_VERSION_PATCH' |
    "$CXX" -std=c++20 -E -P -I include "$@" -x c++ - 2>/dev/null |
    sed -n -E 's/^(xtensor|xtl|xsimd) ([0-9]+) ?\. ?([0-9]+) ?\. ?([0-9]+)$/\1 \2.\3.\4/p' |
    awk '{ printf "%s%s", (NR > 1 ? " / " : ""), $2 } END { print "" }'
}

expand() {  # newest|oldest|triple -> triple
  case $1 in
    newest) echo "newest/newest/newest" ;;
    oldest) echo "0.24.0/0.7.0/8.0.0" ;;
    *) echo "$1" ;;
  esac
}

# Whether two outputs differ only in numbers, each by at most 1e-6 * max(1, |expected|):
# xtensor's own vectorised math (XTENSOR_USE_XSIMD: xt::sin through xsimd::sin) is not
# bit for bit the C library's, so an example printing xt::sin differs in the last digit.
close_enough() {  # expected actual
  awk -v actual="$2" '
    function skeleton(line, nums,   n, s, out) {
      n = 0; out = ""; s = line
      while (match(s, /-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
        nums[++n] = substr(s, RSTART, RLENGTH) + 0
        out = out substr(s, 1, RSTART - 1) "#"
        s = substr(s, RSTART + RLENGTH)
      }
      return out s
    }
    function abs(x) { return x < 0 ? -x : x }
    {
      if ((getline other < actual) <= 0) exit 1
      split("", a); split("", b)
      if (skeleton($0, a) != skeleton(other, b)) exit 1
      for (i in a) if (abs(a[i] - b[i]) > 1e-6 * (abs(a[i]) > 1 ? abs(a[i]) : 1)) exit 1
    }
    END { if ((getline other < actual) > 0) exit 1 }' "$1"
}

logs="$DEPS_DIR/logs"
mkdir -p "$logs" "$DEPS_DIR/bin"
rows=()
status=0
read -r -a example_list <<<"$EXAMPLES"

for combo in $COMBOS; do
  triple=$(expand "$combo")
  IFS=/ read -r xt xtl xs extra <<<"$triple"
  label="$combo"
  [ "$combo" = system ] && { xt=system; xtl=system; xs=system; extra=""; }
  flags=()
  fetched=()  # the libraries taken from the mirrors: none of their headers may come from /usr
  skip=""
  for pair in "xtensor:$xt" "xtl:$xtl" "xsimd:$xs"; do
    name=${pair%%:*}
    tag=${pair#*:}
    [ "$tag" = system ] && continue
    if ! have_mirror "$name"; then skip="no $name mirror"; break; fi
    [ "$tag" = newest ] && tag=$(newest_tag "$name")
    if ! git --git-dir="$(mirror_of "$name")" rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
      skip="no tag $name $tag"
      break
    fi
    inc=$(extract "$name" "$tag")
    flags+=(-isystem "$inc")
    fetched+=("$name")
    if [ "$name" = xtensor ] && [ ! -f "$inc/xtensor/xtensor.hpp" ]; then
      flags+=(-isystem "$(old_names "$inc" "$tag")")
    fi
  done
  [ "$extra" = use-xsimd ] && flags+=(-DXTENSOR_USE_XSIMD)
  # shellcheck disable=SC2206
  flags+=($CXXFLAGS)

  seen="-"
  [ -z "$skip" ] && seen=$(versions "${flags[@]}")
  [ -n "$seen" ] || seen="(unreadable)"
  row="| $label | $seen |"
  if [ "$extra" = use-xsimd ]; then row="| $label | $seen, XTENSOR_USE_XSIMD |"; fi
  dir="$logs/$(echo "$label" | tr '/' '_')"
  mkdir -p "$dir"
  echo "== $label: xtensor / xtl / xsimd = $seen" >&2
  for ex in "${example_list[@]}"; do
    if [ -n "$skip" ]; then
      row="$row SKIP ($skip) |"
      [ $status -eq 0 ] && status=2
      continue
    fi
    log="$dir/$ex.log"
    exe="$DEPS_DIR/bin/$ex"
    rm -f "$exe"
    cell=PASS
    {
      echo "\$ $CXX -std=c++20 -O1 -pthread -I include ${flags[*]} examples/$ex.cpp -o $exe"
    } >"$log"
    start=$(date +%s)
    mixed=""
    if ! nice "$CXX" -std=c++20 -O1 -pthread -I include "${flags[@]}" "examples/$ex.cpp" -o "$exe" \
      -MD -MF "$dir/$ex.d" >>"$log" 2>&1; then
      cell="FAIL (compile)"
    elif [ ${#fetched[@]} -gt 0 ] &&
      mixed=$(grep -o -E "/usr(/local)?/include/($(IFS='|'; echo "${fetched[*]}"))/[^ ]*" "$dir/$ex.d" | sed -n 1,3p) &&
      [ -n "$mixed" ]; then
      echo "headers of the system's copy were used alongside the fetched release: $mixed" >>"$log"
      cell="FAIL (system headers mixed in)"
    elif ! timeout 300 "$exe" >"$dir/$ex.out" 2>>"$log"; then
      cell="FAIL (run)"
    elif [ -f "examples/$ex.expected" ] && ! diff -u "examples/$ex.expected" "$dir/$ex.out" >>"$log"; then
      if [ "$extra" = use-xsimd ] && close_enough "examples/$ex.expected" "$dir/$ex.out"; then
        cell="PASS (numbers within 1e-6, not bit for bit)"
      else
        cell="FAIL (output differs)"
      fi
    fi
    echo "   $ex: $cell ($(($(date +%s) - start)) s; $log)" >&2
    case $cell in PASS*) ;; *) status=1 ;; esac
    row="$row $cell |"
  done
  rows+=("$row")
done

echo
echo "$(date -u +%Y-%m-%d) $($CXX --version | sed -n 1p)"
echo
header="| combination (xtensor/xtl/xsimd) | versions seen |"
rule="|---|---|"
for ex in "${example_list[@]}"; do header="$header $ex |"; rule="$rule---|"; done
echo "$header"
echo "$rule"
printf '%s\n' "${rows[@]}"
exit $status
