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
# A hung test fails with every thread's stack after 20 minutes (image builds take up to 15)
# instead of running out CI's clock silently.
/usr/bin/python3 -m pytest -q -p no:cacheprovider --timeout=1200 tests/e2e tests/security
# The contract's modules again, against a cluster on this machine (etcd, 3 nodes, 2 API
# servers; see WARREN_E2E_TARGET in tests/e2e/conftest.py): the same tests, CLI and SDK,
# unchanged. Tests of what only `warren serve` has are marked serve_only and listed (and those
# of what only a cluster has, cluster_only, run only here).
# Not here: restarts of serve itself (test_restart.py, test_two_servers.py), VMs (test_vm.py,
# test_microvm.py), and test_debian_image.py (image building is the same code, and
# test_oci_import.py publishes images to the cluster's shared store). test_openapi.py runs
# last: it drains a node (and puts it back).
echo "== end-to-end against a cluster (WARREN_E2E_TARGET=cluster)"
WARREN_E2E_TARGET=cluster /usr/bin/python3 -m pytest -q -p no:cacheprovider --timeout=1200 \
  tests/e2e/test_api.py tests/e2e/test_cli.py tests/e2e/test_sdk.py tests/e2e/test_archive.py \
  tests/e2e/test_auth.py tests/e2e/test_batch.py tests/e2e/test_leases.py \
  tests/e2e/test_lifecycle.py tests/e2e/test_layers.py tests/e2e/test_trajectories.py \
  tests/e2e/test_fs_policy.py tests/e2e/test_metrics.py tests/e2e/test_calls.py \
  tests/e2e/test_network.py tests/e2e/test_https_cache.py tests/e2e/test_package_mirror.py \
  tests/e2e/test_tls_client.py \
  tests/e2e/test_oci_import.py tests/e2e/test_terminal.py tests/e2e/test_desktop.py \
  tests/e2e/test_dashboard.py \
  tests/e2e/test_openapi.py
