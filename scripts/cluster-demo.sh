#!/usr/bin/env bash
# A Warren cluster on this one machine, then the demo's rollouts through it: a single-member
# etcd on loopback, 3 `warren node`s (each with its own data dir, port and sandbox subnet; the
# data dir gives each its own cgroup parent and nftables table), 2 `warren apiserver`s sharing
# one layer directory. The demo's layers are built through one API server, then two batches of
# rollouts run at once, one through each API server (as behind a load balancer), and land
# spread over the nodes. Everything started here is stopped at the end; etcd's data and the
# shared layers are kept in $DEMO_DIR so the Debian base is built once.
#
# Run as root, after scripts/demo.sh installed warren (or with warren on PATH):
#   sudo scripts/cluster-demo.sh            # DEMO_COUNT rollouts in all (default 24)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "scripts/cluster-demo.sh: run as root" >&2; exit 1; fi
command -v warren >/dev/null || { echo "warren is not installed: run scripts/demo.sh first" >&2; exit 1; }
command -v etcd >/dev/null || { echo "etcd is missing: run scripts/install-deps.sh" >&2; exit 1; }

DEMO_DIR=${DEMO_DIR:-/var/lib/warren-cluster-demo}
COUNT=${DEMO_COUNT:-24}
ETCD_PORT=${ETCD_PORT:-2479}
ETCD=http://127.0.0.1:$ETCD_PORT
mkdir -p "$DEMO_DIR/layers" "$DEMO_DIR/logs"
run=$(mktemp -d /var/tmp/warren-cluster-demo.XXXXXX)
pids=()
cleanup() {
  # API servers first (they hold nothing), then nodes (a clean stop deletes their sandboxes
  # and leaves the cluster at once), then etcd.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[$i]}" 2>/dev/null && wait "${pids[$i]}" 2>/dev/null || true
  done
  rm -rf "$run"
}
trap cleanup EXIT

wait_http() {  # URL: until it answers, or fail after 60 s
  for _ in $(seq 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "no answer from $1" >&2
  return 1
}

etcd --name demo --data-dir "$DEMO_DIR/etcd" \
  --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) \
  --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 1)) \
  --initial-cluster demo=http://127.0.0.1:$((ETCD_PORT + 1)) \
  --auto-compaction-mode periodic --auto-compaction-retention 1m \
  >"$DEMO_DIR/logs/etcd.log" 2>&1 &
pids+=($!)
wait_http "$ETCD/health"
echo "etcd at $ETCD (data in $DEMO_DIR/etcd)"

for i in 1 2 3; do
  warren node --etcd "$ETCD" --name "demo-n$i" --listen "127.0.0.1:$((7370 + i))" \
    --data-dir "$run/node$i" --layer-store "$DEMO_DIR/layers" \
    --net-subnet "10.$((230 + i)).0.0/16" --no-microvm --label "rack=r$i" \
    >"$DEMO_DIR/logs/node$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do wait_http "http://127.0.0.1:$((7370 + i))/healthz"; done
echo "3 nodes joined: demo-n1 demo-n2 demo-n3 (logs in $DEMO_DIR/logs)"

for i in 0 1; do
  warren apiserver --etcd "$ETCD" --listen "127.0.0.1:$((7270 + i))" \
    --data-dir "$run/api$i" --layer-store "$DEMO_DIR/layers" \
    >"$DEMO_DIR/logs/apiserver$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do wait_http "http://127.0.0.1:$((7270 + i))/healthz"; done
export WARREN_TOKEN
WARREN_TOKEN=$(cat "$run/api0/admin.token")
API0=http://127.0.0.1:7270 API1=http://127.0.0.1:7271
echo "2 API servers: $API0 $API1 (either takes the same token)"
WARREN_URL=$API0 /usr/bin/python3 - <<'PY'
import os, sys
sys.path.insert(0, "sdk/python")
import warren
for n in warren.Client().nodes():
    print(f"  node {n['name']:<8} {n['state']:<8} {n['capacity']['cpu_milli'] // 1000} cores, "
          f"{n['capacity']['memory_mb'] // 1024} GiB, labels {n.get('labels', {})}")
PY

# The demo's three layers, built through one API server into the shared layer directory.
export WARREN_URL=$API0
BASE=demo-py:bookworm
if ! warren image ls | grep -q "^$BASE "; then
  warren image build "$BASE" --debian bookworm --packages python3,python3-pytest
fi
mkdir -p "$run/ws/work"
cp -a examples/demo-repo "$run/ws/work/repo"
warren image build demo-repo:1 --from-dir "$run/ws" --kind workspace
warren image build demo-grader:1 --from-dir examples/demo-tool --kind tool

half=$((COUNT / 2))
echo
echo "running $COUNT rollouts: $half through each API server at once"
WARREN_URL=$API0 /usr/bin/python3 examples/demo.py --rollouts-only --label batch0 \
  --count "$half" --workers 3 \
  --base "$BASE" --workspace demo-repo:1 --tool demo-grader:1 >"$run/batch0.txt" 2>&1 &
b0=$!
WARREN_URL=$API1 /usr/bin/python3 examples/demo.py --rollouts-only --label batch1 \
  --count "$((COUNT - half))" \
  --workers 3 --base "$BASE" --workspace demo-repo:1 --tool demo-grader:1 >"$run/batch1.txt" 2>&1 &
b1=$!
rc=0
wait $b0 || rc=1
wait $b1 || rc=1
for i in 0 1; do
  echo
  echo "== through API server $i =="
  cat "$run/batch$i.txt"
done
exit $rc
