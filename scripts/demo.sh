#!/usr/bin/env bash
# Installs what Warren needs, builds and installs it, starts `warren serve`, builds a base
# image and runs the demo: a batch of sandboxes each running a small program. Run as root.
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
rootfs=$(mktemp -d /var/tmp/warren-demo-rootfs.XXXXXX)
cleanup() {
  rm -rf "$rootfs"
  if [ -n "$started" ]; then kill "$started" && wait "$started" || true; fi
}
trap cleanup EXIT
scripts/make-busybox-rootfs.sh "$rootfs"
warren image build demo:busybox --from-dir "$rootfs"
/usr/bin/python3 examples/demo.py --image demo:busybox --count "${DEMO_COUNT:-24}" --workers 4
