#!/bin/bash
# Build a local apt repository that mirrors the layout of NVIDIA's CUDA repository, for the `cuda`
# Molecule scenario. NVIDIA's repository (developer.download.nvidia.com) cannot be reached from the
# test machines; this is the scenario's one stand-in for an outside service. Everything else is real:
# apt, dpkg, gpg signatures, apt preferences.
#
#   make-cuda-repo.sh OUT BASE_URL
#
# OUT/compute/cuda/repos/<distro>/<arch>/              the "NVIDIA" repository (flat, like NVIDIA's:
#                                                      `deb [signed-by=...] <url>/<distro>/<arch>/ /`)
# OUT/mirror-broken/compute/cuda/repos/<distro>/<arch>/ an internal mirror whose cuda-nvcc-12-8
#                                                      (12.8.93-2) installs an nvcc reporting 12.9
#
# Packages (built with dpkg-deb; versions and names as NVIDIA's):
#   cuda-keyring 1.1-1          the signing key (/usr/share/keyrings/cuda-archive-keyring.gpg) and the
#                               source list, as NVIDIA's cuda-keyring does
#   cuda-nvcc-12-8 12.8.93-1    /usr/local/cuda-12.8/bin/nvcc printing `nvcc --version` of 12.8
#   cuda-toolkit-12-8 12.8.1-1  metapackage -> cuda-nvcc-12-8
#   cuda-nvcc-12-9, cuda-toolkit-12-9 likewise for 12.9
#   cuda-toolkit 12.8.1-1 and 12.9.1-1, unversioned metapackages (what an unpinned upgrade would take)
# and 3bf863cc.pub (the key, armoured). OUT/key-fingerprint and OUT/keyring-sha256.json
# ({"<distro>/<arch>": sha256 of cuda-keyring}) are what molecule.yml pins the role to.
#
# The signing key is a throwaway made at each run (its private part lives in a temporary GNUPGHOME
# that is deleted at the end); nothing secret is ever written to the repository tree or committed.
set -euo pipefail

OUT=${1:?usage: make-cuda-repo.sh OUT BASE_URL}
BASE_URL=${2:?usage: make-cuda-repo.sh OUT BASE_URL}
BASE_URL=${BASE_URL%/}
DISTROS=${CUDA_REPO_DISTROS:-"debian12 debian13 ubuntu2204 ubuntu2404"}

log() { printf '%s\n' "$*" >&2; }

if ! command -v gpg >/dev/null || ! command -v gpgv >/dev/null; then
  log "installing gnupg"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gnupg >/dev/null
fi

DEB_ARCH=$(dpkg --print-architecture)
case "$DEB_ARCH" in
  amd64) REPO_ARCH=x86_64 ;;
  arm64) REPO_ARCH=sbsa ;;
  *) log "unsupported architecture $DEB_ARCH"; exit 1 ;;
esac

WORK=$(mktemp -d)
trap 'gpgconf --homedir "$WORK/gnupg" --kill all >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
export GNUPGHOME=$WORK/gnupg
install -d -m 700 "$GNUPGHOME"

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"

gpg --batch --quiet --passphrase '' --quick-generate-key \
  'llamafleet test CUDA repository (throwaway) <cuda-repo@test.invalid>' ed25519 sign 1d
gpg --batch --export > "$WORK/cuda-archive-keyring.gpg"
gpg --batch --armor --export > "$OUT.tmp/cuda-archive-keyring.asc"

# nvcc that prints NVIDIA's `nvcc --version` text for a release (REL), version (VER) and build date.
write_nvcc() { # FILE REL VER BUILT BUILD
  cat > "$1" <<NVCC
#!/bin/sh
# Stand-in nvcc of the llamafleet cuda test repository: prints the version text of NVIDIA's nvcc.
case "\${1:-}" in
  --version|-V)
    echo 'nvcc: NVIDIA (R) Cuda compiler driver'
    echo 'Copyright (c) 2005-2025 NVIDIA Corporation'
    echo 'Built on $4'
    echo 'Cuda compilation tools, release $2, V$3'
    echo 'Build $5'
    ;;
  *)
    echo 'nvcc fatal   : No input files specified; use option --help for more information' >&2
    exit 1
    ;;
