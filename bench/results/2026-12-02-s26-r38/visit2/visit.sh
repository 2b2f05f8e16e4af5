#!/bin/bash
# Round 38, visit 2: the neighbourhood of the heuristic's choices (every tile, stages, cluster shape, custom option, K split of the family) at m = 16..256
# (projd-bench --lt-survey), one build (the survey's). Run from the device
# copy's root: bash bench/results/2026-12-02-s26-r38/visit2/visit.sh
. bench/visit-common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
mkdir -p "$OUT/lts"
PJ_LT_BUDGET=${PJ_LT_BUDGET:-3} timeout 530 "$B/bin/projd-bench" --out "$OUT/lts" \
    --lt-survey "${LT_RANGE:-16-256}" >"$OUT/lts/survey.log" 2>&1
echo "survey rc $?"
gzip -f "$OUT/lts/lt_survey.csv" 2>/dev/null
sed -n '/^lt-survey/,$p' "$OUT/lts/survey.log" | cut -c1-230
