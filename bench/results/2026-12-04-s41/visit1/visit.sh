#!/usr/bin/env bash
# Session 41, visit 1: projd_sglang inside SGLang's own linear layers
# (tests/gpu/python_sglang.sh, SGLang 0.5.10.post1 and the packages the
# image lacks carried as wheels by bench/sglang-wheels.sh), once as is and
# once with SGLang's kernel API logging on (it wraps each method's apply on
# the instance before create_weights); then python_torch.sh, whose module
# changed too.
. bench/visit-common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)"
timeout 240 bash tests/gpu/python_sglang.sh "$B" >"$OUT/python_sglang.log" 2>&1
echo "python_sglang rc=$?"
grep -E "^python_sglang|^test_|^Ran |^OK|FAIL|Error" "$OUT/python_sglang.log" | cut -c1-220 | head -40
SGLANG_KERNEL_API_LOGLEVEL=1 timeout 240 bash tests/gpu/python_sglang.sh "$B" >"$F/python_sglang_logged.log" 2>&1
echo "python_sglang (kernel API logging on) rc=$?"
grep -c "sglang.quant_method.ProjdLinearMethod.apply" "$F/python_sglang_logged.log"
grep -E "^python_sglang|^Ran |^OK|FAIL" "$F/python_sglang_logged.log" | cut -c1-220 | head -10
tail -c 20000 "$F/python_sglang_logged.log" >"$OUT/python_sglang_logged.tail"
timeout 240 bash tests/gpu/python_torch.sh "$B" >"$OUT/python_torch.log" 2>&1
echo "python_torch rc=$?"
grep -E "^python_torch|^Ran |^OK|FAIL" "$OUT/python_torch.log" | head -10
