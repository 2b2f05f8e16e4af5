#!/usr/bin/env bash
# e2e_bench_args.sh — projd-bench's command line on a machine without a
# usable GPU: every option, file and configuration it is given is checked
# before the first device call, so a mistake is said at once (exit 1, or 2
# for an unknown option or a missing value) instead of after minutes of
# set-up and tuning; with all of
# them right it stops at the device with "no usable GPU", not a runtime
# error code. CUDA_VISIBLE_DEVICES is emptied, so this holds on a GPU host
# too. A build without CUDA has no projd-bench: the suite says so and is
# counted as skipped (77).
# Usage: tests/e2e_bench_args.sh BUILD_DIR (shellcheck -x: it sources daemons.sh)
set -u
build=${1:-build}
bin=$build/bin
if [ ! -e "$bin/projd-bench" ]; then
    echo "e2e_bench_args: this build has no projd-bench (built without CUDA); nothing to check"
    exit 77
fi
if [ ! -e "$bin/projctl" ]; then
    echo "e2e_bench_args: FAIL: $bin/projctl is missing (build first: make BUILD=$build)" >&2
    exit 1
fi
export CUDA_VISIBLE_DEVICES=
# In a sanitizer build: projd-bench stops by exit(1) with what it loaded
# still allocated (by design), which LeakSanitizer would turn into exit 23.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_setup e2e_bench_args
pjd_mkmodel small 1
out=$tmp/out.d
printf 'not a table\n' >"$tmp/garbage.json"
printf '{ "model": { "path": "%s" } }\n' "$model" >"$tmp/small.json"
printf '{ "model": { "path": "%s" }, ' "$model" >"$tmp/broken.json"
printf '{ "model": { "path": "%s/none.safetensors" } }\n' "$tmp" >"$tmp/nomodel.json"
printf 'o 1 gemv nw=4\n' >"$tmp/probe.txt"
printf 'o 16 1024 gemvz st=0 cublas algo=0\n' >"$tmp/pair.txt"
table=$(dirname "$0")/../config/tuning/h200.json

failures=0
cases=0
# expect CODE PATTERN ARGS...: projd-bench ARGS exits CODE (within 60 s)
# and its output (both streams) matches the extended regex PATTERN.
expect() {
    pjd_expect "$1" "$2" timeout 60 "$bin/projd-bench" "${@:3}"
}

# Options: unknown, out of range, in combinations that cannot work.
expect 2 'unknown option "--bogus" \(projd-bench --help lists them\)' --bogus
expect 2 "reps needs a value \(it is the last argument\)" --reps
expect 2 "one needs four values: LAYER M ENGINE KNOBS" --one o 1
expect 0 "^usage: projd-bench" --help
expect 0 "Exit status: 0 done" -h
expect 1 'reps: want an integer in 20..5000, got "abc"' --reps abc
expect 1 'reps: want an integer in 20..5000, got "10"' --reps 10
expect 1 'seed: want an integer in 0..1e\+15, got "-1"' --seed -1
expect 1 'tune-m: want LO-HI with 1 <= LO <= HI, got "0-8"' --tune-m 0-8 --tune-new
expect 1 'tune-m: want LO-HI with 1 <= LO <= HI, got "8-1"' --tune-m 8-1 --tune-new
expect 1 "tune-m only works with --tune-new" --tune-m 1-8
expect 1 'lt-survey: want LO-HI with 1 <= LO <= HI, got "256"' --lt-survey 256
PJ_LT_BUDGET=abc expect 1 'PJ_LT_BUDGET: want a number in 0.1..600, got "abc"' --lt-survey 16-256
expect 1 "lt-survey with --tune NEW needs --table OLD" --lt-survey 16-256 --tune "$out/t.json"
expect 1 "tune-full only works with --tune-new" --tune-full
expect 1 "tune-new needs --table OLD and --tune NEW" --tune-new --table "$table"
expect 1 "the benchmark runs with the table --tune writes; add --tune-new" \
    --table "$table" --tune "$tmp/t.json"