esac
NVCC
  chmod 0755 "$1"
}

# build_deb NAME VERSION ARCH DEPENDS DESCRIPTION [DIR-WITH-FILES]
build_deb() {
  local name=$1 version=$2 arch=$3 depends=$4 desc=$5 files=${6:-} d
  d=$WORK/pkg/$name-$version-$RANDOM
  mkdir -p "$d/DEBIAN"
  [ -z "$files" ] || cp -a "$files/." "$d/"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: llamafleet tests <cuda-repo@test.invalid>"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Section: devel"
    echo "Priority: optional"
    echo "Description: $desc"
    echo " Test package of the llamafleet cuda scenario (a local stand-in for NVIDIA's repository)."
  } > "$d/DEBIAN/control"
  if [ -d "$d/etc" ]; then
    (cd "$d" && find etc -type f | sed 's|^|/|') > "$d/DEBIAN/conffiles"
  fi
  dpkg-deb --root-owner-group -Zgzip --build "$d" "$WORK/out.deb" >/dev/null
  echo "$WORK/out.deb"
}

# nvcc package: NAME VERSION DEB-ARCH CUDA-DIR RELEASE NVCC-VERSION BUILT BUILD
nvcc_pkg() {
  local f=$WORK/files-$1-$RANDOM
  mkdir -p "$f/usr/local/$4/bin"
  write_nvcc "$f/usr/local/$4/bin/nvcc" "$5" "$6" "$7" "$8"
  build_deb "$1" "$2" "$3" "" "CUDA nvcc ($5)" "$f"
}

# Packages, Release, InRelease, Release.gpg of one flat repository directory
index_repo() {
  local dir=$1 deb
  (
    cd "$dir"
    : > Packages
    for deb in *.deb; do
      dpkg-deb --field "$deb"
      echo "Filename: ./$deb"
      echo "Size: $(stat -c %s "$deb")"
      echo "MD5sum: $(md5sum "$deb" | cut -d' ' -f1)"
      echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
      echo
    done >> Packages
    gzip -9nc Packages > Packages.gz
    {
      echo "Origin: NVIDIA"
      echo "Label: NVIDIA CUDA"
      echo "Architecture: $DEB_ARCH"
      echo "Date: $(LC_ALL=C date -u '+%a, %d %b %Y %H:%M:%S UTC')"
      echo "MD5Sum:"
      for f in Packages Packages.gz; do printf ' %s %s %s\n' "$(md5sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"; done
      echo "SHA256:"
      for f in Packages Packages.gz; do printf ' %s %s %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"; done
    } > Release
    gpg --batch --yes --quiet --clearsign -o InRelease Release
    gpg --batch --yes --quiet --detach-sign --armor -o Release.gpg Release
  )
}

