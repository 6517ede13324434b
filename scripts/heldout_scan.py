"""The kernels at shapes no suite holds: widths, row counts and projections of other models.

The suites hold the shapes the kernels were tuned on, and the models suite the
classes (alignment, rows against SMs, ``M`` against tiles) at one model's
sizes. This runs the same harness (``kernel_portfolio.bench.runner``: the
float64 check, poisoned outputs, cold L2, interleaved visits, torch,
Liger-Kernel and cuBLAS in the same run) at shapes chosen apart from both:

* vocabulary widths of other tokenizers at 4096 rows, every remainder of a
  width over 8 among them, each unaligned one beside its aligned neighbour
  (softmax forward and forward+backward, float16; row sum forward);
* one unaligned vocabulary width at 1 to 8192 rows (softmax, float16);
* hidden sizes of other models at 1 to 8192 rows, and unaligned widths with
  their neighbours at 2048 rows (RMSNorm and the residual RMSNorm, forward and
  forward+backward, bfloat16);
* the projections of three other models for ``M`` from 1 to 6000 (GEMM
  forward, bfloat16, against cuBLAS).

``torch.compile`` runs at three cases only (it compiles for seconds a case).
Three to four minutes on an H100. Writes ``heldout.json`` and ``heldout.log``
into ``--out`` (a result of suite ``heldout``), then prints each speed target
the run misses (``kernel_portfolio.bench.targets``)::

    PYTHONPATH=src python3 scripts/heldout_scan.py --out <folder>

A run is filed off the site, as ``results/archive/<gpu>/heldout-<finished
UTC stamp>.json`` beside its log of the same name (the JSON's ``log`` field
renamed to match): ``kp results`` checks it against the sources of the commit
it records, and the README of ``results/<gpu>/`` says what it found.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernel_portfolio.bench import runner, suites, targets

#: Vocabulary widths (``vocab_size`` of each model's published configuration).
VOCAB = {
    28996: "BERT-base-cased",
    32001: "Vicuna-7B (Llama 2's and one pad token)",
    50277: "GPT-NeoX-20B's tokenizer",
    65024: "Falcon-7B",
    100277: "cl100k_base (GPT-4's tokenizer)",
    105879: "multilingual BERT (uncased)",
    119547: "multilingual BERT",
    151646: "Qwen1.5 tokenizer (without padding)",
    250002: "XLM-RoBERTa",
    256000: "Gemma",
}
#: Hidden sizes (``hidden_size``).
HIDDEN = {
    1152: "Gemma-3-1B",
    1536: "Qwen2.5-1.5B",
    2304: "Gemma-2-2B",
    2560: "Phi-2",
    3072: "Llama-3.2-3B, Phi-3-mini",
    3840: "Gemma-3-12B",
    7168: "DeepSeek-V3",
}
#: Tokens: a decode step, a few, a row over the 132 SMs twice, a prefill or two.
ROWS = (1, 77, 264, 2000, 8192)
#: Projections as ``(N, K)``: Qwen2.5-7B (hidden 3584, 28 query and 4 key-value
#: heads of 128, intermediate 18944), Phi-3-mini (3072, fused QKV 9216, fused
#: gate and up 16384, intermediate 8192), Llama-3-70B (8192, intermediate 28672).
GEMM_LAYERS = {
    (4608, 3584): "Qwen2.5-7B fused QKV",
    (18944, 3584): "Qwen2.5-7B MLP up",
    (3584, 18944): "Qwen2.5-7B MLP down",
    (9216, 3072): "Phi-3-mini fused QKV",
    (3072, 8192): "Phi-3-mini MLP down",
    (28672, 8192): "Llama-3-70B MLP up",
}
GEMM_ROWS = (1, 8, 24, 50, 100, 200, 300, 500, 700, 1000, 1280, 2000, 3000, 6000)
#: The few row shapes with torch.compile as a baseline, per operator.
COMPILED = {
    "softmax": [(4096, 100277)],
    "rms_norm": [(2000, 3072)],
    "residual_rms_norm": [(77, 2560)],
}


def _neighbours(widths) -> list[int]:
    """Each width, and each unaligned one's aligned neighbour (rounded down to 8)."""
    return sorted({*widths, *(n // 8 * 8 for n in widths if n % 8)})


def _rows(op: str, shapes, dtype: str, modes=suites.MODES) -> list[suites.Case]:
    """A row operator's grid as the models suite times it, compile at :data:`COMPILED`."""
    return suites._timed_grid(
        op, shapes, (dtype,), modes=modes, compile_shapes=COMPILED.get(op, ())
    )


def heldout_cases() -> list[suites.Case]:
    logits = [(4096, n) for n in _neighbours(VOCAB)]
    unaligned = (28996, 32001, 50277, 100277)
    norms = [(m, n) for n in HIDDEN for m in ROWS] + [(2048, n) for n in _neighbours(unaligned)]
    return [
        *_rows("softmax", logits, "float16"),
        *_rows("softmax", [(m, 100277) for m in ROWS], "float16"),
        *_rows("row_sum", logits, "float16", modes=("fwd",)),
        *_rows("rms_norm", norms, "bfloat16"),
        *_rows("residual_rms_norm", norms, "bfloat16"),
        *suites.grid(
            "matmul",
            [(m, n, k) for (n, k) in GEMM_LAYERS for m in GEMM_ROWS],
            ("bfloat16",),
            modes=("fwd",),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for heldout.json and .log")
    args = parser.parse_args()
    cases = heldout_cases()
    suite = suites.Suite(
        "heldout",
        "shapes no suite holds: other models' widths, row counts and projections",
        tuple(cases),
        notes="scripts/heldout_scan.py names the model behind each width and projection.",
    )
    path = runner.run_suite(
        suite, cases, command=" ".join(["heldout_scan.py", *sys.argv[1:]]), out_dir=args.out
    )
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        r for r in targets.evaluate(data) if r["target"] in (targets.EVERY_SHAPE, targets.ALIGNED)
    ]
    missed = [r for r in rows if not r["met"]]
    print(f"\nspeed targets at held-out shapes: {len(rows) - len(missed)} of {len(rows)} met")
    for r in missed:
        print(f"  missed {r['case']:<44} {r['target']:<34} {r['value']:.3f} (bar {r['threshold']})")


if __name__ == "__main__":
    main()
