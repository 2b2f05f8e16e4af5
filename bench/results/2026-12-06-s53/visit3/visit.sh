#!/usr/bin/env bash
# Session 53, visits 3 and 4 (two calls on the same warm H100, after visit 2):
# what visit 1 left unchecked. Visit 1's script ran bench/final-check.sh
# without pj_site_wheels, so python_sglang found no SGLang and was skipped:
# call 3 ran it alone with the carried wheels. Visit 1's test_engines failed
# one check (the tiled-knobs table held a second router m = 128 entry, which
# the loader now refuses as a duplicate of the refused entries[0]); call 4
# ran test_engines alone from a pack of that one binary after the fix
# (7f99216). The two commands, as run:
. bench/visit-common.sh
case ${1:-both} in
sglang | both)
    pj_site_wheels && timeout 200 bash tests/gpu/python_sglang.sh "$B" 2>&1 | tail -8
    echo rc=$?
    ;;
esac
case ${1:-both} in
engines | both)
    table=$(bash bench/gpu-table.sh)
    PJ_TUNE_TABLE=$PWD/$table timeout 200 "$B/tests/gpu/test_engines" >"$OUT/test_engines.log" 2>&1
    echo rc=$?
    grep -E 'FAIL|test_engines:|table loader, tiled' "$OUT/test_engines.log" | head
    ;;
esac
