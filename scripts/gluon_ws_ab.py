"""A/B of a warp-specialised GEMM written in Gluon against the GEMM plan and cuBLAS.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/gluon_ws_ab.py > results/<gpu>/checks/gluon-ws-ab-<UTC stamp>.log
    python scripts/gluon_ws_ab.py --compile   # no GPU: compile each variant for sm_90a

The Hopper kernel (``matmul._matmul_tma_kernel``) runs its ``K`` loop in
every warp: each step waits for its tiles, issues the wgmma, waits for the
previous one, and before the copy engine may refill a stage every warp of
the program meets at a barrier (the profile at
``results/h100-80gb-hbm3/checks/wide-ncu-20261206T1012Z.log`` put 35-45% of
the 128-row tiles' cycles there). Triton 3.6's own ``warp_specialize``
gave slower tiles, and none with two accumulators
(``checks/wide-ws-ab-20261206T1040Z.log``). This kernel, in Gluon (Triton's
explicit layer), is warp-specialised by hand: one warp issues the copies
into a ring of stages, each consumer warpgroup (four warps) runs the wgmma
of its rows and hands each stage back on an mbarrier once its wgmma is done,
with no barrier between the warps, and stores its output through shared
memory while the loader already fills the stages of its next tile. With one
consumer a warpgroup holds the whole ``BLOCK_M x BLOCK_N`` accumulator (128
rows, at most 192 columns in registers); with two, each holds half the rows.

It times, at the models layer shapes from 256 rows up and two cubes
(bfloat16, ``B`` row-major), the shipped plan, cuBLAS and each variant, each
call with a cold L2 behind a device spin, visited in alternating order (six
visits of twenty samples); a speed is the median over visits of each visit's
ratio against cuBLAS (paired). Every output, poisoned with NaN first, is
checked against cuBLAS's. A variant that fails to compile or to agree is
reported and left out.

The first run, at 10defff (``checks/gluon-ws-ab-20261206T1206Z.log``),
timed six variants: the 128x128 tile of one consumer with six stages ran
from 0.95 to 1.20 of cuBLAS from 256 rows up where the plan ran 0.83 to
0.94, while with four stages it ran as the plan's 128x128 tile (four stages
too). This run adds the Triton kernel's tiles (``TRITON_TILES``) at the
stage counts of the Gluon variants, to tell the stages from the warp roles.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

#: ``(block_m, block_n, block_k, stages, consumers)``.
VARIANTS = (
    (128, 128, 64, 5, 1),
    (128, 128, 64, 6, 1),
    (128, 128, 64, 6, 2),
    (128, 256, 64, 3, 2),
)
#: Tiles of the Triton kernel (``matmul.TmaTile`` arguments), forced, unsplit: the same
#: 128x128 tile with the stages of the variants above, which fit its shared memory too.
TRITON_TILES = (
    (128, 128, 64, 4, 5),
    (128, 128, 64, 4, 6),
    (128, 128, 64, 8, 6),
    (128, 256, 64, 8, 3),
)
ROWS = (256, 384, 512, 768, 1024, 2048)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
CUBES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 512))
GROUP_M = gl.constexpr(8)
LOADER_REGS = gl.constexpr(40)


def _label(v) -> str:
    bm, bn, bk, stages, consumers = v
    return f"gluon {bm}x{bn}x{bk} s{stages} c{consumers}"


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n):
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % size_m
    pid_n = (tile % per_group) // size_m
    return pid_m, pid_n


@gluon.jit
def _loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, NUM_SMS: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        for ki in range(k_tiles):
            s = count % STAGES
            # A fresh mbarrier counts as having completed the phase before 0.
            mbarrier.wait(empty.index(s), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(
                a_desc, [pid_m * BLOCK_M, ki * BLOCK_K], bar, a_bufs.index(s)
            )
            tma.async_copy_global_to_shared(
                b_desc, [ki * BLOCK_K, pid_n * BLOCK_N], bar, b_bufs.index(s)
            )
            count += 1


@gluon.jit
def _consumer(
    a_bufs,
    b_bufs,
    ready,
    empty,
    c_desc,
    c_smem,
    M,
    N,
    K,
    PART: gl.constexpr,
    NUM_SMS: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
):
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        acc = gl.zeros((SUB_M, BLOCK_N), dtype=gl.float32, layout=layout)
        for ki in range(k_tiles):
            s = count % STAGES
            mbarrier.wait(ready.index(s), (count // STAGES) & 1)
            a = a_bufs.index(s).slice(PART * SUB_M, SUB_M, dim=0)
            acc = warpgroup_mma(a, b_bufs.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])
            # The wgmma of the step before is done: its stage may be refilled.
            mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES), pred=ki > 0)
            count += 1
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES))
        tma.store_wait(0)  # the previous tile's store has left c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(
            c_desc, [pid_m * BLOCK_M + PART * SUB_M, pid_n * BLOCK_N], c_smem
        )
    tma.store_wait(0)


@gluon.jit
def _gluon_ws_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    NUM_SMS: gl.constexpr,
    STAGES: gl.constexpr,
    CONSUMERS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    c0 = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    if CONSUMERS == 1:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        ready,
                        empty,
                        c_desc,
                        c0,
                        M,
                        N,
                        K,
                        0,
                        NUM_SMS,
                        BLOCK_M,
                        BLOCK_N,
                        BLOCK_K,
                    ),
                ),
                (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, NUM_SMS)),
            ],
            [1],
            [LOADER_REGS],
        )
    else:
        c1 = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        ready,
                        empty,
                        c_desc,
                        c0,
                        M,
                        N,
                        K,
                        0,
                        NUM_SMS,
                        BLOCK_M,
                        BLOCK_N,
                        BLOCK_K,
                    ),
                ),
                (_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, NUM_SMS)),
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        ready,
                        empty,
                        c_desc,
                        c1,
                        M,
                        N,
                        K,
                        1,
                        NUM_SMS,
                        BLOCK_M,
                        BLOCK_N,
                        BLOCK_K,
                    ),
                ),
            ],
            [1, 4],
            [LOADER_REGS, 232],
        )


def _descriptors(a, b, c, v):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bm, bn, bk, _, consumers = v
    gdt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}[a.dtype]
    lay = gl.NVMMASharedLayout.get_default_for
    sub_m = bm // consumers
    return (
        TensorDescriptor.from_tensor(a, [bm, bk], lay([bm, bk], gdt)),
        TensorDescriptor.from_tensor(b, [bk, bn], lay([bk, bn], gdt)),
        TensorDescriptor.from_tensor(c, [sub_m, bn], lay([sub_m, bn], gdt)),
    )


def launch(a, b, c, v, num_sms):
    bm, bn, _, stages, consumers = v
    m, k = a.shape
    n = b.shape[1]
    descs = _descriptors(a, b, c, v)
    grid = (min(num_sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    return _gluon_ws_kernel[grid](*descs, m, n, k, num_sms, stages, consumers, num_warps=4)


def compile_only() -> None:
    """Compile every variant for sm_90a on the CPU and print ptxas's registers and spills."""
    import re
    import subprocess
    import tempfile

    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernel_portfolio.arch import ptxas_for

    fn = _gluon_ws_kernel
    for v in VARIANTS:
        a = torch.empty(4096, 4096, dtype=torch.bfloat16)
        descs = _descriptors(a, a, a, v)
        sig = {
            name: native_specialize_impl(BaseBackend, d, False, True, True)[0]
            for name, d in zip(("a_desc", "b_desc", "c_desc"), descs, strict=True)
        }
        sig.update(M="i32", N="i32", K="i32", NUM_SMS="constexpr", STAGES="constexpr")
        sig["CONSUMERS"] = "constexpr"
        consts = {"NUM_SMS": 132, "STAGES": v[3], "CONSUMERS": v[4]}
        try:
            compiled = triton.compile(
                GluonASTSource(fn, sig, consts),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": 4},
            )
        except Exception as exc:
            print(f"{_label(v)}: {type(exc).__name__}: {str(exc)[:2000]}")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.ptx", "w") as fh:
                fh.write(compiled.asm["ptx"])
            cmd = [
                str(ptxas_for(90)),
                "-v",
                "--gpu-name",
                "sm_90a",
                f"{tmp}/k.ptx",
                "-o",
                f"{tmp}/k.o",
            ]
            out = subprocess.run(cmd, capture_output=True, text=True).stderr
        regs = re.findall(r"Used (\d+) registers", out)
        spills = re.findall(r"(\d+) bytes spill stores", out)
        bars = compiled.asm["ptx"].count("bar.sync")
        print(
            f"{_label(v)}: shared {compiled.metadata.shared}, registers {regs}, spills {spills}, "
            f"bar.sync {bars}, C7515 {'C7515' in out}"
        )


