#!/usr/bin/env bash
# check_config.sh — a GPU suite: `projd --check-config` on the cuda backend
# checks the device the configuration names, as a start would: a
# device.index past the visible devices and a device.uuid that is none of
# theirs are problems (exit 1, the start's own words), the visible device
# by index and by its uuid pass (exit 0), and the same wrong index makes a
# real start fail the same way. Exit 77 (skipped) where there is no GPU.
# Usage: tests/gpu/check_config.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/bin
for f in "$bin/projd" "$bin/projctl"; do
    if [ ! -e "$f" ]; then
        echo "check_config: FAIL: $f is missing" >&2
        exit 1
    fi
done
if ! command -v nvidia-smi >/dev/null || ! timeout 20 nvidia-smi -L >/dev/null 2>&1; then
    echo "check_config: no GPU here: skipped"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/daemons.sh
. "$here/../daemons.sh"
pjd_setup check_config
pjd_mkmodel small 1
failures=0
cases=0
# check JSON CODE PATTERN: --check-config of that configuration.
check() {
    printf '%s\n' "$1" >"$tmp/c.json"
    pjd_expect "$2" "$3" "$bin/projd" --config "$tmp/c.json" --model "$model" \
        --socket "ipc://$tmp/c.sock" --check-config
}
visible=$(timeout 20 nvidia-smi -L | wc -l)
uuid=$(timeout 20 nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
check '{ "device": { "backend": "cuda", "index": 0 } }' 0 "configuration OK.*backend cuda"
check "{ \"device\": { \"backend\": \"cuda\", \"index\": $visible } }" 1 \
    "backend cuda: device.index $visible: [0-9]+ devices? visible"
check '{ "device": { "backend": "cuda", "uuid": "GPU-00000000-0000-0000-0000-000000000000" } }' 1 \
    "device.uuid GPU-00000000-0000-0000-0000-000000000000 is not among the visible devices"
if [ -n "$uuid" ]; then
    check "{ \"device\": { \"backend\": \"cuda\", \"uuid\": \"$uuid\" } }" 0 "configuration OK"
fi
# A start with the wrong index fails with the same words.
printf '%s\n' "{ \"device\": { \"backend\": \"cuda\", \"index\": $visible } }" >"$tmp/s.json"
pjd_expect 1 "device.index $visible" timeout 60 "$bin/projd" --config "$tmp/s.json" --model "$model" \
    --socket "ipc://$tmp/s.sock"
echo "check_config: $cases cases, $failures failed"
[ "$failures" -eq 0 ]
