#!/usr/bin/env bash
# Starts the services the replica tests need on this machine, when they are installed and
# not running yet: PostgreSQL (127.0.0.1:5432, Debian's cluster) and NATS with JetStream
# (127.0.0.1:4222). Tests that need them skip without them, except under CI=true, where
# they fail. Nothing is installed here; see "Running several replicas" in docs/OPERATIONS.md.
set -uo pipefail

up() { # up HOST PORT: is something listening?
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_up() { # wait_up NAME HOST PORT
  for _ in $(seq 1 50); do
    up "$2" "$3" && { echo "$1: up on $2:$3"; return 0; }
    sleep 0.2
  done
  echo "$1: not reachable on $2:$3" >&2
  return 1
}

status=0
if up 127.0.0.1 5432; then
  echo "PostgreSQL: up on 127.0.0.1:5432"
elif command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  wait_up PostgreSQL 127.0.0.1 5432 || status=1
else
  echo "PostgreSQL: not installed (apt-get install postgresql), its tests will skip" >&2
fi

if up 127.0.0.1 4222; then
  echo "NATS: up on 127.0.0.1:4222"
elif [ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null; then
  bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  mkdir -p /var/lib/nats-server 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec "$bin" -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server
  wait_up NATS 127.0.0.1 4222 || status=1
else
  echo "NATS: not installed (apt-get install nats-server), its tests will skip" >&2
fi
exit $status
