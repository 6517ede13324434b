#!/usr/bin/env bash
# The measurements of one session on a lent two-GPU H200 machine, in three calls of at
# most 10 minutes each (the device tool's limit), in this order:
#
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh suite   # default suite ALONE on
#                                                                            # GPU 0 (~8 min)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh sweeps  # chunk rules on GPU 1;
#                                             # specialization, then the GPU tests, on GPU 0 (~9 min)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh checks  # memcheck, then the
#                                                                            # two-GPU tests (~2 min)
#
# What it writes, under $OUT/r and tarred into $OUT/<phase>.tgz (the device tool brings few
# files back):
#   suite:  h200/default.json + .log                      -> results/h200/ (kp results --import)
#   sweeps: h200/chunk_rules_run1.json, _run2, _fit, specialization.json (+ .log each)
#                                                         -> results/h200/ (kp results --import)
#           checks/gpu-tests-<stamp>.log + .xml           -> results/h200/checks/
#   checks: checks/memcheck-<stamp>.log, checks/two-gpu-tests-<stamp>.log
#                                                         -> results/h200/checks/
#
# The default suite runs alone: event-timed cases carry host work, and anything else on
# the machine moves them. Each GPU's work is pinned to its half of the CPU cores.
# KP_GIT_COMMIT names the full commit measured (every result records it): the machine's
# copy of the tree carries an older .git. Wheels in .whl/ (Liger-Kernel) install to /tmp/site.
set -u
phase=${1:?usage: h200_session.sh suite|sweeps|checks}
case $phase in suite | sweeps | checks) ;; *)
    echo "unknown phase $phase (suite, sweeps or checks)" >&2
    exit 2
    ;;
esac
: "${OUT:?set OUT to the folder that comes back}"
: "${KP_GIT_COMMIT:?set KP_GIT_COMMIT to the commit being measured}"
if [[ ! $KP_GIT_COMMIT =~ ^[0-9a-f]{40}$ ]]; then
    echo "KP_GIT_COMMIT must be the full 40-hex commit (git rev-parse HEAD), got $KP_GIT_COMMIT" >&2
    exit 2
fi
export KP_GIT_DIRTY=${KP_GIT_DIRTY:-0} PYTHONUNBUFFERED=1
T0=$(date +%s)
R=$OUT/r
mkdir -p "$R/h200" "$R/checks"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src
stamp() { date -u +%Y%m%dT%H%MZ; }
pin() { local cores=$1; shift; if command -v taskset >/dev/null; then taskset -c "$cores" "$@"; else "$@"; fi; }
say() { echo "[$phase $(($(date +%s) - T0)) s] $*" | tee -a "$R/session.txt"; }
gpu_tests() {  # $1: seconds
    pin 0-15 timeout -s INT -k 5 "$1" python3 -m pytest -q -rf -p no:cacheprovider --timeout=60 -n 8 \
        --junitxml="$R/checks/gpu-tests-$(stamp).xml" tests/test_gpu_rows.py tests/test_gpu_rms_norm.py \
        tests/test_gpu_add_matmul.py tests/test_gpu_bench_smoke.py tests/test_routes.py \
        >"$R/checks/gpu-tests-$(stamp).log" 2>&1
}

nvidia-smi -L >>"$R/session.txt"
say "commit $KP_GIT_COMMIT"
case $phase in
suite)
    CUDA_VISIBLE_DEVICES=0 pin 0-15 timeout 560 python3 -m kernel_portfolio bench --suite default \
        --out "$R/h200" >"$R/bench.out" 2>&1
    say "default suite: exit $?"
    tail -n 5 "$R/bench.out"
    ;;
sweeps)
    (
        export CUDA_VISIBLE_DEVICES=1 OMP_NUM_THREADS=8
        pin 16-31 timeout 280 python3 scripts/chunk_rules_sweep.py --run 1 --warm-jobs 14 \
            --budget-s 190 --out "$R/h200" &&
            pin 16-31 timeout 220 python3 scripts/chunk_rules_sweep.py --run 2 --budget-s 140 \
                --out "$R/h200" &&
            python3 scripts/chunk_rules_fit.py --out "$R/h200"
        echo "chunk rules: exit $?"
    ) >"$R/chunk.out" 2>&1 &
    CUDA_VISIBLE_DEVICES=0 pin 0-15 timeout 240 python3 scripts/specialization_sweep.py \
        --out "$R/h200" >"$R/spec.out" 2>&1
    say "specialization sweep: exit $?"
    left=$((570 - ($(date +%s) - T0)))
    CUDA_VISIBLE_DEVICES=0 gpu_tests "$left"
    say "GPU tests: exit $?"
    wait
    say "$(tail -n 1 "$R/chunk.out")"
    grep -hE "^[0-9]+ (passed|failed)|passed|failed" "$R"/checks/gpu-tests-*.log | tail -n 3
    ;;
checks)
    CUDA_VISIBLE_DEVICES=1 pin 16-31 timeout -k 5 120 compute-sanitizer --tool memcheck \
        --error-exitcode 1 python3 scripts/sanitize_paths.py >"$R/checks/memcheck-$(stamp).log" 2>&1
    say "memcheck: exit $?"
    timeout 120 python3 -m pytest -q -rf -p no:cacheprovider -k second tests/test_gpu_rows.py \
        tests/test_gpu_rms_norm.py tests/test_gpu_add_matmul.py \
        >"$R/checks/two-gpu-tests-$(stamp).log" 2>&1
    say "two-GPU tests: exit $?"
    ;;
esac
tar czf "$OUT/$phase.tgz" -C "$R" .
say "done"
