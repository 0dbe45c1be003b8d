#!/usr/bin/env bash
# Install the pinned official Node SDK (npm package `openai`, whose `ResponsesWS` from
# `openai/resources/responses/ws` is its Responses WebSocket client) and the `ws` package it
# needs for that client, from the npm registry into .tools/node-openai, idempotently. Prints the
# install directory on stdout; everything else goes to stderr. Exits non-zero, loudly, on any
# failure.
#
#   NODE_OPENAI_VERSION=7.59.0 bash .ci/install-node-sdk.sh   # default versions below
#   NODE_OPENAI_INSTALL_DIR=/somewhere bash .ci/install-node-sdk.sh
#
# tests/integration/test_websocket_node.py reads CROSSFEED_NODE_OPENAI_DIR (or this default
# directory) and checks the versions below; keep them in sync with NODE_OPENAI_VERSION there.
set -euo pipefail

NODE_OPENAI_VERSION="${NODE_OPENAI_VERSION:-7.59.0}"
NODE_WS_VERSION="${NODE_WS_VERSION:-8.23.0}"   # openai's optional peer dependency: ws ^8.21.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${NODE_OPENAI_INSTALL_DIR:-$ROOT/.tools/node-openai}"
PKG="$DIR/node_modules/openai/package.json"
WS_PKG="$DIR/node_modules/ws/package.json"

die() { echo "install-node-sdk: ERROR: $*" >&2; exit 1; }
log() { echo "install-node-sdk: $*" >&2; }

command -v node >/dev/null 2>&1 || die "node is not on PATH"
command -v npm >/dev/null 2>&1 || die "npm is not on PATH"

version_of() {  # the "version" of a package.json, or nothing
  [ -f "$1" ] || return 0
  node -e 'try { process.stdout.write(String(require(process.argv[1]).version || "")) } catch (e) {}' "$1"
}

loads_ok() {  # the WebSocket client loads from the install (a broken install fails here)
  (cd "$DIR" && timeout 60 node -e '
    const { ResponsesWS } = require("openai/resources/responses/ws");
    if (typeof ResponsesWS !== "function") { process.exit(1); }' >/dev/null 2>&1)
}

installed_ok() {
  [ "$(version_of "$PKG")" = "$NODE_OPENAI_VERSION" ] && [ "$(version_of "$WS_PKG")" = "$NODE_WS_VERSION" ] && loads_ok
}

if installed_ok; then
  log "openai $NODE_OPENAI_VERSION (ws $NODE_WS_VERSION) already installed in $DIR"
  echo "$DIR"
  exit 0
fi

log "installing openai@$NODE_OPENAI_VERSION and ws@$NODE_WS_VERSION into $DIR"
rm -rf "$DIR"
mkdir -p "$DIR"
# A private package.json so npm installs here and nowhere else; exact versions.
cat >"$DIR/package.json" <<EOF
{
  "name": "crossfeed-node-openai-tool",
  "private": true,
  "description": "Pinned Node SDK for crossfeed's WebSocket tests (installed by .ci/install-node-sdk.sh)",
  "dependencies": { "openai": "$NODE_OPENAI_VERSION", "ws": "$NODE_WS_VERSION" }
}
EOF
if ! (cd "$DIR" && timeout 600 npm install --no-audit --no-fund --no-update-notifier --save-exact >&2); then
  die "npm install openai@$NODE_OPENAI_VERSION ws@$NODE_WS_VERSION failed"
fi

got="$(version_of "$PKG")"
[ "$got" = "$NODE_OPENAI_VERSION" ] || die "node_modules/openai is version '$got', expected $NODE_OPENAI_VERSION"
got="$(version_of "$WS_PKG")"
[ "$got" = "$NODE_WS_VERSION" ] || die "node_modules/ws is version '$got', expected $NODE_WS_VERSION"
loads_ok || die "require('openai/resources/responses/ws').ResponsesWS does not load with node $(node --version)"
log "installed: openai $NODE_OPENAI_VERSION, ws $NODE_WS_VERSION (node $(node --version))"
echo "$DIR"
