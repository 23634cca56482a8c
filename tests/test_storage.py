"""Room for a long run: tokmon's memory, the recording's size and the disk left, measured
by the real host probe, folded by a reducer whose memory stays bounded, shown in the
header and warned of once before the disk fills."""

import json
import os
import shutil

from helpers import tokmon

from tokmon.model.data.facts import Sample, Tick
from tokmon.model.data.samples import HostSample
from tokmon.model.folding.fold import Fold, FoldSettings
from tokmon.model.folding.snapshot import Snapshot
from tokmon.model.judge.storage import GROWTH_WINDOW_NS, StorageReducer, human_bytes
from tokmon.probes.host import HostProbe
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig
from tokmon.ui.header import header_text

S = 1_000_000_000


def filling(seconds: int, rate: int, free0: int, step: int = 1):
    """Host samples of a recording growing `rate` bytes a second on a disk with `free0`
    bytes free at the start (the recording takes what it writes from the disk)."""
    for t in range(0, seconds + 1, step):
        yield t * S, {"self_rss_mib": 60 + t / 3600, "record_bytes": rate * t,
                      "disk_free_bytes": free0 - rate * t}  # fmt: skip


def test_the_disk_warning_comes_once_when_the_disk_fills_within_two_hours():
    """250 kB/s on 4 GB free: the disk fills at 16,000 s; the warning is due when fewer
    than 2 h (7,200 s) are left, at 8,800 s (within the ten-minute growth window's start,
    when the growth is first read), and said once in three hours of samples."""
    r = StorageReducer()
    said = []
    for t, v in filling(3 * 3600, 250_000, 4_000_000_000):
        r.sample(t, HostSample.of(v))
        said += [(t, text) for text, _ in r.take_warnings()]
    assert len(said) == 1, said
    t, text = said[0]
    assert 8_799 * S <= t <= 8_801 * S, t
    assert text.startswith("disk: 1.8 GB left beside the recording, full in about 2.0 h")
    assert text.endswith("at 250 kB/s"), text
    v = r.view()
    assert v.growth_bytes_per_s is not None and abs(v.growth_bytes_per_s - 250_000) < 1
    assert v.hours_left is not None and abs(v.hours_left - (16_000 - 10_800) / 3600) < 1e-6
    assert v.warning and v.rss_max_mib == v.rss_mib == 63.0
    # memory does not grow with the run: ten minutes of sizes at one a second
    assert len(r.sizes) <= GROWTH_WINDOW_NS // S + 1


def test_no_warning_with_room_and_a_new_file_starts_the_growth_anew():
    r = StorageReducer()
    for t, v in filling(3600, 1_000, 500_000_000_000):
        r.sample(t, HostSample.of(v))
    assert r.take_warnings() == [] and r.view().warning == ""
    r.sample(3601 * S, HostSample.of({"record_bytes": 10, "disk_free_bytes": 500_000_000_000}))
    assert list(r.sizes) == [(3601 * S, 10)] and r.growth() is None
    # figures a probe cannot mean are ignored, never shown
    r.sample(
        3602 * S, HostSample.of({"record_bytes": -5, "disk_free_bytes": "lots", "self_rss_mib": -1})
    )
    assert r.size == 10 and r.free == 500_000_000_000 and r.rss == 61.0


def test_the_fold_says_it_as_an_event_and_the_header_shows_it_whole():
    """Live (derive): one `disk` event; the snapshot carries the figures; the header at
    80 columns keeps the warning whole where the probes' own figures give way."""
    fold = Fold(FoldSettings(arms=("a",)), derive=True)
    events = []
    for t, v in filling(9000, 250_000, 4_000_000_000, step=10):
        fold.apply(Sample(t, "host", v))
        events += [e for e in fold.apply(Tick(t)) if e.kind == "disk"]
    assert len(events) == 1 and events[0].message.startswith("disk: ")
    snap = fold.snapshot
    assert isinstance(snap, Snapshot) and snap.storage.warning
    head = header_text(snap, 80).plain.split("\n")[1]
    assert head.endswith(" · DISK FULL IN 1.9 h"), head  # short, whole, never dropped
    head = header_text(snap, 200).plain.split("\n")[1]
    assert snap.storage.warning in head and not head.endswith("…"), head
    summary = fold.summary(9000 * S)
    st = summary["storage"]
    assert st["record_bytes"] == 250_000 * 9000 and st["record_growth_bytes_per_s"] == 250_000
    assert st["rss_mib_max"] == 62.5


def test_the_host_probe_measures_the_recording_and_its_disk(tmp_path):
    rec = tmp_path / "r.jsonl"
    probe = HostProbe(record=str(rec))
    v = probe.sample()
    assert "record_bytes" not in v  # not written yet
    rec.write_bytes(b"x" * 12_345)
    v = probe.sample()
    assert v["record_bytes"] == 12_345
    free = shutil.disk_usage(tmp_path).free
    assert abs(v["disk_free_bytes"] - free) < 64 * 2**20, (v["disk_free_bytes"], free)
    assert v["self_rss_mib"] > 10  # this Python process, at least
    assert human_bytes(12_345) == "12.3 kB" and human_bytes(4e9) == "4.0 GB"


def test_a_recorded_run_says_what_it_held_and_wrote(tmp_path):
    out, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    with SimProcess(SimConfig(schedule=(5.0, 1.0, 8), seed=1)) as s:
        r = tokmon("run", "--url", s.url, "--headless", "--requests", "60", "-c", "4",
                   "--max-tokens", "8", "--warmup", "0", "--no-gpu", "--summary-json",
                   str(out), "--record", str(rec))  # fmt: skip
    assert r.returncode == 0, r.stderr
    st = json.loads(out.read_text())["storage"]
    assert st["rss_mib_max"] > 10
    # sampled while it ran: no more than the file holds at the end
    assert st["record_bytes"] is None or 0 <= st["record_bytes"] <= os.path.getsize(rec)
    assert st["disk_free_bytes"] > 0
    assert f"tokmon held at most {st['rss_mib_max']:.0f} MiB" in r.stdout


def test_tokmons_own_figures_leave_out_a_server_it_started(tmp_path):
    """A child in a session of its own (how a serve= arm and the demo's simulators run)
    is the server under test: not in tokmon's CPU and memory; a child in tokmon's own
    session (an engine worker) is."""
    import subprocess
    import sys

    code = "import time; b = bytearray(200 << 20); time.sleep(30)"
    own = subprocess.Popen([sys.executable, "-c", code])
    server = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    sim = SimProcess(SimConfig(schedule=(5.0, 1.0, 8), seed=1))
    sim.start()
    try:
        probe = HostProbe()
        probe.sample()  # the first sample only notes the processes (CPU % needs two)
        v = probe.sample()
        pids = {int(k.rsplit(":", 1)[1]) for k in v["self_procs"]}
        assert own.pid in pids and server.pid not in pids and sim.proc.pid not in pids, v
    finally:
        sim.stop()
        for p in (own, server):
            p.kill()
            p.wait(5)
