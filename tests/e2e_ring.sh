#!/usr/bin/env bash
# The daemon's end-to-end cases again, with every checked client sending its
# projections and pings through a shared-memory ring instead of nng
# (PJ_E2E_RING: the ring's slots). Through the ring go: the 8 concurrent
# clients' bit-exact projections and chains, every bad PROJECT of
# errors_keep_connection with the connection's check after it, the mutated
# messages of mutation_storm whose type is still PROJECT or PING, and the
# checks after each other case. Those cases' own in-flight requests (limits
# and order, unregister while running, the killed client, the drain) are sent
# on raw nng contexts and stay there; tests/test_daemon_ring.c has the ring's
# versions of those and its own cases.
#
# Usage: tests/e2e_ring.sh [BUILD]   (run by tests/run-tests.sh)
set -euo pipefail
build=${1:-build}
export PJ_BUILD=$build
export PJ_E2E_RING=${PJ_E2E_RING:-8}
export PJ_E2E_REQUESTS=${PJ_E2E_REQUESTS:-100}
exec "$build/tests/test_daemon_e2e"
