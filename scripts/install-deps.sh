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
