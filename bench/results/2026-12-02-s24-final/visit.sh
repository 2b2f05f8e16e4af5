#!/usr/bin/env bash
# Session 24's final check: bench/final-check.sh of the build (GPU suites
# with the committed table, the benchmark twice); everything that comes
# back is one archive (out.tgz) plus the summary printed here.
. bench/visit-common.sh
timeout 500 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 | tail -14
tar czf "$OUT/out.tgz" -C "$F/final" .
