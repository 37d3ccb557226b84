#!/usr/bin/env bash
# Measures two builds of the server against each other in one sitting: for each round, in
# an order shuffled anew each time, it starts each build on a fresh data directory with the
# load settings of docs/PERFORMANCE.md, runs talkgraph-load's scenarios against it, and
# stops it. Every run's figures go to OUT/<name>-<round>-<scenarios>.json, one JSON object
# each, for comparing medians and ranges afterwards.
#
#   bash scripts/loadpair.sh OUT ROUNDS SCENARIOS NAME=SERVER_BINARY NAME=SERVER_BINARY [-- LOAD FLAGS]
#
# e.g. after `go build -o /tmp/old/talkgraph .` on the old commit and the same for the new:
#   bash scripts/loadpair.sh /tmp/pair 3 paced,burst old=/tmp/old/talkgraph new=/tmp/new/talkgraph
# The load generator is built from this checkout. Set DATABASE_URL=memory: for the
# in-memory store; every other variable of the environment reaches both servers.
#
# With REPLICAS=N (N > 1) each build runs as N replicas on a fresh PostgreSQL database and
# the machine's NATS (bash scripts/services.sh starts them), on ports from PORT on, and the
# load is given every replica's URL; add -cross after -- to make every session cross
# between two of them. The load then reads PostgreSQL's CPU too (its server runs on this
# machine): every figure has the database's share and the total beside the replicas'.
# REPLICA_DB_ADDR is the address the replicas reach PostgreSQL at (127.0.0.1:5432 by
# default), e.g. scripts/delayproxy's, to measure a database across a network.
# With WARMUP=1 each server first takes the same load once, unmeasured.
# The replicas share this machine's cores as containers with a CPU limit would: each is
# given GOMAXPROCS=max(1, cores / N), unless GOMAXPROCS is set (docs/OPERATIONS.md says
# why: N Go schedulers that each think they own every core spend the cores switching).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 5 ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=$1 rounds=$2 scenarios=$3
shift 3
builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")

mkdir -p "$out"
load="$out/talkgraph-load"
go build -o "$load" ./cmd/talkgraph-load

port=${PORT:-18080}
replicas=${REPLICAS:-1}
procs=()
if [ "$replicas" -gt 1 ] && [ -z "${GOMAXPROCS:-}" ]; then
  share=$(( $(nproc) / replicas ))
  procs=("GOMAXPROCS=$(( share > 0 ? share : 1 ))")
  echo "each of the $replicas replicas runs with ${procs[0]} (its share of $(nproc) cores)" >&2
fi
secret=load-test-secret-0123
for round in $(seq 1 "$rounds"); do
  for build in $(printf '%s\n' "${builds[@]}" | shuf); do
    name=${build%%=*} bin=${build#*=}
    data=$(mktemp -d)
    env=()
    if [ "$replicas" -gt 1 ]; then
      db="loadpair_$(date +%s%N)"
      psql "postgres://postgres@127.0.0.1:5432/postgres" -qc "CREATE DATABASE $db"
      env=("DATABASE_URL=postgres://postgres@${REPLICA_DB_ADDR:-127.0.0.1:5432}/$db?sslmode=disable" "NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}")
    fi
    dbpid=()
    if [ "$replicas" -gt 1 ]; then
      pgdata=$(psql "postgres://postgres@127.0.0.1:5432/postgres" -Atc "SHOW data_directory")
      dbpid=(-db-pid "$(head -1 "$pgdata/postmaster.pid")")
    fi
    pids=() urls=()
    for i in $(seq 0 $((replicas - 1))); do
      p=$((port + i))
      env "${env[@]}" "${procs[@]}" AUTH_SECRET=$secret WORKERS=2000 DEMO_CHUNK_DELAY=25ms ANON_RATE_LIMIT=100000 \
        ANON_RATE_BURST=100000 RATE_LIMIT=1000 RATE_BURST=1000 SUBSCRIBE_BURST=100000 \
        MAX_SOCKETS_PER_ADDRESS=100000 MAX_SUBSCRIPTIONS_PER_ADDRESS=100000 MAX_BODY_READS_PER_ADDRESS=100000 \
        PORT=$p REPLICA_ID="$name-$p" DATA_DIR="$data/$i" LOG_LEVEL=warn "$bin" >"$data/server-$i.log" 2>&1 &
      pids+=($!) urls+=("http://127.0.0.1:$p")
    done
    for u in "${urls[@]}"; do
      for _ in $(seq 1 100); do
        curl -sf "$u/readyz" >/dev/null && break
        sleep 0.1
      done
    done
    if [ -n "${WARMUP:-}" ]; then
      # The same load once, unmeasured: the servers, PostgreSQL's connections and caches
      # as they are after a while, not at their first requests.
      "$load" -url "$(IFS=,; echo "${urls[*]}")" -auth-secret $secret -scenario "$scenarios" \
        -json -quiet "${extra[@]}" >/dev/null || echo "  the warm-up reported errors" >&2
    fi
    file="$out/$name-$round-${scenarios//,/+}.json"
    echo "round $round: $name ($scenarios) -> $file" >&2
    if ! "$load" -url "$(IFS=,; echo "${urls[*]}")" -auth-secret $secret -scenario "$scenarios" \
      -json -quiet "${dbpid[@]}" "${extra[@]}" >"$file"; then
      echo "  the load generator reported errors (see $file)" >&2
    fi
    kill "${pids[@]}"
    wait "${pids[@]}" 2>/dev/null || true
    if [ "$replicas" -gt 1 ]; then
      psql "postgres://postgres@127.0.0.1:5432/postgres" -qc "DROP DATABASE $db WITH (FORCE)"
    fi
    rm -rf "$data"
  done
done
