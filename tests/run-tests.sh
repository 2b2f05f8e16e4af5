#!/usr/bin/env bash
# Run every CPU test suite built under BUILD/tests and print one closing line.
# Each suite is a Check program (or a script named tests/e2e_*.sh); a suite
# that hangs is killed after PJ_TEST_TIMEOUT seconds (a script of several
# suites, that many times) and counts as failed.
set -u
build=${1:-build}
timeout_s=${PJ_TEST_TIMEOUT:-300}
# Seconds, a whole number: it is multiplied for scripts of several suites
# (a "10m" would end the loop over them in an arithmetic error).
case $timeout_s in
'' | *[!0-9]* | 0*)
    echo "run-tests: PJ_TEST_TIMEOUT=$timeout_s: want whole seconds, at least 1" >&2
    exit 2
    ;;
esac
export PJ_BUILD=$build
# Sanitizer builds (make SANITIZE=...): nng 1.5.2's own unreaped objects are
# suppressed as in tests/e2e_asan.sh; the file says what that costs.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan-nng.supp:print_suppressions=0}
# SANITIZE=thread: the daemons a suite starts stop at their first report
# (exit 66, which the suite sees); tests/tsan.supp says what is not one.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$PWD/tests/tsan.supp:halt_on_error=1:print_suppressions=0}
# Each suite's output is also kept in a log, so that the reasons of a failed
# suite can be repeated at the very end: CI shows only the last lines.
logdir=$build/test-logs
mkdir -p "$logdir"
passed=0
failed=0
skipped=0
failures=()
run_one() {
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "=== $name"
    # Into a file, not through a pipe: a daemon a crashed suite left behind
    # would hold a pipe open and stall the run.
    local rc=0
    timeout --kill-after=10 "$limit" "$@" > "$logdir/$name.log" 2>&1 || rc=$?
    cat "$logdir/$name.log"
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "--- $name: ok ($((SECONDS - start)) s)"
    elif [ "$rc" -eq 77 ]; then # the suite cannot run on this build, and said why
        skipped=$((skipped + 1))
        echo "--- $name: skipped"
    else
        failed=$((failed + 1))
        failures+=("$name")
        local why=""
        # timeout's own 124, or 137 when the suite outlived its SIGTERM
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            [ $((SECONDS - start)) -lt "$limit" ] || why=": killed at its limit of $limit s"
        fi
        echo "--- $name: FAILED, exit $rc ($((SECONDS - start)) s$why)"
    fi
}
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$timeout_s" "$t"
done
for s in tests/e2e_*.sh; do
    [ -f "$s" ] || continue
    # A script that runs several suites says how many in a line
    # "# run-tests: N suites", and gets the limit of each: e2e_depth's four
    # took 288 s of one limit on a loaded 2-core machine, and went past it.
    n=$(sed -n 's/^# run-tests: \([1-9][0-9]*\) suites$/\1/p' "$s" | head -1)
    run_one "$(basename "$s" .sh)" $((${n:-1} * timeout_s)) bash "$s" "$build"
done
if [ "$failed" -ne 0 ]; then
    # Check reports a failed assertion as file:line:F|E:case:test:...; the
    # scripts say "not ok" / "FAIL". Repeat those lines (at most 20 per suite).
    for name in "${failures[@]}"; do
        echo "--- why $name failed (full log: $logdir/$name.log):"
        grep -E ':[FE]:|not ok|FAIL|Timeout|timed out|[Ss]ignal' "$logdir/$name.log" | head -20
    done
    echo "failed suites: ${failures[*]}"
fi
extra=""
[ "$skipped" -eq 0 ] || extra=", $skipped skipped"
echo "suites: $passed passed, $failed failed$extra"
[ "$failed" -eq 0 ]
