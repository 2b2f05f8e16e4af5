# shellcheck shell=bash
# daemons.sh — sourced by the test scripts that start projd daemons of their
# own (tests/e2e_python.sh, tests/gpu/python_torch.sh, python_sglang.sh,
# tests/e2e_install.sh and more).
#
#   pjd_skip_under_tsan TAG BIN WHY  exit 77 (skipped) for a TSan build
#   pjd_setup TAG          a temporary folder $tmp, killed daemons and the
#                          folder removed on exit; messages start with TAG
#   pjd_mkmodel PRESET SEED  the generated model in $tmp, its path in $model
#                          (else the suite fails, saying so)
#   pjd_start NAME JSON S [CMD...]  projd with config JSON and model $model
#                          on ipc://$tmp/NAME.sock, answering within S seconds
#                          (else the suite fails with its log); its pid in
#                          $pjd_pid. CMD, if given, runs projd: a wrapper
#                          that ends in exec "$@" (the pid stays projd's)
#   pjd_stop_all           every daemon must still run and drain on SIGTERM
#                          with exit 0; prints why not; returns the count
#   pjd_asan_env LIB       asan_env: what a Python process needs to load LIB
#                          when it is a sanitizer build (the runtime first;
#                          the interpreter's own allocations are not ours)
#   ok WHAT / not_ok WHAT  one case passed / failed: "ok: WHAT" or
#                          "not ok: WHAT", counted in $cases (and $failures)
#   pjd_expect CODE RE CMD...  CMD exits CODE and its output (both streams)
#                          matches the extended regex RE; counts $cases and
#                          $failures, and prints what a failing case said
#   pjd_torch_gpu TAG BUILD  for the GPU suites in Python: $lib (the build's
#                          libprojd.so) and $py (a python3 whose torch sees a
#                          CUDA device); exits 1 when the build lacks projd,
#                          projctl or the library, 77 (skipped) without them
# The caller sets $bin (the build's bin folder) and, before pjd_start,
# $model (the model file; pjd_mkmodel sets it).
# shellcheck disable=SC2154  # bin and model: the caller's

# pjd_skip_under_tsan TAG BIN WHY: a suite that cannot run under
# ThreadSanitizer says why and exits 77, which tests/run-tests.sh counts as
# skipped (not passed, not failed), when BIN is a TSan build.
pjd_skip_under_tsan() {
    if readelf -d "$2" 2>/dev/null | grep -q 'libtsan'; then
        echo "$1: skipped under ThreadSanitizer: $3"
        exit 77
    fi
}

pjd_setup() {
    pjd_tag=$1
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$pjd_tag.XXXXXX")
    pjd_pids=()
    pjd_names=()
    trap pjd_cleanup EXIT
}

# shellcheck disable=SC2317  # run by the EXIT trap
pjd_cleanup() {
    local p
    for p in "${pjd_pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null
            for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$p" 2>/dev/null
        fi
    done
    rm -rf "$tmp"
}

pjd_mkmodel() {
    model=$tmp/$1-$2.safetensors
    if ! "$bin/projctl" mkmodel --preset "$1" --seed "$2" --out "$model" >/dev/null; then
        echo "$pjd_tag: FAIL: projctl mkmodel --preset $1 --seed $2" >&2
        exit 1
    fi
}

pjd_start() {
    local name=$1 json=$2 secs=$3 pid
    printf '%s\n' "$json" >"$tmp/$name.json"
    "${@:4}" "$bin/projd" --config "$tmp/$name.json" --model "$model" --socket "ipc://$tmp/$name.sock" \
        2>"$tmp/$name.log" &
    pid=$!
    # shellcheck disable=SC2034  # the caller's
    pjd_pid=$pid
    pjd_pids+=("$pid")
    pjd_names+=("$name")
    for _ in $(seq $((secs * 5))); do
        "$bin/projctl" --socket "ipc://$tmp/$name.sock" status >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "$pjd_tag: FAIL: projd ($name) did not come up within $secs s" >&2
    cat "$tmp/$name.log" >&2
    exit 1
}

# shellcheck disable=SC2034  # cases, failures: the caller's counts
ok() {
    cases=$((cases + 1))
    echo "ok: $*"
}

# shellcheck disable=SC2034
not_ok() {
    cases=$((cases + 1))
    failures=$((failures + 1))
    echo "not ok: $*"
}

pjd_expect() {
    local code=$1 pattern=$2 rc=0
    shift 2
    cases=$((cases + 1))
    "$@" >"$tmp/expect.out" 2>&1 || rc=$?
    if [ "$rc" -ne "$code" ] || ! grep -Eq -- "$pattern" "$tmp/expect.out"; then
        failures=$((failures + 1))
        echo "$pjd_tag: FAIL: $*: exit $rc (expected $code), output:" >&2
        sed 's/^/    /' "$tmp/expect.out" >&2
        echo "    (expected to match: $pattern)" >&2
    fi
}

# pjd_stop_at I: SIGTERM the I-th daemon pjd_start started and wait for
# it; one that died before, or exits non-zero, is said with its log. 0, or
# 1. It is then no longer among the daemons pjd_stop_all stops.
pjd_stop_at() {
    local p=${pjd_pids[$1]} name=${pjd_names[$1]} code=0
    unset "pjd_pids[$1]" "pjd_names[$1]"
    if ! kill -0 "$p" 2>/dev/null; then
        echo "$pjd_tag: FAIL: projd ($name) died during the tests" >&2
        cat "$tmp/$name.log" >&2
        return 1
    fi
    kill -TERM "$p"
    wait "$p" || code=$?
    if [ "$code" -ne 0 ]; then
        echo "$pjd_tag: FAIL: projd ($name) exited $code after SIGTERM" >&2
        cat "$tmp/$name.log" >&2
        return 1
    fi
}

# pjd_stop NAME: pjd_stop_at for the daemon pjd_start started as NAME.
pjd_stop() {
    local i
    for i in "${!pjd_names[@]}"; do
        if [ "${pjd_names[$i]}" = "$1" ]; then
            pjd_stop_at "$i"
            return
        fi
    done
    echo "$pjd_tag: FAIL: no daemon $1 to stop" >&2
    return 1
}

pjd_stop_all() {
    local i failures=0
    for i in "${!pjd_pids[@]}"; do
        pjd_stop_at "$i" || failures=$((failures + 1))
    done
    pjd_pids=()
    pjd_names=()
    return "$failures"
}

pjd_asan_env() {
    local cc=${CC:-gcc}
    [ "$cc" = cc ] && cc=gcc
    asan_env=()
    if readelf -d "$1" 2>/dev/null | grep -q 'libasan'; then
        asan_env+=("LD_PRELOAD=$("$cc" -print-file-name=libasan.so)"
            "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}")
    fi
}

pjd_torch_gpu() {
    local tag=$1 build=$2 f
    lib=
    for f in "$build"/lib/libprojd.so*; do
        [ -e "$f" ] && lib=$f && break
    done
    for f in "$build/bin/projd" "$build/bin/projctl" "$lib"; do
        if [ -z "$f" ] || [ ! -e "$f" ]; then
            echo "$tag: FAIL: ${f:-libprojd.so} is missing under $build" >&2
            exit 1
        fi
    done
    py=$(command -v python3 || true)
    if [ -z "$py" ] || ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        echo "$tag: no python3 with torch and a CUDA device here: skipped"
        exit 77
    fi
}
