#!/usr/bin/env bash
# Final GPU checks on an H200 machine (two GPUs for the cuda:1 tests), one command of
# at most about 7 minutes:
#   (a) the GPU test files (pytest, 60 s per test, 330 s in all) -> $OUT/gpu-tests.log
#   (b) every kernel path once under compute-sanitizer memcheck (90 s) -> $OUT/memcheck.log
# plus $OUT/gpu-final.log (status lines of both steps and what the machine is).
# Needs PYTHONPATH=$PWD/src (the package) and OUT (the folder the logs go to).
# Exit status: 0 when both steps passed, else 1.
set -uo pipefail

: "${OUT:?set OUT to the folder the logs go to}"
mkdir -p "$OUT"
summary="$OUT/gpu-final.log"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "gpu_final.sh started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv,noheader \
    2>&1 | tee -a "$summary"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' \
    2>&1 | tee -a "$summary"

# (a) GPU tests. -rf prints the failures' one-line summary; --timeout=60 (pytest-timeout)
# fails a hung test on its own. The outer limit sends SIGINT, which pytest takes as
# KeyboardInterrupt: it still prints the -rf summary and writes the JUnit XML (SIGKILL
# 5 s later only if that hangs). Test files that import plotly are not collected
# (plotly is not installed on the GPU machine). The five files take about 4-5 minutes
# one after another (mostly Triton compiles and float64 references on the CPU), so they
# run in 6 pytest-xdist workers (installed there) sharing the one GPU: these tests
# check results, not speed. KP_GPU_TEST_WORKERS=0 runs them in one process instead.
start=$(date +%s)
timeout -s INT -k 5 "${KP_GPU_TEST_LIMIT_S:-330}" python3 -m pytest -q -rf -p no:cacheprovider --timeout=60 \
    -n "${KP_GPU_TEST_WORKERS:-6}" \
    --junitxml="$OUT/gpu-tests.xml" \
    tests/test_gpu_rows.py tests/test_gpu_rms_norm.py tests/test_gpu_add_matmul.py \
    tests/test_gpu_bench_smoke.py tests/test_routes.py 2>&1 | tee "$OUT/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
note "gpu tests: exit $tests_rc ($(($(date +%s) - start)) s; 124 or 137: stopped by the time limit)"
grep -E '^(FAILED|ERROR) |^[0-9]+ (passed|failed)|[0-9]+ (passed|failed|error)' \
    "$OUT/gpu-tests.log" | tail -n 40 >>"$summary"

# (b) memcheck of every kernel path (the script disables the caching allocator itself).
start=$(date +%s)
timeout -k 5 90 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 scripts/sanitize_paths.py 2>&1 | tee "$OUT/memcheck.log"
memcheck_rc=${PIPESTATUS[0]}
note "memcheck: exit $memcheck_rc ($(($(date +%s) - start)) s; 124 or 137: stopped by the 90 s limit)"
grep -E 'FAIL|ERROR SUMMARY|paths, [0-9]+ failed' "$OUT/memcheck.log" >>"$summary"

note "gpu_final.sh finished $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ "$tests_rc" -eq 0 ] && [ "$memcheck_rc" -eq 0 ]
