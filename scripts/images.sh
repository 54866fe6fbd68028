#!/usr/bin/env bash
# Builds the platform's container images from the working tree without
# Docker, as OCI image archives that `ctr images import` takes, and prints
# one line per image on stdout: NAME ARCHIVE.
#
#   ./scripts/images.sh            # every image, tag dev
#   TALKIDE_IMAGE_TAG=x ./scripts/images.sh talkide worker
#
# The images (deploy/Dockerfile builds the same ones with Docker):
#   docker.io/talkide/talkide   the control-plane and the model simulator:
#                               the static talkide binary, CA certificates,
#                               a nonroot user (65532); as distroless's
#   docker.io/talkide/worker    Debian 12's essential packages plus
#                               deploy/images/worker.packages, talkide and
#                               talkide-sandbox beside it
#   docker.io/talkide/builder   Debian 12 plus deploy/images/builder.packages
#                               (a JDK, JUnit): the Gradle build Jobs' image
#   docker.io/talkide/postgres  Debian 12 plus PostgreSQL 15, for a cluster
#                               without a database of its own
#   docker.io/talkide/pause     the pod sandbox's process (deploy/pause)
#
# A Debian userland is made by mmdebstrap from Debian's mirror (bookworm and
# bookworm-security), installed when missing (as root), and cached by the
# hash of its package list under ~/.cache/talkide/images; the versions the
# mirror served are written into the image at /etc/talkide-packages and next
# to the cache. The Go binaries are built static from the working tree at
# every run; an image whose inputs did not change is not written again. The
# images are assembled by deploy/imagebuild (go-containerregistry).
set -euo pipefail
cd "$(dirname "$0")/.."

tag="${TALKIDE_IMAGE_TAG:-dev}"
cache="${TALKIDE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talkide/images}"
suite=bookworm
mirror="${TALKIDE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${TALKIDE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"

log() { echo "images: $*" >&2; }
die() { log "$*"; exit 1; }

all=(talkide worker builder postgres pause)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for w in "${want[@]}"; do
  case " ${all[*]} " in *" $w "*) ;; *) die "unknown image $w (images: ${all[*]})" ;; esac
done

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

export GOTOOLCHAIN=local GOWORK=off
bin="$cache/bin"
mkdir -p "$bin"

# hashof prints a short hash of its arguments' contents (files) or text.
hashof() { sha256sum "$@" | sha256sum | cut -c1-16; }

gobuild() { # OUT PACKAGE
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1.new" "$2" && mv "$1.new" "$1"
}

# rootfs NAME: a Debian userland with deploy/images/NAME.packages, as a
# tarball; prints its path.
rootfs() {
  local name=$1 list="deploy/images/$1.packages" key pkgs out
  pkgs=$(grep -v '^#' "$list" | xargs | tr ' ' ',')
  key=$( (cat "$list"; echo "$suite v1") | sha256sum | cut -c1-16)
  out="$cache/rootfs-$name-$key.tar"
  if [ ! -s "$out" ]; then
    if ! command -v mmdebstrap >/dev/null 2>&1; then
      [ "$(id -u)" = 0 ] || die "mmdebstrap is missing (Debian package mmdebstrap); run as root to install it"
      log "installing mmdebstrap"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2 ||
        { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2; } ||
        die "apt-get install mmdebstrap failed"
    fi
    [ "$(id -u)" = 0 ] || die "building a Debian userland needs root (mmdebstrap --mode=root)"
    log "building the $name userland ($pkgs) with mmdebstrap"
    local start; start=$(date +%s)
    # A nonroot user (65532, distroless's) for pods that run as it: a
    # process whose uid has no name trips up initdb, git and whoami.
    mmdebstrap --quiet --mode=root --variant=essential --include="$pkgs" \
      --customize-hook='echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/bin/bash" >>"$1/etc/passwd"' \
      --customize-hook='echo "nonroot:x:65532:" >>"$1/etc/group"' \
      --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" >"$1/etc/talkide-packages"' \
      --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
      "$suite" "${out%.tar}.new.tar" "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main" >&2 ||
      die "mmdebstrap of the $name userland failed"
    mv "${out%.tar}.new.tar" "$out"
    tar -xOf "$out" ./etc/talkide-packages >"$out.packages"
    log "the $name userland: $(wc -l <"$out.packages") packages in $(( $(date +%s) - start ))s"
  fi
  echo "$out"
}

