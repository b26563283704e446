#!/usr/bin/env bash
# The whole test suite: the style tier (.clang-format, Clang's thread-safety analysis), unit
# (no root), integration (root: real namespaces, EROFS, overlay, cgroups), cluster (a real etcd
# on loopback ports) and end-to-end (a real `warren serve`, the CLI and the Python SDK). Run as
# root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "scripts/test.sh: run as root (integration tests need it)" >&2; exit 1; fi
scripts/install-deps.sh
scripts/build.sh
echo "== style tier: .clang-format and Clang's thread-safety analysis"
scripts/style.sh
echo "== unit, integration and cluster tests (ctest)"
ctest --test-dir build --output-on-failure
echo "== end-to-end and security tests (pytest)"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/e2e tests/security
