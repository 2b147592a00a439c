#!/bin/bash
# The programs the unit tests run besides Python, taken from the same Debian packages the roles
# install on the hosts, unpacked without installing them (no service starts on the controller):
# promtool and mtail (monitoring role: promtool check/test rules, mtail --compile_only and
# --one_shot; bookworm: prometheus 2.42, mtail 3.0.0~rc50) and haproxy (llama_pool role: `haproxy
# -c` on the rendered configuration; bookworm: 2.6, with the libraries it needs beside it).
#
#   testbed/unit-tools.sh          fetch and unpack once; print the directory of the links
#
# They land in $LLAMAFLEET_CACHE/tools/<package>_<version>/ with links (haproxy: a wrapper that
# sets its library path) in $LLAMAFLEET_CACHE/tools/bin/ (the tests look there, after PATH).
# Needs apt-get (a Debian or Ubuntu controller).
set -euo pipefail

CACHE=${LLAMAFLEET_CACHE:-/var/cache/llamafleet}
TOOLS=$CACHE/tools
BIN=$TOOLS/bin

die() { printf 'unit-tools: %s\n' "$*" >&2; exit 1; }
command -v apt-get >/dev/null || die "apt-get not found: install promtool and mtail yourself and put them on PATH"

mkdir -p "$BIN"

# package: unpack the package's candidate version once; print its directory
unpack() {
  local pkg=$1 version dir
  version=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
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
  echo "$dir"
}

# package binary...: unpack the package's candidate version once, link its binaries (nothing to
# do when they are linked and apt knows no candidate, as on a controller without package lists)
fetch() {
  local pkg=$1; shift
  local dir b missing=0
  for b in "$@"; do [ -x "$BIN/$b" ] || missing=1; done
  if [ "$missing" = 0 ] && ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [^(]'; then
    return 0
  fi
  dir=$(unpack "$pkg")
  for b in "$@"; do
    [ -x "$dir/usr/bin/$b" ] || die "$pkg (${dir##*/}) has no /usr/bin/$b"
    ln -sfn "$dir/usr/bin/$b" "$BIN/$b"
  done
}

fetch prometheus promtool
fetch mtail mtail
"$BIN/promtool" --version >/dev/null 2>&1 || die "$BIN/promtool does not run"
"$BIN/mtail" --version >/dev/null 2>&1 || die "$BIN/mtail does not run"

# haproxy and the shared libraries of its dependencies the controller may lack (Lua, OpenTracing)
haproxy_dir=$(unpack haproxy)
libs=""
deps() {
  apt-cache depends --no-pre-depends --no-recommends --no-suggests "$@" 2>/dev/null \
    | awk '/Depends:/ {print $2}' | grep -E '^lib(lua|opentracing)' | sort -u || true
}
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
# two levels: haproxy's own, then theirs (the OpenTracing wrapper needs libopentracing)
for pkg in $( { deps haproxy; deps $(deps haproxy); } | sort -u); do
  libs="$libs:$(unpack "$pkg")/usr/lib/$arch"
done
cat >"$BIN/haproxy.tmp" <<WRAPPER
#!/bin/sh
# haproxy from the Debian package, unpacked by testbed/unit-tools.sh (not installed)
LD_LIBRARY_PATH="${libs#:}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$haproxy_dir/usr/sbin/haproxy" "\$@"
WRAPPER
chmod 0755 "$BIN/haproxy.tmp"
mv -f "$BIN/haproxy.tmp" "$BIN/haproxy"
"$BIN/haproxy" -v >/dev/null 2>&1 || die "$BIN/haproxy does not run"
echo "$BIN"
