#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz/), built and run once over their seeds
# (tests/fuzz/seeds/<name>/, crashes found before among them): a harness
# that no longer builds, or a parser change that breaks on an input that
# once crashed it or on the harness's own checks, fails here instead of at
# the next `make fuzz`. (A REGISTER carrying RETRY stopped fuzz_wire's
# canonical re-encoding check within 2 s of fuzzing, unseen for sessions.)
# No fuzzing here: a replay is the same every run; `make fuzz` searches.
#
# Usage: tests/e2e_fuzz_seeds.sh [BUILD]   (run by tests/run-tests.sh). The
# harnesses build beside the build under test, without CUDA, in a folder of
# their own (clang objects never mix with gcc's). Skipped (77) without
# clang and its libFuzzer runtime.
set -u
build=${1:-build}
probe=$(mktemp -d)
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}' |
    clang -fsanitize=fuzzer,address,undefined -x c - -o "$probe/f" 2>/dev/null ||
    ! "$probe/f" -runs=0 >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "e2e_fuzz_seeds: clang cannot build and run a libFuzzer harness here"
    exit 77
fi
rm -rf "$probe"

fbuild=${PJ_FUZZ_BUILD:-$build-fuzz}
start=$SECONDS
if ! make -s -j2 CUDA=0 BUILD="$fbuild" fuzz-build; then
    echo "e2e_fuzz_seeds: FAIL: the harnesses do not build"
    exit 1
fi
echo "e2e_fuzz_seeds: harnesses built in $((SECONDS - start)) s"
failed=0
n=0
for f in "$fbuild"/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    seeds=tests/fuzz/seeds/${name#fuzz_}
    if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
        echo "e2e_fuzz_seeds: FAIL: $name has no seeds in $seeds"
        failed=1
        continue
    fi
    n=$((n + 1))
    log=$fbuild/fuzz/$name.seeds.log
    # -runs=0: each file once; ASan, UBSan and the harness's aborts fail it.
    if "$f" -runs=0 -artifact_prefix="$fbuild/fuzz/$name-" "$seeds" >"$log" 2>&1; then
        echo "e2e_fuzz_seeds: $name: $(ls "$seeds" | wc -l) seeds ok"
    else
        echo "e2e_fuzz_seeds: FAIL: $name on its seeds:"
        grep -E "Running:|ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | head -20
        failed=1
    fi
done
if [ "$n" -eq 0 ]; then
    echo "e2e_fuzz_seeds: FAIL: no harness was built in $fbuild/fuzz"
    exit 1
fi
exit $failed
