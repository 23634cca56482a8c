"""Markers, pauses, load changes, arm switches, restarts and alerts are in every report:
a section of text and md, an ``events`` list in the json, ``NAME-events.csv`` beside the
requests' csv."""

import csv
import json

from helpers import tokmon

from tokmon.model.data.facts import Tick
from tokmon.model.data.records import Event, RequestRecord
from tokmon.recording.writer import Recorder

EVENTS = [
    Event(2_000_000_000, "marker", "=cmd|' /C calc' before the change", {}),
    Event(3_000_000_000, "pause", "paused", {}),
    Event(4_000_000_000, "pause", "resumed", {}),
    Event(5_000_000_000, "level", "load → 8 streams", {"level": 8.0}),
    Event(6_000_000_000, "arm", "arm → spec", {"arm": "spec", "segment": 1}),
]


def _recording(path):
    w = Recorder(str(path))
    w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
    recs = [
        RequestRecord(rid=i, arm="plain" if i < 20 else "spec", outcome="ok",
                      t_sched=i * 300_000_000, t_end=i * 300_000_000 + 500_000_000,
                      ttft_ms=50.0, tpot_ms=20.0, decode_tps=50.0, e2e_ms=500.0,
                      output_tokens=10, segment=0 if i < 20 else 1)
        for i in range(40)
    ]  # fmt: skip
    for e in EVENTS[:4]:
        w.fact(e)
    w.records(recs[:20])
    w.fact(EVENTS[4])
    w.records(recs[20:])
    w.fact(Tick(12_000_000_000, final=True))
    w.end(12_000_000_000)
    w.close()


def test_every_report_lists_the_events(tmp_path):
    rec = tmp_path / "run.jsonl"
    _recording(rec)
    for fmt in ("text", "md"):
        p = tokmon("report", str(rec), "--format", fmt)
        assert p.returncode == 0, p.stderr
        part = p.stdout.split("Events (")[1].split("Change points")[0]
        for want in ("marker", "before the change", "paused", "resumed", "load → 8 streams",
                     "arm → spec"):  # fmt: skip
            assert want in part, (fmt, want, part)
    p = tokmon("report", str(rec), "--format", "json")
    events = json.loads(p.stdout)["events"]
    assert [e["kind"] for e in events] == ["marker", "pause", "pause", "level", "arm"]
    assert events[0]["t_s"] == 2.0 and events[3]["level"] == 8.0
    out = tmp_path / "run.csv"
    p = tokmon("report", str(rec), "--format", "csv", "-o", str(out))
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "run-events.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["kind"] for r in rows] == ["marker", "pause", "pause", "level", "arm"]
    # a marker's note is text from a person: never a formula in a spreadsheet
    assert rows[0]["message"].startswith("'=")
    assert rows[4]["arm"] == "spec"
    with open(out, newline="") as f:
        assert len(list(csv.DictReader(f))) == 40


def _two_arm_run(path, names, speed):
    w = Recorder(str(path))
    w.open({"settings": {"arms": [{"name": n} for n in names]}}, 0)
    recs = []
    for i in range(60):
        arm = names[i % len(names)]
        dec = speed[arm] * (1 + 0.01 * (i % 7))
        recs.append(
            RequestRecord(rid=i, arm=arm, outcome="ok", t_sched=i * 100_000_000,
                          t_end=i * 100_000_000 + 500_000_000, ttft_ms=50.0,
                          tpot_ms=1000 / dec, decode_tps=dec, e2e_ms=500.0,
                          output_tokens=10)
        )  # fmt: skip
    w.records(recs)
    w.end(7_000_000_000)
    w.close()


def test_compare_pairs_arms_of_other_names(tmp_path):
    """Runs whose arms have other names: one arm each pairs and says so; several are
    paired by --map, each ratio line naming both runs' arms; where nothing pairs, one
    line says why (it printed "not enough data" for 96 and 91 requests)."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _two_arm_run(a, ["base"], {"base": 40.0})
    _two_arm_run(b, ["fast"], {"fast": 80.0})
    p = tokmon("report", str(a), "--compare", str(b))
    assert p.returncode == 0, p.stderr
    assert "one arm each: A:base paired with B:fast" in p.stdout
    line = next(ln for ln in p.stdout.splitlines() if "decode_tokens_per_s" in ln and "×" in ln)
    assert "×2.0" in line, p.stdout
    assert "B:fast vs A:base" in p.stdout
    a2, b2 = tmp_path / "a2.jsonl", tmp_path / "b2.jsonl"
    _two_arm_run(a2, ["plain", "spec"], {"plain": 40.0, "spec": 100.0})
    _two_arm_run(b2, ["p", "s"], {"p": 44.0, "s": 120.0})
    p = tokmon("report", str(a2), "--compare", str(b2))
    assert p.returncode == 0, p.stderr
    assert "no arm pairs: A has plain, spec, B has p, s; name the pairs with --map A=B" in p.stdout
    p = tokmon("report", str(a2), "--compare", str(b2), "--map", "plain=p", "--map", "spec=s",
               "-F", "json")  # fmt: skip
    doc = json.loads(p.stdout)
    got = {(q["a_arm"], q["b_arm"]): q["comparison"]["decode_tokens_per_s"]["ratio"]
           for q in doc["pairs"]}  # fmt: skip
    assert abs(got[("plain", "p")] - 1.1) < 0.02 and abs(got[("spec", "s")] - 1.2) < 0.02
    p = tokmon("report", str(a2), "--compare", str(b2), "--map", "plain=q")
    assert p.returncode == 2 and "run B has no arm 'q' (it has p, s)" in p.stderr
    assert "Traceback" not in p.stderr
