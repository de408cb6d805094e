#!/usr/bin/env bash
# Installs the official OpenAI SDK (npm "openai", the version pinned in
# tests/integration/openai_sdk/package.json) into tests/integration/openai_sdk/node_modules,
# where serve_test.cc's SDK test finds it. Idempotent: nothing to do when that version is
# there. Needs Node 20 and npm (Debian's nodejs and npm) and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="$here/tests/integration/openai_sdk"
want="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dependencies"]["openai"])' "$dir/package.json")"
have="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$dir/node_modules/openai/package.json" 2>/dev/null || true)"
if [ "$have" = "$want" ]; then
  echo "install-openai-sdk: openai $want present"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-openai-sdk: npm is not installed (apt-get install nodejs npm); the SDK test will skip" >&2
  exit 0
fi
echo "install-openai-sdk: installing openai $want into $dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save "openai@$want"
