"""Where an eager call's host time goes on the GPU machine: the floors under ``host_us``.

The default suite's ``host_us`` (eager host cost per call, ``bench.timing.host_cost``)
puts ours several times above torch's. This probe times, with the same loop,
the pieces any Triton operator pays, so the next change aims at the right one::

    python scripts/host_floor.py            # on the GPU machine; about a minute
    python scripts/host_floor.py --profile  # plus a cProfile of rms_norm fwd+bwd
    python scripts/host_floor.py --alloc    # allocation in a GEMM call (the scratch of TMA)

Rows (microseconds per call, median of the repeats):

* ``triton launch, 1 arg`` / ``..., 16 args``: a kernel that does nothing,
  launched through ``JITFunction`` with one pointer, and with as many arguments
  as the row kernels take (pointers, sizes, strides, constants): Triton's
  launcher alone.
* ``compiled kernel, 16 args``: the same kernel launched through the
  ``CompiledKernel`` its first launch returned, skipping ``JITFunction.run``
  (argument binding, specialisation, cache lookup): what a launch costs
  once the Python dispatch of Triton is taken out, the floor of any fast
  path of our own.
* ``torch.empty`` / ``torch.empty_like``: one allocation from the caching
  allocator, by shape and by example (the launchers use both).
* ``autograd.Function fwd+bwd``: an identity Function whose forward and
  backward do nothing but return, driven as the harness drives a fwd+bwd case
  (``torch.autograd.backward`` with an upstream gradient): the autograd
  engine's own cost, the hand-off to its device thread included.
* ``torch.softmax`` / ``kp.softmax`` and ``F.rms_norm`` / ``kp.rms_norm`` at
  512x4096 float16, forward and forward+backward: what the suite records;
  for RMSNorm also the forward while autograd records (an input requiring
  grad) and the backward alone (``torch.autograd.backward`` again and again
  on one retained graph), which split a forward+backward into its halves,
  and the backward node called directly from Python (``y.grad_fn(dy)``):
  the backward's own work in the calling thread, without the autograd
  engine or its device thread.
* ``torch.mm`` / ``kp.matmul`` on square bfloat16 matrices (:data:`GEMM_SIZES`),
  forward, forward+backward and the backward node called directly: at the
  small size the host's cost, at the large one whether a loop of calls keeps
  the GPU busy (its time per call is then the GPU's).

Prints a table; nothing is saved (run it with output to a log under
``results/<gpu>/checks/`` to keep it). ``--profile`` profiles the forward and
the directly called backward node: in a real backward the node runs in
autograd's device thread, which a profile of the calling thread does not see;
``torch.profiler`` then records the forward+backward calls in every thread.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import kernel_portfolio as kp
from kernel_portfolio.bench import timing

SHAPE = (512, 4096)
#: Square bfloat16 GEMM sizes: one whose calls are host-bound, one whose calls are not.
GEMM_SIZES = (512, 4096)


@triton.jit
def _noop_1(x_ptr):
    pass


@triton.jit
def _noop_16(
    a_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    n_rows,
    n_cols,
    s0,
    s1,
    s2,
    s3,
    eps,
    k,
    A: tl.constexpr,
    B: tl.constexpr,
    C: tl.constexpr,
    D: tl.constexpr,
):
    pass


class _Identity(torch.autograd.Function):
    """Returns its input unchanged: the autograd machinery with no work inside."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def _fwd_bwd(fn, leaves, upstream):
    """A fwd+bwd call as the harness makes it (gradients dropped first)."""

    def call():
        for t in leaves:
            t.grad = None
        torch.autograd.backward(fn(), upstream)

    return call


def _bwd_alone(out, leaves, upstream):
    """The backward of one recorded forward, run again on each call (graph retained)."""

    def call():
        for t in leaves:
            t.grad = None
        torch.autograd.backward(out, upstream, retain_graph=True)

    return call