expect 1 'flush-kind: want an integer in 0..4, got "5"' --flush-kind 5
expect 1 'flush-kind: want an integer in 0..4, got ""' --flush-kind ""
expect 1 'flush-kind: want an integer in 0..4, got "4294967297"' --flush-kind 4294967297
expect 1 'flush-carveout: want an integer in 0..100, got "x"' --flush-carveout x
expect 1 'flush-carveout: want an integer in 0..100, got ""' --flush-carveout ""
expect 1 "with --flush-kind 1 it would change only the floor" --flush-carveout 50
# The modes run alone; what none of them reads is refused, not ignored.
expect 1 "probe and --touch: one mode at a time" --probe "$tmp/probe.txt" --touch "$tmp/probe.txt"
expect 1 "one and --lt-survey: one mode at a time" --one o 1 gemv nw=4 --lt-survey 1-8
expect 1 "tune does nothing with --probe" --probe "$tmp/probe.txt" --tune "$tmp/t.json"
expect 1 "reps does nothing with --pair" --pair "$tmp/pair.txt" --reps 100
expect 1 "table does nothing with --one" --one o 1 gemv nw=4 --table "$table"
expect 1 "survey or --tune-new does nothing with --lt-survey" --lt-survey 1-8 --survey
expect 1 "tune-budget only works with --tune" --tune-budget 10
expect 1 "one: want an integer in 1..4096" --one o 0 gemv nw=4

# Where it writes: checked before the device.
expect 1 "out $tmp/none/d: No such file or directory" --out "$tmp/none/d"
# A folder another user owns, or a link to one, is not written into (root
# writes its files; links left there could name root's).
mkdir "$tmp/others"
ln -s "$tmp/others" "$tmp/outlink"
expect 1 "out $tmp/outlink: not a directory .a symbolic link is not followed" --out "$tmp/outlink"
expect 1 "out $tmp/outlink: not a directory .a symbolic link is not followed" --out "$tmp/outlink/"
if [ "$(id -u)" = 0 ]; then
    chown 65534 "$tmp/others"
    expect 1 "out $tmp/others: owned by uid 65534" --out "$tmp/others"
fi
expect 1 "tune $tmp/none/t.json: cannot write in $tmp/none" --out "$out" --tune "$tmp/none/t.json"

# What it reads: the table (missing, not a table), a probe list, the
# configuration and the model it names.
expect 1 "tuning table $tmp/missing.json: No such file or directory" \
    --out "$out" --table "$tmp/missing.json"
expect 1 "tuning table: not valid JSON near byte 0 \($tmp/garbage.json\)" \
    --out "$out" --table "$tmp/garbage.json"
expect 1 "probe $tmp/missing.txt: No such file or directory" --out "$out" --probe "$tmp/missing.txt"
expect 1 "touch $tmp/missing.txt: No such file or directory" --out "$out" --touch "$tmp/missing.txt"
expect 1 "pair $tmp/missing.txt: No such file or directory" --out "$out" --pair "$tmp/missing.txt"
expect 1 "config $tmp/missing.json" --out "$out" --config "$tmp/missing.json"
expect 1 "config .*broken.json" --out "$out" --config "$tmp/broken.json"
expect 1 "config $tmp/nomodel.json: .*none.safetensors" --out "$out" --config "$tmp/nomodel.json"
expect 1 "one: m = 999 is outside 1..[0-9]+ \(shapes.max_m\)" --out "$out" \
    --config "$tmp/small.json" --one o 999 gemv nw=4
expect 1 'one: no layer "zz" in the model \(its layers: qkv_gate, o, pooler, unpooler, router\)' \
    --out "$out" --one zz 1 gemv nw=4
expect 1 'one: no engine "gemx" \(gemv, gemvz, splitk, router, cublas\)' --out "$out" \
    --one o 1 gemx nw=4
