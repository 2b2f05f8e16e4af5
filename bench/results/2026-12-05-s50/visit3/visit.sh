#!/usr/bin/env bash
# Session 50, visit 3: projd-bench's check after the timed replays (each
# chosen engine run once more from its graph on a poisoned y and compared
# with the reference; exit 1 when one is wrong) and bench.json's `timing`.
# The pack is d609a9f's; .devrun-pack/x.tar.xz carries projd-bench of the
# working tree and a mutant of it whose check skips the replay (y stays
# poisoned), which must fail every shape and exit 1.
. bench/visit-common.sh
mkdir -p /tmp/x && tar xJf .devrun-pack/x.tar.xz -C /tmp/x
X=/tmp/x/.devrun-x
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
[ -f "config/tuning/${slug#nvidia-}.json" ] && table=config/tuning/${slug#nvidia-}.json
echo "device: $gpu; table $table"
commit="$(cat .devrun-pack/commit)+bench-check"
for i in 1 2; do
    timeout 120 "$X/projd-bench" --out "$F/b$i" --reps 300 --table "$table" --commit "$commit" \
        >"$OUT/bench-$i.log" 2>"$OUT/bench-$i.err"
    rc=$?
    echo "bench $i rc=$rc $(grep -E '^SCORE' "$OUT/bench-$i.log"); WRONG lines: $(grep -c WRONG "$OUT/bench-$i.err")"
    python3 - "$F/b$i/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ok = sum(1 for s in j["shapes"] if s.get("correct_after_replays") is True)
print("  json: timing=%r, correct_after_replays true on %d of %d shapes" % (j.get("timing"), ok, len(j["shapes"])))
PY
done
cp "$F/b1/bench.json" "$OUT/bench.json"
timeout 120 "$X/projd-bench-mut" --out "$F/mut" --reps 20 --table "$table" --commit mutant \
    >"$OUT/mut.log" 2>"$OUT/mut.err"
echo "mutant rc=$? (want 1); WRONG lines: $(grep -c WRONG "$OUT/mut.err") (want 30); $(tail -1 "$OUT/mut.err" | cut -c1-160)"
grep -m2 WRONG "$OUT/mut.err" | cut -c1-200
grep -hE '^(decode|verify)' "$OUT/bench-1.log"
