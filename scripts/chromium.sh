#!/usr/bin/env bash
# Installs Debian's chromium package when /usr/bin/chromium is missing and
# prints the browser's path on stdout. The web UI's browser tests drive it
# headless through playwright-core (docs/webui.md); scripts/test.sh calls
# this script and exports the path as TALKIDE_CHROMIUM.
#
#   bin=$(./scripts/chromium.sh)
#
# Installing needs root (these machines run the tests as root) and reaches
# only Debian's package archive. Progress goes to stderr; stdout carries only
# the path. A cold install is about 290 MB in ~130 packages.
set -euo pipefail

bin="${TALKIDE_CHROMIUM:-/usr/bin/chromium}"
log() { echo "chromium: $*" >&2; }

if [ ! -x "$bin" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "$bin is missing and this is not root: install Debian's chromium package (apt-get install chromium)"
    exit 1
  fi
  log "installing Debian's chromium package (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends chromium >&2
  if [ ! -x "$bin" ]; then
    log "apt-get finished but $bin is missing"
    exit 1
  fi
fi

if ! got=$("$bin" --version 2>/dev/null | tail -1); then
  log "$bin --version failed: $got"
  exit 1
fi
log "using $bin ($got)"
echo "$bin"
