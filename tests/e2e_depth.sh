#!/usr/bin/env bash
# The daemon's suites again with the cpu backend taking several requests of
# a connection at once (PROJD_CPU_STREAM_DEPTH=4), as the cuda backend does
# (8 per stream), run one after another in order. With the default depth of
# 1 the CPU suites never have more than one request of a connection with
# the backend: a close, a drain, an UNREGISTER or a shrunk buffer meeting
# several running ones, and the completions arriving back to back, were
# covered by the GPU suites only. The suites' own assertions hold at any
# depth (test_daemon_e2e's killed_client reads the depth to know how many
# of the killed client's requests ran). Most of their cases keep one
# request in flight per connection; tests/test_daemon_depth.c has the cases
# written for several.
#
# Usage: tests/e2e_depth.sh [BUILD]   (run by tests/run-tests.sh)
# run-tests: 4 suites
set -uo pipefail
build=${1:-build}
export PJ_BUILD=$build
export PROJD_CPU_STREAM_DEPTH=${PROJD_CPU_STREAM_DEPTH:-4}
rc=0
for t in test_daemon_e2e test_daemon_ops test_daemon_ring test_libprojd; do
    echo "=== $t (PROJD_CPU_STREAM_DEPTH=$PROJD_CPU_STREAM_DEPTH)"
    "$build/tests/$t" || rc=1
done
exit $rc
