#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests (docs/storage.md).
#
#   eval "$(./scripts/testdb.sh start)"  # start one; prints export lines for
#                                        # TALKIDE_TEST_DATABASE_URL and TALKIDE_TESTDB_DIR
#   go test ./internal/store/...
#   ./scripts/testdb.sh stop             # stop it, remove $TALKIDE_TESTDB_DIR
#
# scripts/test.sh does this itself when TALKIDE_TEST_DATABASE_URL is unset.
#
# The server: the newest Debian server binaries under
# /usr/lib/postgresql/*/bin (or $TALKIDE_PG_BINDIR, or initdb on PATH;
# `apt-get install postgresql` when none is found and we are root), a new
# cluster in a temp dir (in /dev/shm when it has room), run by an unprivileged user (PostgreSQL refuses to run
# as root: as root it runs as the user postgres, which is created if missing),
# listening on 127.0.0.1 at a free port and on a unix socket in that dir, trust
# authentication, fsync off. Nothing about it is fit for data you want to keep.
#
# The cluster's default collation is ICU's en-US where the server supports it,
# as on a typical production database, so that tests catch queries that
# depend on a byte-order ("C") collation without saying so.
#
# Progress goes to stderr; stdout carries only the export lines.
set -euo pipefail

log() { echo "testdb: $*" >&2; }
die() { log "$*"; exit 1; }

# now_ms prints the time in milliseconds.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# has_server tells whether directory $1 holds the server binaries.
has_server() { [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ] && [ -x "$1/pg_isready" ]; }

# find_bindir prints the directory of the newest server binaries.
find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4,4 -n -r); do
    if has_server "$d"; then
      echo "$d"; return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1 && has_server "$(dirname "$(command -v initdb)")"; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

# as_user runs a command as the server's user ($pguser, or ourselves).
as_user() {
  if [ -z "${pguser:-}" ]; then
    (cd / && "$@")
  elif command -v runuser >/dev/null 2>&1; then
    (cd / && runuser -u "$pguser" -- "$@")
  else
    (cd / && su -s /bin/sh "$pguser" -c "$(printf '%q ' "$@")")
  fi
}

start() {
  local t0 bindir base dir port version attempt ready
  t0=$(now_ms)

  if [ -n "${TALKIDE_PG_BINDIR:-}" ]; then
    bindir=$TALKIDE_PG_BINDIR
    has_server "$bindir" || die "TALKIDE_PG_BINDIR=$bindir holds no initdb, pg_ctl, postgres and pg_isready"
  elif ! bindir=$(find_bindir); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      log "no PostgreSQL server binaries: installing the Debian package postgresql"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >&2
      apt-get install -y -qq postgresql >&2 </dev/null
      bindir=$(find_bindir) || die "apt-get installed postgresql, but no initdb was found under /usr/lib/postgresql/*/bin"
    else
      die "no PostgreSQL server binaries (initdb, pg_ctl, postgres) under /usr/lib/postgresql/*/bin or on PATH.
  Install them (Debian: sudo apt-get install -y postgresql), or point TALKIDE_TEST_DATABASE_URL
  at a PostgreSQL of your own, or set TALKIDE_TEST_DATABASE_URL=skip to skip the PostgreSQL tests."
    fi
  fi
  version=$("$bindir/postgres" --version | sed 's/[^0-9]*\([0-9]*\).*/\1/')

  # PostgreSQL refuses to run as root.
  pguser=
  base=${TMPDIR:-/tmp}
  if [ "$(id -u)" = 0 ]; then
    pguser=${TALKIDE_PG_USER:-postgres}
    if ! id -u "$pguser" >/dev/null 2>&1; then
      log "creating the system user $pguser to run PostgreSQL"
      useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$pguser" >&2
    fi
    base=/tmp # root's TMPDIR may be closed to $pguser
  fi
  # Memory is faster than disk (initdb: 0.35 s instead of 1.1 s here) and
  # nothing needs to survive: /dev/shm when it has room.
  if [ -d /dev/shm ] && [ -w /dev/shm ] &&
      [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')" -ge 524288 ] 2>/dev/null; then
    base=/dev/shm
  fi

  dir=$(mktemp -d "$base/talkide-pg.XXXXXXXX")
  # From here on, a failure removes what was made.
  trap 'stop_dir "$dir" >/dev/null 2>&1 || true' EXIT
  echo "$bindir" >"$dir/bindir"
  echo "${pguser}" >"$dir/user"
  chmod 700 "$dir"
  if [ -n "$pguser" ]; then
    chown "$pguser" "$dir"
  fi

  local initdb_args=(-D "$dir/data" -U postgres -A trust -E UTF8 --no-sync)
  if [ "$version" -ge 15 ] && as_user "$bindir/initdb" "${initdb_args[@]}" \
      --locale=C.UTF-8 --locale-provider=icu --icu-locale=en-US >"$dir/initdb.log" 2>&1; then
    :
  else
    rm -rf "$dir/data"
    as_user "$bindir/initdb" "${initdb_args[@]}" --locale=C >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  fi

  cat >>"$dir/data/postgresql.conf" <<EOF

# scripts/testdb.sh: a throwaway server for tests.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
log_min_messages = warning
EOF

  # A free port: pick one nobody answers on; if another process takes it
  # before the server binds it, try again.
  ready=
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      continue
    fi
    if as_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -o "-p $port" -w -t 30 -s start >&2; then
      ready=1
      break
    fi
    grep -q "could not bind\|already in use" "$dir/postgres.log" 2>/dev/null ||
      { cat "$dir/postgres.log" >&2; die "PostgreSQL did not start"; }
    log "port $port was taken; trying another"
  done
  [ -n "$ready" ] || die "PostgreSQL did not start: no free port found"
  "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -t 10 || die "PostgreSQL started but is not ready"
  echo "$port" >"$dir/port"

  trap - EXIT
  log "PostgreSQL $version ready on 127.0.0.1:$port in $(( $(now_ms) - t0 )) ms (data in $dir)"
  echo "export TALKIDE_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
  echo "export TALKIDE_TESTDB_DIR='$dir'"
}

# stop_dir stops the server of dir, if it runs, and removes dir.
stop_dir() {
  local dir=$1 bindir
  case "$(basename "$dir")" in
    talkide-pg.*) ;;
    *) die "refusing to remove $dir: not a directory made by testdb.sh" ;;
  esac
  [ -d "$dir" ] || return 0
  [ -f "$dir/bindir" ] || die "refusing to remove $dir: not a directory made by testdb.sh"
  bindir=$(cat "$dir/bindir")
  pguser=$(cat "$dir/user" 2>/dev/null || true)
  if [ -f "$dir/data/postmaster.pid" ]; then
    # immediate: nothing here needs a clean shutdown.
    as_user "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 30 -s stop >&2 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start)
    start
    ;;
  stop)
    dir=${2:-${TALKIDE_TESTDB_DIR:-}}
    [ -n "$dir" ] || die "stop: which server? give its directory or set TALKIDE_TESTDB_DIR"
    stop_dir "$dir"
    log "stopped; removed $dir"
    ;;
  *)
    echo "usage: eval \"\$($0 start)\"   |   $0 stop [DIR]" >&2
    exit 2
    ;;
esac
