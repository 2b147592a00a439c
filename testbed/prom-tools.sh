#!/bin/bash
# promtool and mtail for the unit tests of the monitoring role (promtool check/test rules, mtail
# --compile_only and --one_shot), taken from the same Debian packages the role installs on the
# hosts (bookworm: prometheus 2.42, mtail 3.0.0~rc50), unpacked without installing them:
#
#   testbed/prom-tools.sh          fetch and unpack once; print the directory of the two links
#
# They land in $LLAMAFLEET_CACHE/tools/<package>_<version>/ with links in $LLAMAFLEET_CACHE/tools/bin/
# (the tests look there, after PATH). Needs apt-get (a Debian or Ubuntu controller).
set -euo pipefail

CACHE=${LLAMAFLEET_CACHE:-/var/cache/llamafleet}
TOOLS=$CACHE/tools
BIN=$TOOLS/bin

die() { printf 'prom-tools: %s\n' "$*" >&2; exit 1; }
command -v apt-get >/dev/null || die "apt-get not found: install promtool and mtail yourself and put them on PATH"

mkdir -p "$BIN"

# package binary...: unpack the package's candidate version once, link its binaries
fetch() {
  local pkg=$1; shift
  local version dir b missing=0
  for b in "$@"; do [ -x "$BIN/$b" ] || missing=1; done
  version=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    [ "$missing" = 0 ] && return 0
    apt-get update -qq
    version=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
    [ -n "$version" ] && [ "$version" != "(none)" ] || die "no candidate version of $pkg in apt"
  fi
  dir=$TOOLS/${pkg}_${version//[^A-Za-z0-9.+~-]/_}
  if [ ! -f "$dir/.done" ]; then
    local tmp
    tmp=$(mktemp -d)
    # apt-get download writes into the current directory; _apt must be able to write there
    chmod 0755 "$tmp"
    (cd "$tmp" && apt-get download -qq "$pkg=$version" >/dev/null 2>&1) \
      || { apt-get update -qq && (cd "$tmp" && apt-get download -qq "$pkg=$version"); } \
      || { rm -rf "$tmp"; die "apt-get download $pkg=$version failed"; }
    rm -rf "$dir"
    mkdir -p "$dir"
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$dir"
    rm -rf "$tmp"
    touch "$dir/.done"
  fi
  for b in "$@"; do
    [ -x "$dir/usr/bin/$b" ] || die "$pkg $version has no /usr/bin/$b"
    ln -sfn "$dir/usr/bin/$b" "$BIN/$b"
  done
}

fetch prometheus promtool
fetch mtail mtail
"$BIN/promtool" --version >/dev/null 2>&1 || die "$BIN/promtool does not run"
"$BIN/mtail" --version >/dev/null 2>&1 || die "$BIN/mtail does not run"
echo "$BIN"
