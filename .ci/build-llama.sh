#!/usr/bin/env bash
# Build the two real llama.cpp servers the tests run crossfeed against, from PyPI alone:
#
#   - llama.cpp's llama-server, from the llama.cpp source vendored in the llama-cpp-python sdist
#     (CMake, server target, shared libraries; HTTPS and the prebuilt web UI off);
#   - llama-cpp-python[server], in its own venv, built without its own copy of the library: it
#     loads the shared libraries built above (LLAMA_CPP_LIB_PATH), which are the same source.
#
#   eval "$(bash .ci/build-llama.sh)"   # sets CROSSFEED_LLAMA_SERVER, CROSSFEED_LLAMA_CPP_PYTHON,
#                                       # CROSSFEED_LLAMA_LIB
#
# Reused when already built for the pinned version (a stamp file under .tools/llama). Installs
# cmake and g++ from Debian's packages when missing. Only the export lines go to stdout; progress
# goes to stderr. Any failure exits non-zero: CI fails, it does not skip.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"   # keep in sync with tests/fakes/llama_servers.py
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${LLAMA_INSTALL_DIR:-$ROOT/.tools/llama}"
SRC="$DIR/src"
BUILD="$DIR/build"
PYENV="$DIR/pyenv"
STAMP="$DIR/built-$VERSION"

log() { echo "build-llama: $*" >&2; }
die() { echo "build-llama: ERROR: $*" >&2; exit 1; }

emit() {
    echo "export CROSSFEED_LLAMA_SERVER='$BUILD/bin/llama-server'"
    echo "export CROSSFEED_LLAMA_CPP_PYTHON='$PYENV/bin/python'"
    echo "export CROSSFEED_LLAMA_LIB='$BUILD/bin'"
}

if [ -f "$STAMP" ] && [ -x "$BUILD/bin/llama-server" ] && [ -x "$PYENV/bin/python" ]; then
    log "llama.cpp servers for llama-cpp-python $VERSION already built in $DIR"
    emit
    exit 0
fi

if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    log "installing cmake and g++ (apt-get)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends cmake g++ make >&2
fi

mkdir -p "$SRC"
SDIST="$SRC/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    log "downloading the llama-cpp-python $VERSION sdist from PyPI"
    python3 -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$SRC" >&2 \
        || die "pip download llama-cpp-python==$VERSION failed"
fi
TREE="$SRC/llama_cpp_python-$VERSION"
[ -d "$TREE" ] || tar -xzf "$SDIST" -C "$SRC" || die "cannot unpack $SDIST"

log "building llama-server (CMake, $(nproc) jobs; a few minutes on 2 cores)"
start=$(date +%s)
# -O1: the build takes about 375 s on 2 cores instead of 450 s at -O3, and tests/real about 48 s
# instead of 34 s. (-O0 builds in 280 s, but the model's byte-level vocabulary makes a Codex
# prompt tens of thousands of tokens, and unoptimised the Codex tests then take minutes more.)
cmake -S "$TREE/vendor/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON \
    > "$DIR/cmake.log" 2>&1 || { tail -30 "$DIR/cmake.log" >&2; die "cmake configure failed (log: $DIR/cmake.log)"; }
cmake --build "$BUILD" --target llama-server -j "$(nproc)" > "$DIR/build.log" 2>&1 \
    || { tail -30 "$DIR/build.log" >&2; die "llama-server build failed (log: $DIR/build.log)"; }
[ -x "$BUILD/bin/llama-server" ] || die "the build made no $BUILD/bin/llama-server"
log "llama-server built in $(( $(date +%s) - start ))s"

log "installing llama-cpp-python[server] $VERSION into $PYENV (bindings only)"
python3 -m venv "$PYENV"
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$PYENV/bin/pip" install -q "$SDIST[server]" \
    > "$DIR/pip.log" 2>&1 || { tail -30 "$DIR/pip.log" >&2; die "pip install llama-cpp-python failed"; }
LLAMA_CPP_LIB_PATH="$BUILD/bin" "$PYENV/bin/python" -c "import llama_cpp; llama_cpp.llama_backend_init()" >&2 \
    || die "llama-cpp-python cannot load the libraries in $BUILD/bin"

touch "$STAMP"
emit