make_repo() { # DIR URL DISTRO BROKEN(0|1)
  local dir=$1 url=$2 distro=$3 broken=$4 kf deb
  mkdir -p "$dir"
  # one cuda-keyring package per distro, the same file in both trees (as a mirror copies it), so
  # that one pinned sha256 per "<distro>/<arch>" holds for both
  kf=$WORK/keyring-$distro
  if [ ! -f "$kf.deb" ]; then
    rm -rf "$kf"; mkdir -p "$kf/usr/share/keyrings" "$kf/etc/apt/sources.list.d"
    install -m 0644 "$WORK/cuda-archive-keyring.gpg" "$kf/usr/share/keyrings/cuda-archive-keyring.gpg"
    echo "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] $url/$distro/$REPO_ARCH/ /" \
      > "$kf/etc/apt/sources.list.d/cuda-$distro-$REPO_ARCH.list"
    deb=$(build_deb cuda-keyring 1.1-1 all "" "GPG keyring and source list of the CUDA repository" "$kf")
    mv "$deb" "$kf.deb"
  fi
  cp "$kf.deb" "$dir/cuda-keyring_1.1-1_all.deb"
  # the repository's key file, as NVIDIA publishes 3bf863cc.pub next to its packages
  cp "$OUT.tmp/cuda-archive-keyring.asc" "$dir/3bf863cc.pub"

  if [ "$broken" = 1 ]; then
    # under cuda-12.8, but it is a 12.9 nvcc: the role's version check must catch it. Its own
    # revision (-2) gives it another file name: the test hosts of one suite share apt's archive
    # cache, and apt reuses a cached .deb of the same name and size without downloading it again.
    deb=$(nvcc_pkg cuda-nvcc-12-8 12.8.93-2 "$DEB_ARCH" cuda-12.8 12.9 12.9.86 \
      Tue_May_27_02:21:03_PDT_2025 cuda_12.9.r12.9/compiler.36037853_0)
    mv "$deb" "$dir/cuda-nvcc-12-8_12.8.93-2_$DEB_ARCH.deb"
  else
    deb=$(nvcc_pkg cuda-nvcc-12-8 12.8.93-1 "$DEB_ARCH" cuda-12.8 12.8 12.8.93 \
      Fri_Feb_21_20:23:50_PST_2025 cuda_12.8.r12.8/compiler.35583870_0)
    mv "$deb" "$dir/cuda-nvcc-12-8_12.8.93-1_$DEB_ARCH.deb"
  fi
  deb=$(nvcc_pkg cuda-nvcc-12-9 12.9.86-1 "$DEB_ARCH" cuda-12.9 12.9 12.9.86 \
    Tue_May_27_02:21:03_PDT_2025 cuda_12.9.r12.9/compiler.36037853_0)
  mv "$deb" "$dir/cuda-nvcc-12-9_12.9.86-1_$DEB_ARCH.deb"
  deb=$(build_deb cuda-toolkit-12-8 12.8.1-1 "$DEB_ARCH" "cuda-nvcc-12-8 (>= 12.8.93)" "CUDA Toolkit 12.8 meta-package")
  mv "$deb" "$dir/cuda-toolkit-12-8_12.8.1-1_$DEB_ARCH.deb"
  deb=$(build_deb cuda-toolkit-12-9 12.9.1-1 "$DEB_ARCH" "cuda-nvcc-12-9 (>= 12.9.86)" "CUDA Toolkit 12.9 meta-package")
  mv "$deb" "$dir/cuda-toolkit-12-9_12.9.1-1_$DEB_ARCH.deb"
  deb=$(build_deb cuda-toolkit 12.8.1-1 "$DEB_ARCH" "cuda-toolkit-12-8 (>= 12.8.1)" "CUDA Toolkit meta-package")
  mv "$deb" "$dir/cuda-toolkit_12.8.1-1_$DEB_ARCH.deb"
  deb=$(build_deb cuda-toolkit 12.9.1-1 "$DEB_ARCH" "cuda-toolkit-12-9 (>= 12.9.1)" "CUDA Toolkit meta-package")
  mv "$deb" "$dir/cuda-toolkit_12.9.1-1_$DEB_ARCH.deb"
  index_repo "$dir"
}

for distro in $DISTROS; do
  # the keyring's source list points at the "NVIDIA" URL in both trees, as a real mirror's copy would
  make_repo "$OUT.tmp/compute/cuda/repos/$distro/$REPO_ARCH" "$BASE_URL/compute/cuda/repos" "$distro" 0
  make_repo "$OUT.tmp/mirror-broken/compute/cuda/repos/$distro/$REPO_ARCH" "$BASE_URL/compute/cuda/repos" "$distro" 1
done

# what the scenario pins (molecule.yml reads these files): the key's fingerprint and the sha256 of
# each path's cuda-keyring package
gpg --batch --with-colons --list-keys | awk -F: '$1 == "fpr" { print $10; exit }' > "$OUT.tmp/key-fingerprint"
{
  printf '{'
  sep=
  for distro in $DISTROS; do
    printf '%s"%s/%s": "%s"' "$sep" "$distro" "$REPO_ARCH" \
      "$(sha256sum "$OUT.tmp/compute/cuda/repos/$distro/$REPO_ARCH/cuda-keyring_1.1-1_all.deb" | cut -d' ' -f1)"
    sep=', '
  done
  printf '}\n'
} > "$OUT.tmp/keyring-sha256.json"

rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "CUDA test repository for $DISTROS ($REPO_ARCH) in $OUT, served as $BASE_URL"
echo "$OUT"
