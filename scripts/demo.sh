#!/usr/bin/env bash
# Installs what Warren needs, builds and installs it, starts `warren serve`, builds the demo's
# layers (a Debian Python base, a workspace with a repository and its tests, a grader tool)
# and runs a batch of rollouts: one sandbox each, results table and timings. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "scripts/demo.sh: run as root" >&2; exit 1; fi
scripts/install-deps.sh
scripts/build.sh
cmake --install build --prefix /usr/local >/dev/null
echo "installed /usr/local/bin/warren and warren-agent"

DATA_DIR=${WARREN_DATA_DIR:-/var/lib/warren}
export WARREN_URL=${WARREN_URL:-http://127.0.0.1:7070}
started=""
if curl -sf "$WARREN_URL/healthz" >/dev/null 2>&1; then
  echo "using the warren serve already running at $WARREN_URL"
else
  warren serve --data-dir "$DATA_DIR" --listen "${WARREN_URL#http://}" >/tmp/warren-demo-serve.log 2>&1 &
  started=$!
  for _ in $(seq 100); do curl -sf "$WARREN_URL/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "started warren serve (pid $started), log in /tmp/warren-demo-serve.log"
fi
export WARREN_TOKEN=${WARREN_TOKEN:-$(cat "$DATA_DIR/admin.token")}
stage=$(mktemp -d /var/tmp/warren-demo.XXXXXX)
cleanup() {
  rm -rf "$stage"
  if [ -n "$started" ]; then kill "$started" && wait "$started" || true; fi
}
trap cleanup EXIT

# The three layers of every rollout sandbox. The Debian base (mmdebstrap from the Debian
# archive, a few minutes the first time) is kept between runs; the workspace and the tool are
# rebuilt each run, and each rebuild is one small layer: the base is never touched.
BASE=demo-py:bookworm
if ! warren image ls | grep -q "^$BASE "; then
  warren image build "$BASE" --debian bookworm --packages python3,python3-pytest
fi
mkdir -p "$stage/ws/work"
cp -a examples/demo-repo "$stage/ws/work/repo"
warren image build demo-repo:1 --from-dir "$stage/ws" --kind workspace
warren image build demo-grader:1 --from-dir examples/demo-tool --kind tool
warren image ls
/usr/bin/python3 examples/demo.py --base "$BASE" --workspace demo-repo:1 --tool demo-grader:1 \
  --count "${DEMO_COUNT:-32}" --workers 4