# image NAME HASH-INPUTS... -- IMAGEBUILD-ARGS...: assembles one image
# unless an archive with the same inputs exists; prints "REF ARCHIVE".
image() {
  local name=$1; shift
  local inputs=()
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  local ref="docker.io/talkide/$name:$tag" key out
  key=$( (hashof "${inputs[@]}" deploy/imagebuild/main.go; echo "$ref $*") | sha256sum | cut -c1-16)
  out="$cache/$name-$key.tar"
  if [ ! -s "$out" ]; then
    log "assembling $ref"
    "$bin/imagebuild" -o "$out" -name "$ref" "$@" || die "imagebuild $ref failed"
    # Older archives of the same image are no longer wanted.
    find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$(basename "$out")" -delete
  fi
  echo "$ref $out"
}

log "building talkide, talkide-sandbox, pause and imagebuild from the working tree"
gobuild "$bin/talkide" ./cmd/talkide
gobuild "$bin/talkide-sandbox" ./cmd/talkide-sandbox
gobuild "$bin/pause" ./deploy/pause
gobuild "$bin/imagebuild" ./deploy/imagebuild

for w in "${want[@]}"; do
  case "$w" in
    pause)
      image pause "$bin/pause" -- -file /pause="$bin/pause":0755 -user 65535:65535 -entrypoint /pause
      ;;
    talkide)
      base=$(rootfs worker)
      # Of a Debian userland only what a static binary needs: the CA
      # certificates and the user and group files.
      certs="$cache/base-files-$(basename "$base" .tar)"
      if [ ! -d "$certs" ]; then
        mkdir -p "$certs.new"
        tar -xf "$base" -C "$certs.new" ./etc/ssl/certs/ca-certificates.crt ./etc/passwd ./etc/group ./etc/talkide-packages
        mv "$certs.new" "$certs"
      fi
      image talkide "$bin/talkide" "$certs/etc/ssl/certs/ca-certificates.crt" "$certs/etc/passwd" -- \
        -file /talkide="$bin/talkide":0755 \
        -file /etc/ssl/certs/ca-certificates.crt="$certs/etc/ssl/certs/ca-certificates.crt":0644 \
        -file /etc/passwd="$certs/etc/passwd":0644 -file /etc/group="$certs/etc/group":0644 \
        -file /etc/talkide-packages="$certs/etc/talkide-packages":0644 \
        -dir /tmp:1777 -dir /home/nonroot:0755 \
        -user 65532:65532 -entrypoint /talkide -env HOME=/home/nonroot
      ;;
    worker)
      fs=$(rootfs worker)
      image worker "$fs" "$bin/talkide" "$bin/talkide-sandbox" -- -rootfs "$fs" \
        -file /talkide="$bin/talkide":0755 -file /talkide-sandbox="$bin/talkide-sandbox":0755 \
        -user 65532:65532 -entrypoint /talkide -env HOME=/tmp
      ;;
    builder)
      fs=$(rootfs builder)
      image builder "$fs" -- -rootfs "$fs" -user 65532:65532 -env HOME=/tmp \
        -env JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 -cmd /bin/bash
      ;;
    postgres)
      fs=$(rootfs postgres)
      image postgres "$fs" deploy/images/postgres-entrypoint.sh -- -rootfs "$fs" \
        -file /usr/local/bin/postgres-entrypoint="deploy/images/postgres-entrypoint.sh":0755 \
        -user 65532:65532 -env PGDATA=/var/lib/postgresql/data -entrypoint /usr/local/bin/postgres-entrypoint
      ;;
  esac
done
