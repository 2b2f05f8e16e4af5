#!/usr/bin/env bash
# The daemon's end-to-end cases again, with every checked client sending its
# projections and pings through a shared-memory ring instead of nng
# (PJ_E2E_RING: the ring's slots). The cases are the same assertions, so the
# fast path meets the same semantics: bit-exact results, every error answered
# with the connection usable, in-flight limits and order, clients that die,
# a drain on SIGTERM. tests/test_daemon_ring.c has the ring's own cases.
#
# Usage: tests/e2e_ring.sh [BUILD]   (run by tests/run-tests.sh)
set -euo pipefail
build=${1:-build}
export PJ_BUILD=$build
export PJ_E2E_RING=${PJ_E2E_RING:-8}
export PJ_E2E_REQUESTS=${PJ_E2E_REQUESTS:-100}
exec "$build/tests/test_daemon_e2e"
