#!/usr/bin/env bash
# Session 30, visit 1: the final check of main (the systemd watchdog, its
# GPU section W in test_cuda_backend; test_engines' pipe 7 r = 3 refusal;
# f07b9fc's gzq_variant on the GPU for the first time): GPU suites with the
# committed table, the fatal-error test, the benchmark twice. Then what the
# host has of SGLang (projd_sglang has never run inside it).
. bench/visit-common.sh
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "== W|W:|xreg|pipe=7, n|test_cuda_backend:" "$F/final/backend.log" | head -12
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
{
    python3 --version
    python3 -m pip list 2>/dev/null | grep -i -E '^(sglang|sgl|torch|vllm|flashinfer|triton|transformers) '
    python3 -c "import sglang; print('sglang', sglang.__version__)" 2>&1 | tail -1
} >"$OUT/python.txt" 2>&1
cat "$OUT/python.txt"
