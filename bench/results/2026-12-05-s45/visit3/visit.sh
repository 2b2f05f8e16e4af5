#!/usr/bin/env bash
# Session 45, visit 3 (run as one command line on visit 1's machine, kept
# here as it ran): projd on 350 layers naming the 8B-shaped gate_up_proj
# (format auto: z12, a bf16 copy each at shapes.max_m 256), to see the
# memory plan's figure against what the upload takes, near the device's
# size. Its log is out/memplan350.log.
. bench/visit-common.sh >/dev/null 2>&1
python3 -c 'import json;c=json.load(open("/tmp/l8/cfg128.json"));c["model"]["layers"]=[{"name":"big.%d"%i,"tensor":"gate_up_proj.weight"} for i in range(350)];json.dump(c,open("/tmp/l8/cfg350.json","w"))'
t0=$SECONDS
T=""
[ -x /usr/bin/time ] && T="/usr/bin/time -v"
timeout 200 $T $B/bin/projd --socket ipc:///tmp/l8/b.sock --config /tmp/l8/cfg350.json > $OUT/memplan350.log 2>&1
echo "rc=$? in $((SECONDS-t0)) s" | tee -a $OUT/memplan350.log
grep -iE 'need at least|error|fatal|Maximum resident|convert' $OUT/memplan350.log | cut -c1-700 | head -8
free -g | head -2