def main() -> None:
    sys.path.insert(0, "scripts")
    from copy_floor import SAMPLES, VISITS, setup

    from kernel_portfolio.bench import timing
    from kernel_portfolio.ops import matmul as mm

    flush, _ = setup()
    sms = mm._sm_count(0)
    shapes = [(m, n, k) for m in ROWS for n, k in LAYERS] + list(CUBES)
    broken = {}
    print("bfloat16 forward, B row-major; speed against cuBLAS (paired median); <- the fastest")
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
        plan = mm._tma_plan(m, n, k, sms)
        label = f"plan {plan.tile.name} s{plan.split_k}"
        outs = {label: torch.empty_like(ref)}
        calls[label] = lambda a=a, b=b, out=outs[label], plan=plan: mm._launch_matmul(
            a, b, out, allow_tf32=False, path="tma", plan=plan
        )
        for t in TRITON_TILES:
            forced = mm.TmaPlan(mm.TmaTile(*t))
            label = f"triton {forced.tile.name}"
            outs[label] = torch.empty_like(ref)
            calls[label] = lambda a=a, b=b, out=outs[label], plan=forced: mm._launch_matmul(
                a, b, out, allow_tf32=False, path="tma", plan=plan
            )
        for v in VARIANTS:
            if _label(v) in broken:
                continue
            outs[_label(v)] = out = torch.empty_like(ref)
            calls[_label(v)] = lambda a=a, b=b, out=out, v=v: launch(a, b, out, v, sms)
        calls["cublas"]()
        for label, out in list(outs.items()):
            out.fill_(float("nan"))
            try:
                calls[label]()
                torch.cuda.synchronize()
            except Exception as exc:
                broken[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                print(f"  {label}: {broken[label]}")
                calls.pop(label)
                outs.pop(label)
                continue
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            if not err < 1e-2:
                broken[label] = f"relative error {err:.3g} at {m}x{n}x{k}"
                print(f"  {label}: {broken[label]}")
                calls.pop(label)
                outs.pop(label)
        lead = timing.lead_for(calls["cublas"])
        names = list(calls)
        visits = {x: [] for x in names}
        for visit in range(VISITS):
            for x in names if visit % 2 == 0 else names[::-1]:
                t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                visits[x].append(statistics.median(t))
        speed = {
            x: statistics.median(c / o for c, o in zip(visits["cublas"], visits[x], strict=True))
            for x in names
        }
        best = max(names[1:], key=speed.get)
        print(f"{m}x{n}x{k}  cuBLAS {statistics.median(visits['cublas']) * 1e3:.1f} us")
        for x in names[1:]:
            mark = "  <-" if x == best else ""
            us = statistics.median(visits[x]) * 1e3
            print(f"    {x:<32} {us:9.1f} us  {speed[x]:.3f}{mark}", flush=True)
        del a, b, ref, outs, calls
        torch.cuda.empty_cache()
    for label, why in broken.items():
        print(f"left out: {label}: {why}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="compile for sm_90a on the CPU only")
    if parser.parse_args().compile:
        compile_only()
    else:
        main()
