#!/bin/bash
# Throwaway Debian test hosts with systemd as PID 1 (systemd-nspawn --boot), one IP each on a
# private bridge, reached over SSH with a generated key. Used by the Molecule scenarios' create and
# destroy playbooks; usable by hand too.
#
#   testhost.sh deps                        install the Debian packages this script needs
#   testhost.sh rootfs SUITE                build (once, cached) the base image for SUITE (bookworm, trixie)
#   testhost.sh key                         print the private key path (generated on first use)
#   testhost.sh net-up | net-down           bridge + NAT (NAT only so hosts reach the Debian mirror)
#   testhost.sh up NAME IP [SUITE] [BIND...] boot host NAME; BIND = SRC:DST[:ro], SRC relative to the cache
#   testhost.sh down NAME                   power off and delete every trace of NAME
#   testhost.sh exec NAME CMD...            run CMD inside NAME
#   testhost.sh serve DIR [PORT]            serve DIR over HTTP on the bridge address (for test downloads)
#   testhost.sh unserve [PORT]              stop that HTTP server (default: all of them)
#   testhost.sh cleanup                     unserve + net-down, if no host is running
#   testhost.sh ssh-config                  print an ssh_config for the test network
#   testhost.sh list
#   testhost.sh apt-archive SUITE DIR       a host's own apt archive in DIR (links to the cached packages)
#   testhost.sh apt-keep DIR SUITE          put the packages downloaded into DIR into the cache
#
# Environment:
#   LLAMAFLEET_CACHE      persistent cache: rootfs images, apt archives, ccache (default /var/cache/llamafleet)
#   LLAMAFLEET_TESTHOSTS  per-run state: overlays, key, logs            (default /var/tmp/llamafleet-testhosts)
#   LLAMAFLEET_BRIDGE     bridge name                                   (default lfbr0)
#   LLAMAFLEET_NET        first three octets of the /24 test network    (default 10.131.7)
#   DEBIAN_MIRROR         Debian mirror URL (default: the first one this machine's apt sources use)
#   DEBIAN_SECURITY_MIRROR  likewise for the security archive
set -euo pipefail

CACHE=${LLAMAFLEET_CACHE:-/var/cache/llamafleet}
STATE=${LLAMAFLEET_TESTHOSTS:-/var/tmp/llamafleet-testhosts}
BR=${LLAMAFLEET_BRIDGE:-lfbr0}
NET=${LLAMAFLEET_NET:-10.131.7}
GW=$NET.1
# Bump when the recipe of the base image changes: cached images with another stamp are rebuilt.
ROOTFS_RECIPE=3
INCLUDE=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,openssh-server,ca-certificates,iproute2,procps,less
DEPS="debootstrap systemd-container iproute2 iptables openssh-client util-linux python3"

log() { printf '%s\n' "$*" >&2; }
die() { log "testhost: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# The Debian mirror this machine's apt already uses (deb822 .sources or one-line .list), unless set.
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local m
  m=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
  [ -n "$m" ] || die "no Debian mirror found in /etc/apt; set DEBIAN_MIRROR"
  echo "$m"
}

