"""A/B of one CUDA-graph case of the suite, in the suite's form and the A/B scripts' form.

About half a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/graph_case_ab.py [CASE_ID ...] > results/h200/checks/graph-case-ab-<stamp>.log

The default suite timed the softmax forward of 4x32769 float16 at 3.86 us a
call where ``scripts/coop_split_ab.py`` timed the same kernel at 3.31 us, and
``torch.softmax`` at 12.64 us against 10.64. This times, on the
suite's own inputs (``runner.make_inputs``) and in one interleaved set of
graphs (twenty calls a graph, warm L2, as :func:`ab_support.graph_medians`):
each implementation as the suite calls it (``runner.make_call``: ours
allocates its output), our public function, our forward launcher writing one
output, and ``torch.softmax`` on a fresh ``torch.randn`` input as the A/B
scripts make theirs. If the suite's forms match the A/B's forms here, the
gap is the run's context, not the call path. A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import sys

import torch
from ab_support import graph_medians, setup

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import runner, suites
from kernel_portfolio.ops import softmax

CASES = ("softmax/fwd/4x32769/float16", "softmax/fwd/4x32769/bfloat16")
SEED = 0


def main() -> None:
    setup("graph_case_ab")
    by_id = {case.id: case for case in suites.SUITES["default"].cases}
    for case_id in sys.argv[1:] or CASES:
        case = by_id[case_id]
        if case.op != "softmax" or case.mode != "fwd":
            raise SystemExit(f"graph_case_ab: {case_id}: only softmax forward cases")
        inputs = runner.make_inputs(case, SEED)
        x = inputs.args[0]
        calls = {}
        for name in case.impls:
            call, _ = runner.make_call(case, runner.implementation(case, name), inputs)
            calls[f"suite {name}"] = call
        y = torch.empty_like(x)
        plan = plans.choose_for(x)
        calls["kp.softmax"] = lambda x=x: kp.softmax(x)
        calls["launcher, one output"] = lambda x=x, y=y, plan=plan: softmax._launch_forward(
            x, y, plan
        )
        fresh = torch.randn(x.shape, device="cuda", dtype=x.dtype)
        calls["torch, fresh randn"] = lambda fresh=fresh: torch.softmax(fresh, -1)
        for call in calls.values():
            call()
        us = {name: ms * 1e3 for name, ms in graph_medians(calls).items()}
        print(f"\n{case_id} ({plan})")
        for name, value in us.items():
            print(f"  {name:<24} {value:>7.2f} us a call")


if __name__ == "__main__":
    main()
