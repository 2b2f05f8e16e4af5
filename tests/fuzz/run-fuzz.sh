#!/usr/bin/env bash
# Run each libFuzzer harness for a bounded time, seeded from tests/fuzz/seeds/<name>/.
set -u
dir=${1:?fuzz build dir}
secs=${2:-20}
rc=0
for f in "$dir"/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus=$(mktemp -d)
    seeds=tests/fuzz/seeds/${name#fuzz_}
    [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
    echo "=== $name for ${secs}s"
    if ! "$f" -max_total_time="$secs" -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$dir/$name-" "$corpus" 2>"$dir/$name.log"; then
        echo "--- $name: FAILED (see $dir/$name.log)"
        tail -n 30 "$dir/$name.log"
        rc=1
    else
        grep -E 'stat::number_of_executed_units' "$dir/$name.log" | sed "s/^/    /"
        echo "--- $name: ok"
    fi
    rm -rf "$corpus"
done
exit $rc
