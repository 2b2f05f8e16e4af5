#!/usr/bin/env bash
# Session 63, visit 2: bench/final-check.sh on the session's code after the
# reviews (the cuda backend's staged fallback for a refused graph rebind and
# its lost-context check at completions and REGISTERs; projd's signals
# during the stop and SIGHUPs taken together; failed requests' log lines
# limited; projd_sglang's watched weight loader, whose real fingerprint
# python_torch checks with torch here). Kernels and tables unchanged.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
grep -E "test_weight_updates|FAIL|Error" "$OUT/final/gpu-tests.log" | head -10
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
grep -E "^SCORE" "$OUT/final/bench-2.log"
