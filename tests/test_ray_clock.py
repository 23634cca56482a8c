"""The parent's view of a Ray worker's batches: its times moved onto the parent's axis
by the worker's clock offset, its durations untouched; a lost worker's requests in
flight ended as cancelled (no Ray needed)."""

from dataclasses import replace

from tokmon.model.data.records import EngineBatch, EngineStatus, Event, RequestRecord
from tokmon.sources.ray_workers import lost_records, shift_batch


def test_a_workers_batch_moves_by_its_offset_and_keeps_its_durations():
    r = RequestRecord(rid=3, arm="a", outcome="ok", t_sched=5_000, t_end=9_000, t_send=5_100,
                      ttft_ms=1.5, e2e_ms=4.0)  # fmt: skip
    st = EngineStatus(t=9_500, in_flight=1, sent=4, paused=False, arm="a", level=2.0,
                      mode="concurrency", loop_lag_ms=0.0, send_lag_ms=0.1)  # fmt: skip
    b = EngineBatch(0, [r], {(8_000, "a"): 7}, [Event(t=6_000, kind="engine", message="x")], st)
    s = shift_batch(b, 1_000)
    (q,) = s.records
    assert (q.t_sched, q.t_send, q.t_end) == (4_000, 4_100, 8_000)
    assert (q.ttft_ms, q.e2e_ms) == (1.5, 4.0)
    assert s.ticks == {(7_000, "a"): 7} and s.events[0].t == 5_000 and s.status.t == 8_500
    assert shift_batch(b, 0) is b


def test_a_lost_workers_requests_in_flight_end_as_cancelled():
    got = lost_records({7: ("a", 2_000, "code", 1), 5: ("b", 1_000, "chat", 0)}, 500, 1, 10_000)
    assert [(r.rid, r.arm, r.outcome, r.error, r.t_sched, r.t_end, r.kind, r.segment, r.worker)
            for r in got] == [(5, "b", "cancelled", "worker lost", 500, 10_000, "chat", 0, 1),
                              (7, "a", "cancelled", "worker lost", 1_500, 10_000, "code", 1, 1)]  # fmt: skip


def test_each_load_generator_shows_its_host_streams_lag_and_cpu():
    """Two engine processes: the dashboard's comparison panel gives one line per worker —
    its host, streams in flight, send lag and CPU — from the statuses the engines send."""
    import socket

    from rich.text import Text

    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.model.workloads.workload import LengthDist
    from tokmon.sim.process import SimProcess
    from tokmon.sim.server import SimConfig
    from tokmon.sources.live import LiveSession
    from tokmon.ui.app import DashboardApp
    from tokmon.ui.panels import fit_blocks, worker_line

    with SimProcess(SimConfig(schedule=(20.0, 5.0, 1), seed=3)) as sim:
        # (short answers: the test is of the workers' status lines, not of a long run)
        cfg = RunConfig(arms=(Arm("a", url=sim.url, model="sim-27b"),), concurrency=4,
                        requests=40, workers=2,
                        max_tokens=LengthDist("fixed", 32))  # fmt: skip
        s = LiveSession(cfg, target=sim.url, model="sim-27b")
        s.start()
        assert s.wait(60)
        snap = s.snapshot()
        s.close()
    assert [w.worker for w in snap.workers] == [0, 1]
    assert all(w.host == socket.gethostname() and w.cpu_pct >= 0 for w in snap.workers)
    shown = fit_blocks(DashboardApp(s)._compare_blocks(snap), 100).plain
    assert f"worker 0 {socket.gethostname()[:16]} · 0 in flight · lag " in shown
    assert "worker 1 " in shown and "CPU " in shown
    # a load generator at its limit is loud
    hot = worker_line(replace(snap.workers[0], send_lag_ms=80.0, cpu_pct=97.0))
    assert isinstance(hot, Text)
    assert {hot.plain[sp.start : sp.end] for sp in hot.spans if "reverse" in str(sp.style)} == {
        "lag 80.0 ms",
        "CPU 97%",
    }
