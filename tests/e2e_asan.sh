#!/usr/bin/env bash
# The daemon suites again, with projd and the tests built under
# AddressSanitizer + LeakSanitizer + UBSan. The suites stop projd with
# SIGTERM and require exit code 0, so a leak at exit (LeakSanitizer makes
# the exit code non-zero), a heap error or undefined behaviour in the
# daemon fails them; the daemon's report is printed from its log.
#
# Usage: tests/e2e_asan.sh [BUILD]   (run by tests/run-tests.sh with the
# build under test). The sanitizer build lives in its own folder, without
# CUDA (the suites run the cpu backend), so it never mixes objects with
# `make SANITIZE=...` builds. PJ_E2E_REQUESTS (default 100) sets the
# requests per client of the concurrency test.
# run-tests: 7 suites
set -euo pipefail
build=${1:-build}
case "$build" in
*address*)
    echo "e2e_asan: $build is already a sanitizer build; its daemon suites ran there"
    exit 77
    ;;
esac
cc=${CC:-gcc}
[ "$cc" = cc ] && cc=gcc
probe=$(mktemp)
if ! echo 'int main(void){return 0;}' | "$cc" -fsanitize=address,undefined -x c - -o "$probe" 2>/dev/null ||
    ! "$probe"; then
    rm -f "$probe"
    echo "e2e_asan: $cc cannot build and run an ASan/UBSan program here"
    exit 77
fi
rm -f "$probe"

# Beside the build under test, so that two checkouts' or builds' runs never
# compile into one folder at once.
sbuild=${PJ_ASAN_BUILD:-$build-e2e-asan}
# The daemon's suites, and the client library's: its requests freed in
# flight, closes from callbacks and waits on freed requests are lifetimes
# only a sanitizer sees go wrong.
suites=(test_daemon_unit test_daemon_e2e test_daemon_ops test_daemon_ring test_daemon_depth
    test_libprojd test_client_offline)
# projctl too: test_libprojd runs its bench-ipc beside projd.
targets=("$sbuild/bin/projd" "$sbuild/bin/projctl")
for s in "${suites[@]}"; do targets+=("$sbuild/tests/$s"); done
start=$SECONDS
make -s -j2 SANITIZE=address,undefined CUDA=0 BUILD="$sbuild" "${targets[@]}"
echo "e2e_asan: sanitizer build ready in $((SECONDS - start)) s"

export PJ_BUILD=$sbuild
export PJ_E2E_REQUESTS=${PJ_E2E_REQUESTS:-100}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
# nng 1.5.2's own objects only; see the file for what this costs.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan-nng.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for s in "${suites[@]}"; do
    t0=$SECONDS
    if "$sbuild/tests/$s"; then
        echo "e2e_asan: $s ok ($((SECONDS - t0)) s)"
    else
        echo "e2e_asan: $s FAILED ($((SECONDS - t0)) s)"
        failed=1
    fi
done
exit $failed
