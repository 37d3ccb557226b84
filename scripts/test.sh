#!/usr/bin/env bash
# Every Go test, with the race detector, as CI runs them: go test -race -count=1 -timeout
# 30m ./... (extra arguments go to go test, e.g. -run TestTree). It shows each package's
# result and the output of what failed, as go test does, then lists every test that
# skipped and why. Without PostgreSQL and NATS (bash scripts/services.sh starts them) their
# tests skip, except under CI=true, where they fail. The browser tests are web/ci.sh's.
# Exits non-zero when a test or a build fails.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/testreport" ./internal/cmd/testreport
go test -json -race -count=1 -timeout 30m "$@" ./... 2>&1 | "$dir/testreport"
