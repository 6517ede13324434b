"""The harness end to end on a GPU: every timer and cache mode on the small ``smoke`` suite."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from kernel_portfolio.bench import timing
from kernel_portfolio.bench.suites import SUITES
from kernel_portfolio.cli import main
from kernel_portfolio.results import load

pytestmark = pytest.mark.gpu

SMOKE = SUITES["smoke"]


def test_timers_measure_positive_times():
    x = torch.randn(4096, 4096, device="cuda")
    flush = timing.L2Flusher(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None))
    cold = timing.time_events(lambda: x * 2, 5, flush=flush)
    warm = timing.time_events(lambda: x * 2, 5)
    graph = timing.capture_graph(lambda: x * 2, 4)
    replay = timing.time_graph(graph, 5, 4)
    assert all(t > 0 for t in cold + warm + replay)
    small = torch.randn(64, device="cuda")
    host = timing.host_cost(lambda: small * 2, loop_ms=5.0, repeats=2)
    assert len(host) == 2 and all(0 < us < 1e4 for us in host)
    assert timing.peak_memory(lambda: x * 2) >= x.numel() * 4
    nbytes, copy = timing.copy_bandwidth(3, nbytes=256 << 20)
    assert nbytes == 512 << 20 and min(copy) > 0


def test_a_lead_keeps_the_hosts_pace_out_of_event_times():
    x = torch.randn(1 << 20, device="cuda")

    def slow_host():  # 3 ms of host work in front of a few microseconds of device work
        time.sleep(3e-3)
        x.mul_(1.0)

    paced = timing.time_events(slow_host, 5)
    led = timing.time_events(slow_host, 5, lead_ms=timing.lead_for(slow_host))
    # Without a lead the events time the host. The median: beside other test
    # workers on the GPU a start event can run late, and one sample then
    # times less of the sleep (2.44 ms of 3 in checks/gpu-tests-20261206T1940Z.log).
    assert statistics.median(paced) > 2.5, paced
    assert max(led) < 0.5, led
    with pytest.raises(ValueError, match="lead_ms"):
        timing.time_events(slow_host, 1, lead_ms=timing.MAX_LEAD_MS + 1)


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_smoke_suite_end_to_end(tmp_path, cache):
    assert main(["bench", "--suite", "smoke", "--cache", cache, "--out", str(tmp_path)]) == 0
    res = load(tmp_path / "smoke.json")
    log = (tmp_path / "smoke.log").read_text()
    assert "copy bandwidth" in log and "[3/3]" in log
    data = res.data
    assert data["timing"]["cache"] == cache and data["copy_bandwidth"]["gbps"] > 100
    assert data["gpu_state"]["before"]["utilization_pct"] is not None
    assert {c["timer"] for c in data["cases"]} == {"events", "cuda_graph"}
    for case in data["cases"]:
        expected = "warm" if case["timer"] == "cuda_graph" else cache
        assert case["cache"] == expected
        ours = case["impls"]["ours"]
        assert ours["status"] == "ok", (case["id"], ours["reason"])
        assert len(ours["samples_ms"]) == SMOKE.visits * SMOKE.samples
        assert ours["peak_mem_bytes"] > 0 and ours["gbps"] > 0
        for name, rec in case["impls"].items():
            assert rec["status"] in ("ok", "skipped"), (case["id"], name, rec["reason"])
            host = rec["metrics"].get("host_us") if rec["status"] == "ok" else None
            assert (host is not None) == (rec["status"] == "ok" and case["timer"] == "cuda_graph")
            assert host is None or (host["unit"] == "us" and host["value"] > 0)
            lead = rec["metrics"].get("lead_us") if rec["status"] == "ok" else None
            assert (lead is not None) == (rec["status"] == "ok" and case["timer"] == "events")
            assert lead is None or lead["value"] >= 50
            assert rec["status"] == "ok" or rec["reason"]
        baselines = {r["baseline"] for r in case["ratios"]}
        assert baselines == {
            n for n, r in case["impls"].items() if n != "ours" and r["status"] == "ok"
        }
    compiled = res.case("softmax/fwd/1024x4096/float16")["impls"]["compile"]
    assert compiled["status"] == "ok" and compiled["metrics"]["compile_ms"]["value"] > 0
    assert res.case("matmul/fwd/512x512x512/float16")["impls"]["ours"]["tflops"] > 0
