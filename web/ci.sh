#!/usr/bin/env bash
# CI for the chat app in web/: install what it needs, check that the committed build and
# generated types are current, lint, run the unit tests, then the browser tests against the
# real server.
# Runs from anywhere, e.g. `bash web/ci.sh` at the repo root.
set -euo pipefail

WEB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$WEB/.." && pwd)"
cd "$WEB"

log() { printf '\n== %s\n' "$*"; }

# no_browser says why there is no Chromium: under CI=true that fails the run (the browser
# tests must run there); elsewhere the browser tests are skipped, each saying why.
no_browser() {
  if [ "${CI:-}" = true ]; then
    echo "error: $1; under CI=true the browser tests must run" >&2
    exit 1
  fi
  echo "warning: $1; the browser tests will be skipped"
}

# Chromium for the browser tests, from Debian's packages when it is missing.
CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  log "installing chromium"
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); then
      no_browser "could not install chromium"
    elif [ ! -x "$CHROMIUM" ]; then
      no_browser "chromium was installed, but $CHROMIUM is not it (set CHROMIUM_PATH)"
    fi
  else
    no_browser "no chromium at $CHROMIUM, and no root apt-get here to install it"
  fi
fi

log "npm ci"
npm ci --no-audit --no-fund --loglevel=error

log "codegen and build"
npm run --silent codegen
npm run --silent build

log "committed build and generated types are current"
changes="$(git -C "$ROOT" status --porcelain -- web/)"
if [ -n "$changes" ]; then
  echo "web/ differs from what is committed after codegen + build:"
  echo "$changes"
  git -C "$ROOT" --no-pager diff --stat -- web/ || true
  echo "Run 'npm run codegen && npm run build' in web/ and commit the result."
  exit 1
fi
echo "ok"

log "lint"
npm run --silent lint

log "unit tests"
npm run --silent test:unit

log "browser tests"
npm run --silent test:e2e
