#!/usr/bin/env bash
# Install the pinned Codex CLI (@openai/codex, native binary from its platform optional package)
# from the npm registry into .tools/codex, idempotently. Prints the codex launcher path on stdout.
# Everything else goes to stderr. Exits non-zero, loudly, on any failure.
#
#   CODEX_VERSION=0.171.0 bash .ci/install-codex.sh      # default version below
#   CODEX_INSTALL_DIR=/somewhere bash .ci/install-codex.sh
set -euo pipefail

CODEX_VERSION="${CODEX_VERSION:-0.171.0}"   # keep in sync with tests/e2e/codex_support.py
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CODEX_INSTALL_DIR:-$ROOT/.tools/codex}"
BIN="$DIR/node_modules/.bin/codex"

die() { echo "install-codex: ERROR: $*" >&2; exit 1; }
log() { echo "install-codex: $*" >&2; }

command -v node >/dev/null 2>&1 || die "node is not on PATH (Codex's launcher is a node script)"
command -v npm >/dev/null 2>&1 || die "npm is not on PATH"

installed_ok() {
  [ -x "$BIN" ] || return 1
  local got
  got="$(timeout 30 "$BIN" --version 2>/dev/null || true)"
  [ "$got" = "codex-cli $CODEX_VERSION" ]
}

if installed_ok; then
  log "codex $CODEX_VERSION already installed in $DIR"
  echo "$BIN"
  exit 0
fi

log "installing @openai/codex@$CODEX_VERSION into $DIR"
rm -rf "$DIR"
mkdir -p "$DIR"
# A private package.json so npm installs here and nowhere else; exact version, optional deps on
# (the native binary is the optional dependency @openai/codex-<platform>).
cat >"$DIR/package.json" <<EOF
{
  "name": "crossfeed-codex-tool",
  "private": true,
  "description": "Pinned Codex CLI for crossfeed's end-to-end tests (installed by .ci/install-codex.sh)",
  "dependencies": { "@openai/codex": "$CODEX_VERSION" }
}
EOF
if ! (cd "$DIR" && timeout 600 npm install --no-audit --no-fund --no-update-notifier \
        --include=optional --save-exact >&2); then
  die "npm install @openai/codex@$CODEX_VERSION failed"
fi

[ -e "$BIN" ] || die "launcher $BIN missing after npm install"
if ! ls "$DIR"/node_modules/@openai/codex-*/vendor/*/bin/codex >/dev/null 2>&1; then
  die "native Codex binary missing: the platform optional package (@openai/codex-$(uname -s | tr A-Z a-z)-*) did not install"
fi
got="$(timeout 30 "$BIN" --version 2>&1 || true)"
[ "$got" = "codex-cli $CODEX_VERSION" ] || die "'codex --version' printed '$got', expected 'codex-cli $CODEX_VERSION'"
log "installed: $got"
echo "$BIN"
