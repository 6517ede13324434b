#!/usr/bin/env bash
# The measurements of one session on a lent one-GPU H200 machine, in calls of at most
# 10 minutes each (the device tool's limit). Each phase is one call:
#
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh checks  # GPU tests and
#                                                 # memcheck side by side, then the tests
#                                                 # marked bigmem alone (~6 min; KP_GPU_TEST_LIMIT_S:
#                                                 # the first tests' limit, default 300)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh gemm    # GEMM tuning sweep (~6 min;
#                                                 # KP_GEMM_BUDGET_S: its --budget-s, default 330)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh chunks  # chunk-rules runs 1
#                                                 # and 2 (~6 min; fit them on the CPU after)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh suites  # the models suite,
#                                                 # then the default suite (~8 min)
#   KP_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/h200_session.sh ab NAME  # scripts/NAME_ab.py,
#                                                 # an A/B that a constant will cite
#
# Order: checks first (a wrong kernel makes every timing moot), then gemm and chunks,
# whose results choose constants (ops/matmul.py, plan_rule.py: commit them), then suites
# at the commit that holds those constants, then checks again at that commit.
#
# What it writes, under $OUT/r and tarred into $OUT/<phase>.tgz (the device tool brings few
# files back):
#   checks: checks/gpu-tests-<stamp>.log + .xml, checks/gpu-tests-bigmem-<stamp>.log + .xml,
#           checks/memcheck-<stamp>.log
#                                                         -> results/h200/checks/
#   gemm:   h200/gemm_tune.json + .log                    -> results/h200/
#   chunks: h200/chunk_rules_run1.json, _run2 (+ .log)    -> results/h200/ (kp results --import)
#   suites: h200/models.json, h200/default.json (+ .log)  -> results/h200/ (kp results --import)
#   ab:     checks/NAME-ab-<stamp>.log                    -> results/<gpu>/checks/
#
# Timed phases run alone on the GPU: anything else on the machine moves their numbers.
# KP_GIT_COMMIT names the full commit measured (every result records it): the machine's
# copy of the tree carries an older .git. Wheels in .whl/ (Liger-Kernel) install to /tmp/site.
set -u
phase=${1:?usage: h200_session.sh checks|gemm|chunks|suites|ab NAME}
case $phase in checks | gemm | chunks | suites) ;;
ab)
    ab=${2:?usage: h200_session.sh ab NAME (runs scripts/NAME_ab.py)}
    [[ -f scripts/${ab}_ab.py ]] || { echo "no scripts/${ab}_ab.py" >&2; exit 2; }
    ;;
*)
    echo "unknown phase $phase (checks, gemm, chunks, suites or ab)" >&2
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
say() { echo "[$phase $(($(date +%s) - T0)) s] $*" | tee -a "$R/session.txt"; }
left() { echo $((${1:-570} - ($(date +%s) - T0))); }  # seconds left of the call

nvidia-smi -L >>"$R/session.txt"
say "commit $KP_GIT_COMMIT"
case $phase in
checks)
    # Both check results, not speed: they may share the GPU. The outer limit sends SIGINT,
    # which pytest takes as KeyboardInterrupt: it still writes the -rf summary and the XML.
    s=$(stamp)
    timeout -k 5 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
        python3 scripts/sanitize_paths.py >"$R/checks/memcheck-$s.log" 2>&1 &
    # 200 s stopped 8 of 579 tests on 2026-12-05: the RMSNorm real sizes take 30-51 s each.
    # The tests marked bigmem (tensors past 2^31 elements, tens of GB each) run alone after
    # the rest and memcheck: beside 13 other workers one ran out of memory on an 80 GB card.
    tests=(tests/test_gpu_rows.py tests/test_gpu_rms_norm.py tests/test_gpu_add_matmul.py
        tests/test_gpu_bench_smoke.py tests/test_routes.py)
    timeout -s INT -k 5 "${KP_GPU_TEST_LIMIT_S:-300}" python3 -m pytest -q -rf -p no:cacheprovider \
        --timeout=90 -n 12 -m "not bigmem" --junitxml="$R/checks/gpu-tests-$s.xml" "${tests[@]}" \
        >"$R/checks/gpu-tests-$s.log" 2>&1
    say "GPU tests: exit $?"
    wait
    say "memcheck: exit $? ($(grep -hE 'paths, [0-9]+ failed|ERROR SUMMARY' "$R/checks/memcheck-$s.log" | tr '\n' ' '))"
    timeout -s INT -k 5 120 python3 -m pytest -q -rf -p no:cacheprovider --timeout=90 -m bigmem \
        --junitxml="$R/checks/gpu-tests-bigmem-$s.xml" "${tests[@]}" \
        >"$R/checks/gpu-tests-bigmem-$s.log" 2>&1
    say "GPU tests that need tens of GB, alone: exit $?"
    grep -hE "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$R/checks/gpu-tests-$s.log" \
        "$R/checks/gpu-tests-bigmem-$s.log" | tail -n 25
    ;;
gemm)
    timeout -s INT -k 5 "$(left 560)" python3 scripts/gemm_tune.py --out "$R/h200" --warm-jobs 14 \
        --budget-s "${KP_GEMM_BUDGET_S:-330}" >"$R/gemm.out" 2>&1
    say "GEMM sweep: exit $?"
    tail -n 40 "$R/gemm.out"
    ;;
chunks)
    # Run 1: the warm pass (every kernel variant compiled in 14 processes, about a minute,
    # outside the budget), then 150 s of cells; run 2 takes what is left, less a margin for
    # the cell that starts last and for writing the result.
    timeout 300 python3 scripts/chunk_rules_sweep.py --run 1 --warm-jobs 14 --budget-s 150 \
        --out "$R/h200" >"$R/chunk1.out" 2>&1
    say "chunk rules run 1: exit $?"
    timeout "$(left 575)" python3 scripts/chunk_rules_sweep.py --run 2 \
        --budget-s "$(($(left 575) - 40))" --out "$R/h200" >"$R/chunk2.out" 2>&1
    say "chunk rules run 2: exit $?"
    grep -h "cells" "$R"/chunk*.out | tail -n 4
    ;;
ab)
    log="$R/checks/${ab//_/-}-ab-$(stamp).log"
    timeout "$(left 575)" python3 "scripts/${ab}_ab.py" >"$log" 2>&1
    say "A/B $ab: exit $?"
    tail -n 12 "$log"
    ;;
suites)
    for suite in models default; do
        timeout "$(left 575)" python3 -m kernel_portfolio bench --suite "$suite" --out "$R/h200" \
            >"$R/bench-$suite.out" 2>&1
        say "$suite suite: exit $?"
        tail -n 3 "$R/bench-$suite.out"
    done
    ;;
esac
tar czf "$OUT/$phase.tgz" -C "$R" .
say "done"
