#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the tune storage tests and print its URL on stdout.
# Usage: url=$(bash .ci/postgres.sh start DIR); ...; bash .ci/postgres.sh stop DIR
# Uses the machine's PostgreSQL (Debian's postgresql package; installed here when absent). initdb
# refuses to run as root, so the server runs as the 'postgres' user when CI is root. It listens on
# a Unix socket in DIR and on 127.0.0.1 at a free port, trusting local connections.
set -euo pipefail
action=$1
dir=$2

bin_dir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$found" ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  fi
  [ -n "$found" ] || { echo "postgres.sh: no PostgreSQL server binaries (initdb, pg_ctl) found" >&2; exit 1; }
  echo "$found"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$action" in
  start)
    bin=$(bin_dir)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >&2
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres vk_tune >&2
    echo "postgresql://postgres@127.0.0.1:$port/vk_tune"
    ;;
  stop)
    bin=$(bin_dir)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast stop >&2 || true
    ;;
  *)
    echo "usage: postgres.sh start|stop DIR" >&2
    exit 2
    ;;
esac
