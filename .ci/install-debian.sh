#!/usr/bin/env bash
# Every Debian package the later CI steps need, in one apt-get run, so that the llama.cpp build
# can run in the background while the other steps install (two apt-get runs at once would
# fight over dpkg's lock). Each later script still checks for its own tools and installs what
# is missing, so each one also works alone.
#
#   bash .ci/install-debian.sh
#
# A package is installed when a command it provides is missing: cmake, g++ and make (the
# llama.cpp build), valgrind (callgrind, the benchmark's smoke tests), redis-server (the store
# suite), chromium (the inspector's browser test). Progress goes to stderr.
set -euo pipefail

log() { echo "install-debian: $*" >&2; }

want=()
need() {  # need PACKAGE COMMAND...: the package, unless every command is on PATH
    local package="$1"
    shift
    for cmd in "$@"; do
        if ! command -v "$cmd" >/dev/null 2>&1; then
            want+=("$package")
            return
        fi
    done
}
need cmake cmake
need g++ g++
need make make
need valgrind valgrind callgrind_control
need redis-server redis-server redis-cli
need chromium chromium

if [ "${#want[@]}" -eq 0 ]; then
    log "every package is installed"
    exit 0
fi
log "installing ${want[*]} (apt-get)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
