#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (npm package @anthropic-ai/claude-code)
# when it is missing, and prints the path of its `claude` executable on
# stdout. The Claude Code harness's tests run it against the model simulator
# (docs/harnesses.md); scripts/test.sh calls this script and exports the path
# as TALKIDE_CLAUDE_CODE_BIN.
#
#   bin=$(./scripts/claude-code.sh)      # install if needed, print the path
#   TALKIDE_CLAUDE_CODE_VERSION=x.y.z ./scripts/claude-code.sh
#
# The package goes to ~/.cache/talkide/claude-code-<version> (or
# $TALKIDE_CLAUDE_CODE_DIR), with `npm install --prefix`; npm reaches only
# the npm registry. Node.js 18 or newer must be on PATH. Progress goes to
# stderr; stdout carries only the path.
set -euo pipefail

version="${TALKIDE_CLAUDE_CODE_VERSION:-2.1.328}"
dir="${TALKIDE_CLAUDE_CODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/talkide/claude-code-$version}"
bin="$dir/node_modules/.bin/claude"

log() { echo "claude-code: $*" >&2; }

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    log "$tool is not on PATH: the Claude Code CLI needs Node.js 18+ and npm"
    exit 1
  fi
done

# A finished install leaves a marker; a half-done one (interrupted npm) is
# redone from scratch.
if [ ! -x "$bin" ] || [ ! -f "$dir/.talkide-installed" ]; then
  log "installing @anthropic-ai/claude-code@$version into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  DISABLE_AUTOUPDATER=1 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$version" >&2
  if [ ! -x "$bin" ]; then
    log "npm finished but $bin is missing"
    exit 1
  fi
  touch "$dir/.talkide-installed"
fi

# The CLI must run here; its version line is cheap and offline.
if ! got=$(DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "$bin" --version 2>&1); then
  log "$bin --version failed: $got"
  exit 1
fi
log "using $bin ($got)"
echo "$bin"
