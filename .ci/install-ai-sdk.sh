#!/usr/bin/env bash
# Install the pinned Vercel AI SDK (`ai`, `@ai-sdk/openai` and `zod`) from the npm registry into
# .tools/ai-sdk, idempotently, for tests/integration/test_ai_sdk.py. Prints the install directory
# on stdout; everything else goes to stderr. Exits non-zero, loudly, on any failure.
#
# The 6.x line: `ai` 7 needs Node.js 22, and the machines run Node.js 20.
set -euo pipefail

AI_VERSION="${AI_VERSION:-6.0.325}"              # keep in sync with tests/integration/test_ai_sdk.py
AI_OPENAI_VERSION="${AI_OPENAI_VERSION:-3.0.141}"
ZOD_VERSION="${ZOD_VERSION:-4.1.12}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${AI_SDK_INSTALL_DIR:-$ROOT/.tools/ai-sdk}"

die() { echo "install-ai-sdk: ERROR: $*" >&2; exit 1; }
log() { echo "install-ai-sdk: $*" >&2; }
command -v node >/dev/null 2>&1 || die "node is not on PATH"
command -v npm >/dev/null 2>&1 || die "npm is not on PATH"

installed_ok() {
  (cd "$DIR" 2>/dev/null && node -e '
    const v = (p) => require(p + "/package.json").version;
    if (v("ai") !== process.argv[1] || v("@ai-sdk/openai") !== process.argv[2]) process.exit(1);
    require("ai"); require("@ai-sdk/openai"); require("zod");' "$AI_VERSION" "$AI_OPENAI_VERSION" >/dev/null 2>&1)
}

if installed_ok; then
  log "ai $AI_VERSION and @ai-sdk/openai $AI_OPENAI_VERSION already installed in $DIR"
  echo "$DIR"
  exit 0
fi
mkdir -p "$DIR"
[ -f "$DIR/package.json" ] || echo '{"name": "crossfeed-ai-sdk-clients", "private": true}' > "$DIR/package.json"
log "installing ai@$AI_VERSION @ai-sdk/openai@$AI_OPENAI_VERSION zod@$ZOD_VERSION into $DIR"
(cd "$DIR" && npm install --no-audit --no-fund --silent "ai@$AI_VERSION" "@ai-sdk/openai@$AI_OPENAI_VERSION" \
    "zod@$ZOD_VERSION" >&2) || die "npm install failed"
installed_ok || die "the AI SDK does not load from $DIR"
log "installed"
echo "$DIR"
