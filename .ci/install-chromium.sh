#!/usr/bin/env bash
# Debian's Chromium, for the inspector's browser test (tests/e2e/test_inspector_browser.py).
#
#   CROSSFEED_CHROMIUM="$(bash .ci/install-chromium.sh)"
#
# Installs the chromium package when /usr/bin/chromium is missing and prints its path (the only
# line on stdout). Playwright, from PyPI, drives this browser: it never downloads one of its own.
set -euo pipefail

log() { echo "install-chromium: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium (apt-get)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends chromium >&2
fi
path="$(command -v chromium)"
log "$("$path" --version 2>/dev/null || echo "chromium at $path")"
echo "$path"
