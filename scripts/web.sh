#!/usr/bin/env bash
# Builds the web UI (web/) into internal/webui/dist, which is committed so
# that `go run ./cmd/talkide dev` serves it with Go alone (docs/webui.md).
#
#   ./scripts/web.sh            # install the node modules if needed, type-check, rebuild dist
#   ./scripts/web.sh --check    # type-check, rebuild, fail when dist differs from what is committed
#   ./scripts/web.sh --modules  # install if needed, print the node_modules path only
#
# The node modules are installed with `npm ci` from web/package-lock.json
# into ~/.cache/talkide/web-<sha256 of the lockfile> (or under
# $TALKIDE_WEB_CACHE), once per lockfile, and web/node_modules is a symlink
# to them. The browser tests load playwright-core from the same directory
# (TALKIDE_WEB_NODE_MODULES). Progress goes to stderr; with --modules stdout
# carries only the path.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  --modules) mode=modules ;;
  *) echo "usage: $0 [--check|--modules]" >&2; exit 2 ;;
esac

log() { echo "web: $*" >&2; }
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    log "$tool is not on PATH: building the web UI needs Node.js 18+ and npm"
    exit 1
  fi
done

sum=$(cat web/package.json web/package-lock.json | sha256sum | cut -c1-16)
cache="${TALKIDE_WEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talkide}/web-$sum"
if [ ! -f "$cache/.talkide-installed" ]; then
  log "installing the web UI's node modules (npm ci) into $cache"
  rm -rf "$cache"
  mkdir -p "$cache"
  cp web/package.json web/package-lock.json "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$cache/.talkide-installed"
fi
# The symlink lets esbuild (and an editor) resolve the modules from web/.
if [ "$(readlink web/node_modules 2>/dev/null || true)" != "$cache/node_modules" ]; then
  rm -rf web/node_modules
  ln -s "$cache/node_modules" web/node_modules
fi
if [ "$mode" = modules ]; then
  echo "$cache/node_modules"
  exit 0
fi

# The type check: esbuild strips the types without looking at them, so a
# wrong field name or a missing case would otherwise only show in a browser.
log "type-checking web/src (tsc)"
web/node_modules/.bin/tsc -p web/tsconfig.json >&2

out=internal/webui/dist
if [ "$mode" = check ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  node web/build.mjs "$tmp/dist" >&2
  if ! diff -r "$out" "$tmp/dist" >&2; then
    log "$out differs from a fresh build of web/: run ./scripts/web.sh and commit $out"
    exit 1
  fi
  log "$out matches a fresh build"
else
  node web/build.mjs "$out" >&2
  log "built $out"
fi