def _node(out):
    """``out``'s backward node as a call on one gradient (``None`` for the node's other outputs).

    A C++ node is called; a Python one (an autograd Function) runs its
    ``backward`` with the node as its context, which keeps the saved tensors
    for the next call (applying the node would free them). A fused forward
    with a second output (torch's RMSNorm returns its ``rstd`` too) takes a
    gradient for each output. Gradient recording is off, as autograd runs a
    backward: with it on, a backward that calls an operator would record that
    call too.
    """
    node = out.grad_fn
    extra = (None,) * (len(node._input_metadata) - 1)
    run = partial(node._forward_cls.backward, node) if hasattr(node, "_forward_cls") else node

    def call(grad, out=out):  # holding ``out`` keeps its graph alive
        with torch.no_grad():
            return run(grad, *extra)

    return call


def rows() -> list[tuple[str, object]]:
    """``(name, call)`` for every row of the table."""
    x = torch.randn(SHAPE, device="cuda", dtype=torch.float16)
    xg = x.clone().requires_grad_()
    w = torch.randn(SHAPE[1], device="cuda", dtype=torch.float16, requires_grad=True)
    dy = torch.randn_like(x)
    args16 = (x, x, x, x, 512, 4096, 4096, 1, 4096, 1, 1e-6, 7, 1, 2, 3, 4)
    compiled = _noop_16[(1,)](*args16)  # a launch returns its CompiledKernel
    out = [
        ("triton launch, 1 arg", lambda: _noop_1[(1,)](x)),
        ("triton launch, 16 args", lambda: _noop_16[(1,)](*args16)),
        ("compiled kernel, 16 args", lambda: compiled[(1, 1, 1)](*args16)),
        ("torch.empty", lambda: torch.empty(SHAPE, device="cuda", dtype=torch.float16)),
        ("torch.empty_like", lambda: torch.empty_like(x, memory_format=torch.contiguous_format)),
        ("autograd.Function fwd+bwd", _fwd_bwd(lambda: _Identity.apply(xg), [xg], [dy])),
        ("torch.softmax fwd", lambda: torch.softmax(x, -1)),
        ("kp.softmax fwd", lambda: kp.softmax(x)),
        ("torch.softmax fwd+bwd", _fwd_bwd(lambda: torch.softmax(xg, -1), [xg], [dy])),
        ("kp.softmax fwd+bwd", _fwd_bwd(lambda: kp.softmax(xg), [xg], [dy])),
        ("F.rms_norm fwd", lambda: F.rms_norm(x, (SHAPE[1],), w.detach())),
        ("kp.rms_norm fwd", lambda: kp.rms_norm(x, w.detach())),
        (
            "F.rms_norm fwd+bwd",
            _fwd_bwd(lambda: F.rms_norm(xg, (SHAPE[1],), w), [xg, w], [dy]),
        ),
        ("kp.rms_norm fwd+bwd", _fwd_bwd(lambda: kp.rms_norm(xg, w), [xg, w], [dy])),
        ("F.rms_norm fwd, recording", lambda: F.rms_norm(xg, (SHAPE[1],), w)),
        ("kp.rms_norm fwd, recording", lambda: kp.rms_norm(xg, w)),
        ("F.rms_norm bwd alone", _bwd_alone(F.rms_norm(xg, (SHAPE[1],), w), [xg, w], dy)),
        ("kp.rms_norm bwd alone", _bwd_alone(kp.rms_norm(xg, w), [xg, w], dy)),
        ("F.rms_norm grad_fn called", partial(_node(F.rms_norm(xg, (SHAPE[1],), w)), dy)),
        ("kp.rms_norm grad_fn called", partial(_node(kp.rms_norm(xg, w)), dy)),
    ]
    for n in GEMM_SIZES:  # host-bound at the first size, GPU-bound at the second
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn_like(a, requires_grad=True)
        dc = torch.randn_like(a)
        ad, bd = a.detach(), b.detach()
        out += [
            (f"torch.mm fwd {n}^3", lambda ad=ad, bd=bd: torch.mm(ad, bd)),
            (f"kp.matmul fwd {n}^3", lambda ad=ad, bd=bd: kp.matmul(ad, bd)),
            (f"torch.mm fwd+bwd {n}^3", _fwd_bwd(partial(torch.mm, a, b), [a, b], [dc])),
            (f"kp.matmul fwd+bwd {n}^3", _fwd_bwd(partial(kp.matmul, a, b), [a, b], [dc])),
            (f"kp.matmul grad_fn called {n}^3", partial(_node(kp.matmul(a, b)), dc)),
        ]
    return out


