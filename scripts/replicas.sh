#!/usr/bin/env bash
# Starts N talkgraph replicas on this machine (ports 8081, 8082, …) on one PostgreSQL
# database and one NATS server, the way several machines would run behind a load balancer,
# and stops them all on Ctrl-C.
#
#   bash scripts/replicas.sh [N]        # N defaults to 3
#
# Settings (environment):
#   DATABASE_URL  the shared database (default postgres://postgres@127.0.0.1:5432/talkgraph_replicas,
#                 created if missing)
#   NATS_URL      the shared NATS server (default nats://127.0.0.1:4222)
#   AUTH_SECRET   the token secret every replica uses (default: one generated once and kept
#                 in LOG_DIR/auth_secret)
#   RUN_LEASE     how long a dead replica's runs stay its own (default 15s)
#   LOG_DIR       where each replica's log goes (default ./data/replicas)
#   BASE_PORT     the first replica's port (default 8081)
# Any other talkgraph setting in the environment applies to every replica.
#
# PostgreSQL and NATS must be running: bash scripts/services.sh starts this machine's.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-3}
base_port=${BASE_PORT:-8081}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/talkgraph_replicas?sslmode=disable}
export NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}
export RUN_LEASE=${RUN_LEASE:-15s}
log_dir=${LOG_DIR:-./data/replicas}
mkdir -p "$log_dir"
if [ -z "${AUTH_SECRET:-}" ]; then # one secret for every replica, kept across runs
  [ -s "$log_dir/auth_secret" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$log_dir/auth_secret"
  AUTH_SECRET=$(cat "$log_dir/auth_secret")
fi
export AUTH_SECRET

# The database, created when missing (psql against the same server, its "postgres" database).
db=$(sed -E 's#^[a-z]+://[^/]*/([^?]*).*#\1#' <<<"$DATABASE_URL")
admin_url=$(sed -E "s#^([a-z]+://[^/]*/)[^?]*#\1postgres#" <<<"$DATABASE_URL")
if command -v psql >/dev/null; then
  if ! psql "$admin_url" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    psql "$admin_url" -qc "CREATE DATABASE \"$db\"" && echo "created database $db"
  fi
else
  echo "psql not found: the database $db must exist already" >&2
fi

echo "building talkgraph…"
bin=$(mktemp -d)/talkgraph
go build -o "$bin" .

pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping ${#pids[@]} replicas…"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
  rm -f "$bin"
  exit 0
}
trap stop INT TERM EXIT

for i in $(seq 0 $((n - 1))); do
  port=$((base_port + i))
  id="replica-$port"
  PORT=$port REPLICA_ID=$id DATA_DIR="$log_dir/$id" "$bin" >"$log_dir/$id.log" 2>&1 &
  pids+=($!)
  echo "$id: http://localhost:$port (log: $log_dir/$id.log)"
done

# Ready when every /readyz answers.
for i in $(seq 0 $((n - 1))); do
  port=$((base_port + i))
  for _ in $(seq 1 100); do
    if curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "replica-$port exited:" >&2
      tail -5 "$log_dir/replica-$port.log" >&2
      exit 1
    fi
    sleep 0.1
  done
done
echo "$n replicas ready on $(sed -E 's#//[^@]*@#//#' <<<"$DATABASE_URL") and $NATS_URL; Ctrl-C stops them"
wait -n "${pids[@]}" || true
echo "a replica exited; see its log. Stopping the others." >&2
