#!/usr/bin/env bash
# Installs the Debian 12 packages Warren builds, runs and tests with. Idempotent.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libseccomp-dev
  libarchive-dev libsqlite3-dev libssl-dev libpng-dev zlib1g-dev libgtest-dev libgmock-dev libfuse3-dev fuse3 libsimdjson-dev
  erofs-utils busybox-static crun bubblewrap tar
  python3 python3-pytest python3-pytest-timeout python3-yaml curl tmux vncsnapshot
  libcurl4-openssl-dev mmdebstrap skopeo umoci docker-registry python3-jwt python3-cryptography openssl
  python3-prometheus-client
  libmnl-dev libnftables-dev libnetfilter-conntrack-dev libc-ares-dev nftables iproute2 apt-utils
  qemu-system-x86 linux-image-amd64 liblzma-dev libzstd-dev
  etcd-server etcd-client
  clang clang-format
  chromium
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Chunked layers are mounted through FUSE (blobfsd): the kernel's fuse device.
[[ -e /dev/fuse ]] || modprobe fuse || echo "warning: no /dev/fuse: chunked layers cannot be read" >&2
# The E2B SDK tests (tests/e2b, run by tests/e2e/test_e2b_sdk.py) drive the real `e2b` npm
# package, pinned in tests/e2b/package-lock.json, on Node.js. Its undici 7 needs Node.js
# >= 20.18.1: Debian 12's own nodejs (18) is too old, so a newer one (NodeSource's nodejs 20.x,
# say) must be installed already; Debian's is only the fallback when there is no node at all.
NODE_MIN=20.18.1
node_missing=()
command -v node >/dev/null || node_missing+=(nodejs)
command -v npm >/dev/null || node_missing+=(npm)
if ((${#node_missing[@]})); then
  echo "installing: ${node_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${node_missing[@]}"
fi
node_version=$(node --version 2>/dev/null | sed 's/^v//' || true)
if [[ -z $node_version || $(printf '%s\n%s\n' "$NODE_MIN" "$node_version" | sort -V | head -n1) != "$NODE_MIN" ]]; then
  echo "error: the E2B SDK tests (tests/e2b) need Node.js >= $NODE_MIN (the e2b package's" \
    "undici 7 does); found ${node_version:-none}. Debian 12's own nodejs is 18: install" \
    "Node.js $NODE_MIN or later (e.g. NodeSource's nodejs 20.x) and run this again." >&2
  exit 1
fi
e2b_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/e2b"
if [[ ! -e $e2b_dir/node_modules/.package-lock.json || $e2b_dir/package-lock.json -nt $e2b_dir/node_modules/.package-lock.json ||
  $e2b_dir/package.json -nt $e2b_dir/node_modules/.package-lock.json ]]; then
  echo "installing tests/e2b's npm packages (npm ci)"
  npm ci --prefix "$e2b_dir" --no-audit --no-fund
fi
# The dashboard's tests (tests/ui, run by tests/e2e/test_dashboard.py) drive Debian's chromium
# with puppeteer-core, pinned in tests/ui/package-lock.json.
ui_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/ui"
if [[ ! -e $ui_dir/node_modules/.package-lock.json || $ui_dir/package-lock.json -nt $ui_dir/node_modules/.package-lock.json ||
  $ui_dir/package.json -nt $ui_dir/node_modules/.package-lock.json ]]; then
  echo "installing tests/ui's npm packages (npm ci)"
  npm ci --prefix "$ui_dir" --no-audit --no-fund
fi
