#!/usr/bin/env bash
# Session 27, visit 5: the last check of main (d6148c8). Since visit 4:
# the client side of the second review (libprojd's ring timeouts,
# projd_sglang's reconnect, projd.py's release of a lost connection, the
# trace parser), the server's ctx_cap and exit message. bench/final-check.sh:
# the GPU suites (python_torch runs projd_sglang on torch tensors against
# the cuda backend), the fatal-error test, the benchmark twice.
. bench/visit-common.sh
timeout 330 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|GPU suites|test_engines:|checks passed|^Ran|bench [12]|fell back|FAIL|python_torch'
tar czf "$OUT/final.tgz" -C "$F/final" .
