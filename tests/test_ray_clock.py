"""The parent's view of a Ray worker's batches: its times moved onto the parent's axis
by the worker's clock offset, its durations untouched; a lost worker's requests in
flight ended as cancelled (no Ray needed)."""

from tokmon.model.records import EngineBatch, EngineStatus, Event, RequestRecord
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
