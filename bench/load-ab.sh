#!/usr/bin/env bash
# load-ab.sh — A/B of a model's load on the CPU: two projctl builds run
# `projctl inspect --json MODEL` alternately, RUNS times each (so drift of
# the machine falls on both), and the medians of their read and
# convert + verify times are printed as a table and written as JSON.
# Needs no GPU and no daemon: inspect loads the model as projd does
# (the same threads, the same packing and verifying), then exits.
#
#   bench/load-ab.sh OLD_PROJCTL NEW_PROJCTL MODEL [RUNS] [OUT_JSON]
#
# CONFIG=FILE in the environment loads the layers FILE names (projctl
# --config: a whole model's layers, tensors shared or not) instead of one
# layer per tensor of MODEL.
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_PROJCTL NEW_PROJCTL MODEL [RUNS (default 7)] [OUT_JSON]" >&2
    exit 2
fi
OLD=$1 NEW=$2 MODEL=$3 RUNS=${4:-7} JSON=${5:-}
for b in "$OLD" "$NEW"; do
    [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }
done
[ -r "$MODEL" ] || { echo "$0: cannot read $MODEL" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for i in $(seq 1 "$RUNS"); do
    # Odd runs start with the old build, even runs with the new one.
    if [ $((i % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for who in $order; do
        if [ "$who" = old ]; then bin=$OLD; else bin=$NEW; fi
        if ! "$bin" ${CONFIG:+--config "$CONFIG"} inspect --json "$MODEL" > "$TMP/$who-$i.json" \
            2> "$TMP/$who-$i.err"; then
            echo "$0: $who run $i failed:" >&2
            cat "$TMP/$who-$i.err" >&2
            exit 1
        fi
    done
    printf 'run %d of %d done\n' "$i" "$RUNS" >&2
done
python3 - "$TMP" "$RUNS" "$MODEL" "$OLD" "$NEW" "$JSON" "${CONFIG:-}" <<'EOF'
import json, statistics, sys
tmp, runs, model, old, new, out, config = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
res = {}
for who in ("old", "new"):
    docs = [json.load(open(f"{tmp}/{who}-{i}.json")) for i in range(1, runs + 1)]
    res[who] = {
        "read_ms": [d["load_ms"] for d in docs],
        "convert_ms": [d["convert_ms"] for d in docs],
        "threads": docs[0]["load_threads"],
        # Not stored_bytes: how a build counts a packing's bytes may change
        # (2526ff8 dropped a 16-byte header nothing stored) while the
        # packing, which format, digest and exceptions identify, does not.
        "layers": [(l["name"], l.get("format"), l.get("digest"), l.get("exceptions"))
                   for l in docs[0]["layers"]],
    }
if res["old"]["layers"] != res["new"]["layers"]:
    sys.exit("the two builds stored the model differently (format, digest or exceptions differ)")
med = {w: {k: statistics.median(res[w][k]) for k in ("read_ms", "convert_ms")} for w in res}
total = {w: med[w]["read_ms"] + med[w]["convert_ms"] for w in res}
print(f"model {model}: {len(res['new']['layers'])} layers, {res['new']['threads']} threads, "
      f"median of {runs} runs each, alternated")
print(f"{'':16}{'old ms':>10}{'new ms':>10}{'old/new':>9}")
for k, label in (("read_ms", "read"), ("convert_ms", "convert+verify")):
    print(f"{label:16}{med['old'][k]:10.1f}{med['new'][k]:10.1f}{med['old'][k] / med['new'][k]:9.2f}")
print(f"{'total':16}{total['old']:10.1f}{total['new']:10.1f}{total['old'] / total['new']:9.2f}")
if out:
    doc = {"model": model, "config": config or None, "runs": runs, "old": old, "new": new,
           "threads": res["new"]["threads"],
           "samples": {w: {k: res[w][k] for k in ("read_ms", "convert_ms")} for w in res},
           "median": med, "total_median_ms": total,
           "speedup": {"convert": med["old"]["convert_ms"] / med["new"]["convert_ms"],
                       "total": total["old"] / total["new"]}}
    json.dump(doc, open(out, "w"), indent=1)
    print(f"JSON: {out}")
EOF