expect 1 'one: knobs "zz=1": ' --out "$out" --one o 1 gemv zz=1
# A --probe, --touch or --pair file's lines, likewise, each by its line.
printf '# a comment\no 1 gemv nw=4\no 8 gemvq nw=4\n' >"$tmp/probe-bad.txt"
expect 1 "probe $tmp/probe-bad.txt:3: no engine \"gemvq\"" --out "$out" --probe "$tmp/probe-bad.txt"
expect 1 "touch $tmp/probe-bad.txt:3: no engine \"gemvq\"" --out "$out" --touch "$tmp/probe-bad.txt"
printf 'o 16 1024 gemvz st=0 cublas algo=0\nqkv 16 1024 gemvz st=0 cublas algo=0\n' >"$tmp/pair-bad.txt"
expect 1 "pair $tmp/pair-bad.txt:2: no layer \"qkv\" in the model" --out "$out" --pair "$tmp/pair-bad.txt"

# A --tune whose table would not fit (9 layers of their own x 29 m = 261
# entries, over the 256 a table holds) is refused before the device, not
# after hours of tuning; a folder as --tune's table, and an empty path, too.
python3 - "$model" "$tmp/wide.json" <<'PY'
import json, sys
layers = [{"name": "o%d" % i, "tensor": "o.weight"} for i in range(9)]
json.dump({"model": {"path": sys.argv[1], "layers": layers},
           "shapes": {"m": list(range(1, 30))}}, open(sys.argv[2], "w"))
PY
expect 1 "tune: the table would need 261 entries \(29 m for each layer with entries of its own\), over the 256" \
    --out "$out" --config "$tmp/wide.json" --tune "$out/t.json"
expect 1 "tune $out: not a regular file" --out "$out" --tune "$out"
expect 1 'tune "": give the path of the table to write' --out "$out" --tune ""

# All of it right: the configured model loads, then the device is missing,
# and it says so in words.
expect 1 "^config .*small.json: model .*, 5 layers" --out "$out" --config "$tmp/small.json"
expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out" --config "$tmp/small.json" \
    --table "$table"
expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out" --probe "$tmp/probe.txt"
# A benchmark removes an earlier run's results when it starts, so that one
# that dies (here: no GPU) leaves none to be read as its own; a mode that
# writes no results leaves them.
for f in bench.json bench.md samples.csv speedups.dat; do echo old >"$out/$f"; done
expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out" --probe "$tmp/probe.txt"
cases=$((cases + 1))
if [ ! -f "$out/bench.json" ]; then
    echo "e2e_bench_args: FAIL: --probe removed bench.json" >&2
    failures=$((failures + 1))
fi
expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out"
cases=$((cases + 1))
left=""
for f in bench.json bench.md samples.csv speedups.dat; do
    [ -e "$out/$f" ] && left="$left $f"
done
if [ -n "$left" ]; then
    echo "e2e_bench_args: FAIL: a benchmark left an earlier run's files: $left" >&2
    failures=$((failures + 1))
fi
expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out" --pair "$tmp/pair.txt"

# The tuner's test hook, read before the device like the options.
for bad in qkv_gate qkv_gate:0 qkv_gate:8x :8; do
    PJ_BENCH_VET_BREAK=$bad expect 1 "PJ_BENCH_VET_BREAK: want LAYER:M with M >= 1, got \"$bad\"" \
        --out "$out" --tune "$out/t.json"
done
PJ_BENCH_VET_BREAK=qkv_gate:8 expect 1 "no usable GPU: cudaGetDeviceCount" --out "$out" \
    --tune "$out/t.json"

echo "e2e_bench_args: $cases cases, $failures failed"
if [ "$failures" -ne 0 ]; then
    echo "e2e_bench_args: FAIL ($failures failures)"
    exit 1
fi
echo "e2e_bench_args: all passed"