debian_security_mirror() {
  if [ -n "${DEBIAN_SECURITY_MIRROR:-}" ]; then echo "$DEBIAN_SECURITY_MIRROR"; return; fi
  local m
  m=$(awk '/^URIs:/ && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1=="deb" && $0 ~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
  [ -n "$m" ] || { m=${1%/}; m=${m%/debian}/debian-security; }
  echo "$m"
}

cmd_deps() {
  need_root
  local missing=()
  for p in $DEPS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

cmd_key() {
  local k=$STATE/ssh/id_ed25519
  if [ ! -s "$k" ]; then
    install -d -m 700 "$STATE/ssh"
    ssh-keygen -q -t ed25519 -N '' -C llamafleet-testhosts -f "$k" >/dev/null
  fi
  echo "$k"
}

# Base image: debootstrap + settings shared by every host. Built into a temporary directory and
# renamed at the end, so an interrupted build never leaves a half image under the final name.
cmd_rootfs() {
  need_root
  local suite=${1:?suite}
  local dest=$CACHE/rootfs/$suite stamp="recipe=$ROOTFS_RECIPE include=$INCLUDE"
  mkdir -p "$CACHE/rootfs"
  exec 9>"$CACHE/rootfs/.$suite.lock"; flock 9
  if [ -f "$dest/.llamafleet-rootfs" ] && [ "$(cat "$dest/.llamafleet-rootfs")" = "$stamp" ]; then
    echo "$dest"; return
  fi
  cmd_deps
  local tmp=$CACHE/rootfs/.$suite.tmp mirror t0
  rm -rf "$tmp"; mirror=$(debian_mirror); t0=$(date +%s)
  log "debootstrap $suite from $mirror"
  debootstrap --variant=minbase --include="$INCLUDE" "$suite" "$tmp" "$mirror" >"$CACHE/rootfs/.$suite.log" 2>&1 \
    || { tail -20 "$CACHE/rootfs/.$suite.log" >&2; die "debootstrap $suite failed"; }
  log "debootstrap $suite took $(( $(date +%s) - t0 ))s"
  # SSH: root by key only; host keys are made at each host's first boot (never shared between hosts).
  rm -f "$tmp"/etc/ssh/ssh_host_*
  install -d "$tmp/etc/systemd/system/ssh.service.d"
  cat > "$tmp/etc/systemd/system/ssh.service.d/10-llamafleet-hostkeys.conf" <<'EOF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
EOF
  printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
    > "$tmp/etc/ssh/sshd_config.d/10-llamafleet.conf"
  # Unique machine-id per host (generated at boot).
  : > "$tmp/etc/machine-id"; rm -f "$tmp/var/lib/dbus/machine-id"
  chroot "$tmp" systemctl enable systemd-networkd.service >/dev/null 2>&1
  chroot "$tmp" systemctl mask getty@tty1.service console-getty.service serial-getty@ttyS0.service \
    systemd-resolved.service apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true
  # apt: the same mirror, this suite, with updates and security; keep downloaded .debs (each host's
  # archive starts as links to the suite's cache and gives back what it downloaded, see cmd_up).
  rm -f "$tmp/etc/apt/sources.list"
  local sec
  sec=$(debian_security_mirror "$mirror")
  cat > "$tmp/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $sec
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  echo 'APT::Keep-Downloaded-Packages "true";' > "$tmp/etc/apt/apt.conf.d/10-llamafleet-keep-debs"
  rm -f "$tmp/etc/apt/apt.conf.d/docker-clean"
  echo "$stamp" > "$tmp/.llamafleet-rootfs"
  rm -rf "$dest"; mv "$tmp" "$dest"
  echo "$dest"
}

wan_if() { ip route show default | awk '{print $5; exit}'; }

cmd_net_up() {
  need_root
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge
    ip addr add "$GW/24" dev "$BR"
  fi
  ip link set "$BR" up
  sysctl -qw net.ipv4.ip_forward=1
  # Every host's systemd, journald, logind and udev hold inotify instances, all counted for root:
  # the default 128 lets about 21 hosts boot, the next stays "initializing" (fleet-sim at N = 25)
  if [ "$(sysctl -n fs.inotify.max_user_instances)" -lt 4096 ]; then
    sysctl -qw fs.inotify.max_user_instances=4096
  fi
  local out; out=$(wan_if)
  # Outbound NAT so the hosts can reach the Debian mirror; nothing is forwarded towards the hosts.
  iptables -t nat -C POSTROUTING -s "$NET.0/24" ! -d "$NET.0/24" -o "$out" -j MASQUERADE 2>/dev/null \
    || iptables -t nat -A POSTROUTING -s "$NET.0/24" ! -d "$NET.0/24" -o "$out" -j MASQUERADE
  iptables -C FORWARD -i "$BR" -o "$out" -j ACCEPT 2>/dev/null || iptables -A FORWARD -i "$BR" -o "$out" -j ACCEPT
  iptables -C FORWARD -i "$out" -o "$BR" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT 2>/dev/null \
    || iptables -A FORWARD -i "$out" -o "$BR" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
  log "bridge $BR $GW/24 up, NAT via $out"
}

cmd_net_down() {
  need_root
  local out; out=$(wan_if)
  iptables -t nat -D POSTROUTING -s "$NET.0/24" ! -d "$NET.0/24" -o "$out" -j MASQUERADE 2>/dev/null || true
  iptables -D FORWARD -i "$BR" -o "$out" -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -i "$out" -o "$BR" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT 2>/dev/null || true
  ip link del "$BR" 2>/dev/null || true
  log "bridge $BR removed"
}

leader() { # PID (on this machine) of the host's systemd = the child of systemd-nspawn
  local npid; npid=$(cat "$STATE/hosts/$1/nspawn.pid" 2>/dev/null) || return 1
  pgrep -P "$npid" | head -1
}

# cgroup v1 name=systemd + v2 "unified" hierarchies (hybrid layout) or a pure v2 layout.
cgroup_dirs() {
  local name=$1
  if [ -d /sys/fs/cgroup/unified ]; then
    echo "/sys/fs/cgroup/unified/llamafleet-testhosts/$name"
    [ -d /sys/fs/cgroup/systemd ] && echo "/sys/fs/cgroup/systemd/llamafleet-testhosts/$name"
  else
    echo "/sys/fs/cgroup/llamafleet-testhosts/$name"
  fi
}

# Link (copy where the two are on different file systems) the complete .debs of SRC into DST; a
# name DST has already is kept as it is.
link_debs() {
  local src=$1 dst=$2
  find "$src" -maxdepth 1 -name '*.deb' -type f -print0 | xargs -0 -r cp -l -n -t "$dst" 2>/dev/null \
    || find "$src" -maxdepth 1 -name '*.deb' -type f -print0 | xargs -0 -r cp -n -t "$dst"
}

# A host's own apt archive DIR: links to LLAMAFLEET_CACHE/apt/SUITE's packages.
own_apt_archive() {
  local suite=$1 dest=$2
  mkdir -p "$CACHE/apt/$suite/partial" "$dest/partial"
  link_debs "$CACHE/apt/$suite" "$dest"
}

# The packages a host downloaded (DIR, its archive) go into SUITE's cache.
keep_apt_downloads() {
  local dir=$1 suite=$2
  [ -d "$dir" ] && [ -n "$suite" ] || return 0
  mkdir -p "$CACHE/apt/$suite/partial"
  link_debs "$dir" "$CACHE/apt/$suite" || true
}

cmd_up() {
  need_root
  local name=${1:?name} ip=${2:?ip} suite=${3:-bookworm}; shift 3 || shift $#
  [[ $name =~ ^[a-zA-Z0-9][a-zA-Z0-9-]{0,62}$ ]] || die "bad host name: $name"
  local h=$STATE/hosts/$name rootfs key
  if [ -e "$h/nspawn.pid" ] && alive "$(cat "$h/nspawn.pid")"; then log "$name already running"; return 0; fi
  cmd_deps
  rootfs=$(cmd_rootfs "$suite")
  key=$(cmd_key)
  cmd_net_up
  local t0; t0=$(date +%s.%N)
  # a host that fails to come up is torn down again, whatever failed
  _up_ok=0; _up_name=$name
  trap '[ "$_up_ok" = 1 ] || { log "$_up_name failed to come up; tearing it down"; cmd_down "$_up_name" || true; }' EXIT
  # what is left of a host that died without being removed (its root may still be mounted)
  if [ -d "$h" ]; then cmd_down "$name" >/dev/null 2>&1 || true; fi
  rm -rf "$h"; mkdir -p "$h"/{upper,work,root}
  mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$h/upper,workdir=$h/work" "$h/root"
  echo "$name" > "$h/root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" > "$h/root/etc/hosts"
  install -d -m 700 "$h/root/root/.ssh"
  install -m 600 "$key.pub" "$h/root/root/.ssh/authorized_keys"
  grep -E '^nameserver' /etc/resolv.conf > "$h/root/etc/resolv.conf" || echo "nameserver $GW" > "$h/root/etc/resolv.conf"
  cat > "$h/root/etc/systemd/network/10-host0.network" <<EOF
[Match]
Name=host0
[Network]
Address=$ip/24
Gateway=$GW
LinkLocalAddressing=no
EOF
  # apt: the host's own archive, hard links to the suite's cached packages (no copy, no download).
  # One archive shared by hosts that install at once means one archive lock: they wait for each
  # other or give up ("Could not get lock /var/cache/apt/archives/lock"), which no real fleet
  # does. What the host downloads goes back into the cache when it is removed (cmd_down).
  own_apt_archive "$suite" "$h/apt"
  echo "$suite" > "$h/suite"
  local binds=("--bind=$h/apt:/var/cache/apt/archives") b src dst ro
  for b in "$@"; do
    IFS=: read -r src dst ro <<<"$b"
    [[ $src = /* ]] || src=$CACHE/$src
    [ -e "$src" ] || mkdir -p "$src"
    if [ "$ro" = ro ]; then binds+=("--bind-ro=$src:$dst"); else binds+=("--bind=$src:$dst"); fi
  done
  # PID 1 of this machine may not be systemd: no machined registration, keep our own cgroup, and give
  # every host its own cgroup (else all hosts share one and their systemds trample on each other).
  local d; CGS=$(cgroup_dirs "$name" | tr '\n' ' '); export CGS
  # the veth of an earlier host of this name can outlive it for a moment (its network namespace is
  # freed after its last process): systemd-nspawn would refuse to boot ("File exists")
  if [ ${#name} -le 12 ] && ip link show "vb-$name" >/dev/null 2>&1; then
    ip link del "vb-$name" 2>/dev/null || true
  fi
  for d in $CGS; do mkdir -p "$d"; done
  # shellcheck disable=SC2016
  setsid sh -c 'for d in $CGS; do echo $$ > "$d/cgroup.procs"; done; exec "$@"' sh \
    systemd-nspawn --quiet --boot --register=no --keep-unit --link-journal=no --console=read-only \
      --machine="$name" --directory="$h/root" --network-bridge="$BR" "${binds[@]}" \
      </dev/null >"$h/console.log" 2>&1 &
  echo $! > "$h/nspawn.pid"
  echo "$ip" > "$h/ip"
  local i l st=""
  for i in $(seq 1 600); do
    l=$(leader "$name" || true)
    if [ -n "$l" ]; then
      st=$(nsenter -t "$l" -a systemctl is-system-running 2>/dev/null || true)
      case "$st" in running|degraded) break ;; esac
    fi
    alive "$(cat "$h/nspawn.pid")" || { tail -20 "$h/console.log" >&2; die "$name: systemd-nspawn exited"; }
    sleep 0.1
  done
  case "$st" in running|degraded) ;; *) die "$name did not finish booting (state: ${st:-none})" ;; esac
  _up_ok=1
  log "$name up: ip=$ip suite=$suite state=$st boot=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')s"
}

cmd_down() {
  need_root
  local name=${1:?name} h=$STATE/hosts/${1:-} p i
  if [ -e "$h/nspawn.pid" ]; then
    p=$(cat "$h/nspawn.pid")
    # A test host is thrown away with everything on it: no orderly poweroff (systemd-nspawn turns
    # SIGTERM into one, about 10 s a host of stopping services whose state is deleted next), the
    # container and then everything in its cgroup tree are killed at once.
    # (alive: a zombie is gone; where PID 1 reaps orphans late, one may linger)
    if alive "$p"; then
      kill -KILL "$p"
      for i in $(seq 1 50); do alive "$p" || break; sleep 0.1; done
    fi
  fi
  for d in $(cgroup_dirs "$name"); do
    if [ -d "$d" ]; then
      # anything left in the host's cgroup tree (e.g. after a SIGKILL) is killed by its cgroup, not by name
      # (and waited for, up to 5 s: the host's network goes with its last process)
      for i in $(seq 1 25); do
        [ -z "$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
        find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        sleep 0.2
      done
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
  done
  if [ -d "$h/root" ]; then
    mountpoint -q "$h/root" && { umount "$h/root" 2>/dev/null || umount -l "$h/root"; }
  fi
  keep_apt_downloads "$h/apt" "$(cat "$h/suite" 2>/dev/null || true)"
  rm -rf "$h"
  log "$name down"
}

alive() { # PID runs (a zombie does not count)
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]
}

cmd_serve() {
  local dir=${1:?dir} port=${2:-8731} pidf
  dir=$(realpath "$dir"); pidf=$STATE/http-$port.pid
  mkdir -p "$STATE"
  if [ -e "$pidf" ] && alive "$(cat "$pidf")" \
      && grep -q http-range-server "/proc/$(cat "$pidf")/cmdline" 2>/dev/null; then
    [ "$(cat "$STATE/http-$port.dir" 2>/dev/null)" = "$dir" ] && return 0
    die "port $port already serves $(cat "$STATE/http-$port.dir" 2>/dev/null); choose another port"
  fi
  # the bridge address must exist before the server can bind it
  cmd_net_up
  # a static server that honours Range requests (resumed downloads), bound to the bridge only
  setsid python3 "$(dirname "$(realpath "$0")")/http-range-server.py" "$GW" "$port" "$dir" \
    </dev/null >"$STATE/http-$port.log" 2>&1 &
  echo $! > "$pidf"; echo "$dir" > "$STATE/http-$port.dir"
  local i
  # ready = our process still runs and answers HTTP (a bare TCP connect can be accepted by
  # something else on the way when the address is not local)
  for i in $(seq 1 50); do
    alive "$(cat "$pidf")" || break
    python3 -c $'import urllib.request as u, urllib.error as e\ntry: u.urlopen("http://'"$GW:$port"$'/", timeout=1)\nexcept e.HTTPError: pass' 2>/dev/null \
      && { log "serving $dir on http://$GW:$port/"; return 0; }
    sleep 0.1
  done
  rm -f "$pidf" "$STATE/http-$port.dir"
  die "HTTP server did not start: $(tail -5 "$STATE/http-$port.log")"
}

cmd_unserve() { # [PORT]: one server, or every server this script started
  local f pid files
  if [ -n "${1:-}" ]; then files=("$STATE/http-$1.pid"); else files=("$STATE"/http-*.pid "$STATE/http.pid"); fi
  for f in "${files[@]}"; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    # only our own server: a stale file may name a PID that now belongs to something else
    if alive "$pid" && grep -q http-range-server "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
    rm -f "$f" "${f%.pid}.dir"
  done
}

cmd_ssh_config() {
  cat <<EOF
Host $NET.*
  User root
  IdentityFile $(cmd_key)
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
EOF
}

cmd_list() {
  local d n p
  for d in "$STATE"/hosts/*/; do
    [ -e "$d/nspawn.pid" ] || continue
    n=$(basename "$d"); p=$(cat "$d/nspawn.pid")
    if alive "$p"; then echo "$n $(cat "$d/ip") running leader=$(leader "$n")"; else echo "$n $(cat "$d/ip") dead"; fi
  done
}

case "${1:-}" in
  deps) cmd_deps ;;
  rootfs) shift; cmd_rootfs "$@" ;;
  key) cmd_key ;;
  net-up) cmd_net_up ;;
  net-down) cmd_net_down ;;
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  exec) shift; n=${1:?name}; shift; exec nsenter -t "$(leader "$n")" -a "$@" ;;
  serve) shift; cmd_serve "$@" ;;
  unserve) shift; cmd_unserve "$@" ;;
  cleanup) [ -n "$(cmd_list)" ] || { cmd_unserve; cmd_net_down; } ;;
  ssh-config) cmd_ssh_config ;;
  list) cmd_list ;;
  gateway) echo "$GW" ;;
  apt-archive) shift; own_apt_archive "${1:?suite}" "${2:?dir}" ;;
  apt-keep) shift; keep_apt_downloads "${1:?dir}" "${2:?suite}" ;;
  *) sed -n '2,24p' "$0"; exit 2 ;;
esac
