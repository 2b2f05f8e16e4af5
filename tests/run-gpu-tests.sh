#!/usr/bin/env bash
# Run every GPU suite built under BUILD/tests/gpu (on the GPU host) and print
# one closing line. Extra arguments go to every suite (e.g. --quick). A suite
# that hangs is killed after PJ_GPU_TEST_TIMEOUT seconds and counts as failed;
# exit status 77 from a suite means "no GPU here" and counts as skipped.
set -u
build=${1:-build}
shift || true
timeout_s=${PJ_GPU_TEST_TIMEOUT:-900}
passed=0
failed=0
skipped=0
failures=()
for t in "$build"/tests/gpu/*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    echo "=== $name"
    start=$SECONDS
    timeout --kill-after=10 "$timeout_s" "$t" "$@"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "--- $name: ok ($((SECONDS - start)) s)"
    elif [ "$rc" -eq 77 ]; then
        skipped=$((skipped + 1))
        echo "--- $name: skipped (no GPU)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- $name: FAILED, status $rc ($((SECONDS - start)) s)"
    fi
done
if [ "$failed" -ne 0 ]; then
    echo "failed GPU suites: ${failures[*]}"
fi
echo "GPU suites: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
