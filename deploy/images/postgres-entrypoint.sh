#!/bin/sh
# Starts PostgreSQL in the postgres image: on the first start, initialises
# PGDATA with the user POSTGRES_USER (password POSTGRES_PASSWORD, required)
# and its database, then serves on every address with password
# authentication. Runs as whatever non-root user the pod names.
set -eu
bin=/usr/lib/postgresql/15/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=talkide}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
export PGDATA
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	pw=$(mktemp)
	printf '%s' "$POSTGRES_PASSWORD" >"$pw"
	"$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --auth-local=trust --auth-host=scram-sha-256
	rm -f "$pw"
	echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
	"$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/tmp" -w start
	"$bin/createdb" -h /tmp -U "$POSTGRES_USER" "$POSTGRES_USER"
	"$bin/pg_ctl" -D "$PGDATA" -m fast -w stop
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
