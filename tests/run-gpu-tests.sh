#!/usr/bin/env bash
# Run every GPU suite built under BUILD/tests/gpu (on the GPU host), then the
# script suites beside this file (tests/gpu/*.sh, given BUILD), and print one
# closing line. Extra arguments go to every built suite (e.g. --quick). A
# suite that hangs is killed after PJ_GPU_TEST_TIMEOUT seconds and counts as
# failed; exit status 77 from a suite means "no GPU (or no torch) here" and
# counts as skipped.
set -u
build=${1:-build}
shift || true
timeout_s=${PJ_GPU_TEST_TIMEOUT:-900}
# The suites that start daemons find the binaries there (as run-tests.sh).
export PJ_BUILD=$build
passed=0
failed=0
skipped=0
failures=()
run_one() {
    local name=$1 start=$SECONDS rc=0
    shift
    echo "=== $name"
    timeout --kill-after=10 "$timeout_s" "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "--- $name: ok ($((SECONDS - start)) s)"
    elif [ "$rc" -eq 77 ]; then
        skipped=$((skipped + 1))
        echo "--- $name: skipped"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- $name: FAILED, status $rc ($((SECONDS - start)) s)"
    fi
}
for t in "$build"/tests/gpu/*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t" "$@"
done
for s in "$(dirname "$0")"/gpu/*.sh; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s" .sh)" bash "$s" "$build"
done
if [ "$failed" -ne 0 ]; then
    echo "failed GPU suites: ${failures[*]}"
fi
echo "GPU suites: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