def allocation_rows() -> list[tuple[str, object]]:
    """``--alloc``: allocation in a GEMM call, Triton's scratch from the allocator or a cache.

    The Hopper GEMM's launcher asks ``triton.set_allocator``'s function for
    scratch memory on every launch (``ops.matmul._tma_scratch``: a new
    ``torch.empty``). The last row hands out one cached buffer instead.
    """
    from kernel_portfolio.ops import matmul

    a, b = (torch.randn(512, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sizes = []
    fresh = matmul._tma_scratch

    def recording(size, alignment, stream):
        sizes.append(size)
        return fresh(size, alignment, stream)

    matmul._tma_scratch = recording
    kp.matmul(a, b)
    matmul._tma_scratch = fresh
    size = max(sizes)
    cache = fresh(size, 128, None)

    def with_cached_scratch():
        matmul._tma_scratch = lambda size, alignment, stream: cache[:size]
        try:
            kp.matmul(a, b)
        finally:
            matmul._tma_scratch = fresh

    print(f"TMA scratch asked per launch: {sorted(set(sizes))} bytes")
    return [
        ("torch.empty 512x512 bf16", lambda: torch.empty(512, 512, device="cuda", dtype=a.dtype)),
        (f"torch.empty {size} B int8", lambda: fresh(size, 128, None)),
        ("kp.matmul fwd 512^3", lambda: kp.matmul(a, b)),
        ("kp.matmul fwd 512^3, cached scratch", with_cached_scratch),
    ]


def _cprofile(table: list[tuple[str, object]], name: str, lines: int) -> None:
    """Print the ``lines`` costliest functions of 2000 calls of row ``name`` (if it ran)."""
    call = dict(table).get(name)
    if call is None:
        return
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [call() for _ in range(2000)])
    torch.cuda.synchronize()
    print(f"\n== cProfile: {name}, 2000 calls")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile kp.rms_norm's forward and backward node, and kp.matmul's backward node",
    )
    parser.add_argument(
        "--alloc",
        action="store_true",
        help="only the allocation rows: the GEMM's scratch from the allocator or a cache",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_floor: needs a CUDA device", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    backend = torch.cuda.get_allocator_backend()
    print(
        f"allocator {backend}, PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}"
    )
    print(f"{'row':<34} {'us per call':>12}")
    table = []
    for name, call in allocation_rows() if args.alloc else rows():  # warm every row first
        try:
            call()
        except Exception as error:  # noqa: BLE001 - one broken row must not lose the others
            print(f"{name:<34} failed: {type(error).__name__}: {error}")
            continue
        table.append((name, call))
    torch.cuda.synchronize()
    for name, call in table:
        print(f"{name:<34} {statistics.median(timing.host_cost(call)):12.1f}", flush=True)
    if args.alloc:
        for name in ("kp.matmul fwd 512^3", "kp.matmul fwd 512^3, cached scratch"):
            _cprofile(table, name, 8)
    if args.profile:  # both in this thread: the forward, and the backward node called directly
        for name in (
            "kp.rms_norm fwd",
            "kp.rms_norm grad_fn called",
            f"kp.matmul grad_fn called {GEMM_SIZES[0]}^3",
        ):
            _cprofile(table, name, 25)
        for name in ("kp.rms_norm fwd+bwd", f"kp.matmul fwd+bwd {GEMM_SIZES[0]}^3"):
            call = dict(table).get(name)  # both threads: what autograd's device thread does too
            if call is None:
                continue
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(200):
                    call()
                torch.cuda.synchronize()
            print(f"\n== torch.profiler (CPU, all threads): {name}, 200 calls")
            print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
    return 0


if __name__ == "__main__":
    sys.exit(main())
