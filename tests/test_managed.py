"""Servers tokmon starts itself (serve= arms): the arms take turns on one port as they
would on one GPU, restarts are events and idle time, a failure is an error with the
server's log, and no server outlives tokmon however it ends."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import tokmon

from tokmon.model.data.commands import StopRun
from tokmon.model.data.records import Pause
from tokmon.model.workloads.arms import Arm, ArmError, parse_arm
from tokmon.model.workloads.config import RunConfig
from tokmon.model.workloads.workload import LengthDist
from tokmon.recording.writer import Recorder
from tokmon.sim.model import PROFILES
from tokmon.sources.live import LiveSession

PY = sys.executable


def sim_cmd(marker: str, *extra: str) -> str:
    # the marker (a model name no other process has) finds the servers among processes
    return f"{PY} -m tokmon sim --port {{port}} --time-scale 4 --model-name {marker} " + " ".join(
        extra
    )


def alive(marker: str) -> list[str]:
    """The servers started with ``marker`` (tokmon's own command line holds it too, with
    ``{port}`` where a server's has a number)."""
    pattern = f"--port [0-9]+ .*{marker}"
    out = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True).stdout
    return [p for p in out.split() if p and int(p) != os.getpid()]


def gone(marker: str, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(marker):
            return True
        time.sleep(0.1)
    return False


def lines(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(x) for x in f if x.strip()]


def test_serve_arms_parse_and_refuse_what_cannot_run():
    a = parse_arm("""spec:serve="vllm serve M --port {port} --speculative-config '{"n":3}'\"""")
    assert a.serve == ("vllm", "serve", "M", "--port", "{port}", "--speculative-config", '{"n":3}')
    with pytest.raises(ArmError, match="put \\{port\\} in it"):
        parse_arm("x:serve=vllm serve M --port 8000")
    with pytest.raises(ArmError, match="not both"):
        parse_arm("x:url=http://h/v1,serve=vllm serve M --port {port}")
    p = tokmon("run", "--arm", "a:serve=true {port}", "--assign", "random", "-n", "1")
    assert p.returncode == 2 and "--assign must be switch" in p.stderr


@pytest.mark.slow
def test_two_managed_arms_alternate_on_one_port(tmp_path):
    """plain and spec simulators, four cycles of 3 s turns: each start an event with its time to
    ready, nothing sent while a server restarts, the speed-up the simulator's model
    gives (one stream: its single-stream formula), no process left."""
    marker = f"mng-{uuid.uuid4().hex[:10]}"
    rec, summ = tmp_path / "m.jsonl", tmp_path / "m.json"
    p = tokmon(
        "run", "--arm", f"plain:serve={sim_cmd(marker)}",
        "--arm", f"spec:serve={sim_cmd(marker, '--spec on')}",
        "--alternate", "3s", "--cycles", "4", "-c", "1", "--max-tokens", "64",
        "--mix", "chat=1", "--headless", "--no-gpu", "--record", str(rec),
        "--summary-json", str(summ), timeout=240,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert gone(marker), alive(marker)
    s = json.loads(summ.read_text())
    ms = s["managed_servers"]
    assert ms["plain"]["starts"] == 4 and ms["spec"]["starts"] == 4, ms
    assert all(0 < r < 60 for m in ms.values() for r in m["ready_s"])
    assert len(ms["plain"]["stop_s"]) == 4 and len(ms["spec"]["stop_s"]) == 3
    assert ms["spec"]["env"]["config"]["spec"] is True
    assert ms["plain"]["env"]["config"]["spec"] is False
    assert "--spec" in ms["spec"]["command"]
    # the turns, in order, and nothing sent between "stopping" and "ready"
    ls = lines(rec)
    events = [x for x in ls if x.get("k") == "e"]
    turns = [e["data"]["arm"] for e in events if e["kind"] == "arm"]
    assert turns == ["spec", "plain"] * 3 + ["spec"], turns
    spans, t0 = [], None
    for e in events:
        if e["kind"] == "server" and e["data"].get("phase") == "stopping":
            t0 = e["t"]
        elif e["kind"] == "server" and e["data"].get("phase") == "ready" and t0 is not None:
            spans.append((t0, e["t"]))
            t0 = None
    assert len(spans) == 7
    sent = [r["ts"] for r in ls if r.get("k") == "r"]
    assert sent and not [t for t in sent for a, b in spans if a < t < b]
    # the simulator's model: one stream, chat prompts (acceptance 0.5), its formula
    prof = PROFILES["27b-h100"]
    model = prof.single_stream_tps(True, 0.5) / prof.single_stream_tps(False)
    d = s["comparison"]["decode_tokens_per_s"]
    print(f"managed A/B: ×{d['ratio']:.3f} {d['ci95']} (the model: ×{model:.3f})")
    assert d["ratio"] == pytest.approx(model, rel=0.08)
    assert d["ci95"][0] * 0.95 <= model <= d["ci95"][1] * 1.05
    assert s["arms"]["plain"]["requests"]["failed"] == 0
    assert s["arms"]["spec"]["requests"]["failed"] == 0


def _start(tmp_path: Path, marker: str, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "TOKMON_API_KEY")}
    return subprocess.Popen(
        [PY, "-m", "tokmon", "run", "--arm", f"plain:serve={sim_cmd(marker)}",
         "--arm", f"spec:serve={sim_cmd(marker, '--spec on')}", "-c", "2", "--duration", "5m",
         "--headless", "--no-gpu", "--status-interval", "0.5s", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _wait_measuring(p: subprocess.Popen[str]) -> None:
    """Until tokmon prints a status line with a finished request: it is under way."""
    assert p.stderr is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        if "ok " in line and " ok 0 " not in line and line.startswith("["):
            return
    p.kill()
    raise AssertionError("tokmon never got under way")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_no_managed_server_outlives_tokmon(tmp_path, how):
    marker = f"mng-{uuid.uuid4().hex[:10]}"
    p = _start(tmp_path, marker)
    try:
        _wait_measuring(p)
        assert alive(marker)
        p.send_signal(getattr(signal, how))
        if how == "SIGINT":  # drains, then stops
            p.wait(60)
            assert p.returncode == 130
        else:
            p.wait(30)
        assert gone(marker, 30), alive(marker)  # the watchdog, for a kill
    finally:
        if p.poll() is None:
            p.kill()
        for pid in alive(marker):
            os.kill(int(pid), signal.SIGKILL)


@pytest.mark.slow
def test_a_server_that_dies_mid_run_is_an_error_with_its_log(tmp_path):
    marker = f"mng-{uuid.uuid4().hex[:10]}"
    rec = tmp_path / "r.jsonl"
    p = _start(tmp_path, marker, "--record", str(rec))
    try:
        _wait_measuring(p)
        for pid in alive(marker):
            os.kill(int(pid), signal.SIGKILL)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    assert "the server of arm plain exited" in err
    ev = [x for x in lines(rec) if x.get("k") == "e" and x.get("kind") == "server"]
    failed = [e for e in ev if e["data"].get("phase") == "failed"]
    assert failed and "log_tail" in failed[0]["data"]
    assert gone(marker)


def test_a_server_that_never_gets_ready(tmp_path):
    cmd = f"{PY} -c \"import sys; print('out of memory: boom'); sys.exit(3)\" {{port}}"
    p = tokmon("run", "--arm", f"plain:serve={cmd}", "-n", "2", "--headless", "--no-gpu")
    assert p.returncode == 1  # the run failed (as --help says), not bad input
    err = p.stderr.splitlines()
    assert any("exited (code 3) before it was ready" in ln for ln in err), p.stderr
    assert any("out of memory: boom" in ln for ln in err)  # its log's tail


@pytest.mark.slow
def test_skip_arm_goes_on_without_the_arm_that_failed(tmp_path):
    marker = f"mng-{uuid.uuid4().hex[:10]}"
    bad = f'{PY} -c "import sys; sys.exit(4)" {{port}} {marker}'
    summ = tmp_path / "s.json"
    p = tokmon(
        "run", "--arm", f"plain:serve={sim_cmd(marker)}", "--arm", f"broken:serve={bad}",
        "--alternate", "2s", "--duration", "8s", "-c", "2", "--headless", "--no-gpu",
        "--on-server-failure", "skip-arm", "--summary-json", str(summ), timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(summ.read_text())
    assert s["arms"]["plain"]["requests"]["ok"] > 0
    assert s["managed_servers"]["broken"].get("failed") == 1
    assert s["managed_servers"]["plain"]["starts"] >= 2  # started again after the failure
    assert gone(marker)


def test_a_failing_server_is_retried_once_then_stops_the_run(tmp_path):
    marker = f"mng-{uuid.uuid4().hex[:10]}"
    bad = f'{PY} -c "import sys; sys.exit(5)" {{port}} {marker}'
    rec = tmp_path / "r.jsonl"
    p = tokmon(
        "run", "--arm", f"plain:serve={sim_cmd(marker)}", "--arm", f"broken:serve={bad}",
        "--alternate", "1s", "--duration", "30s", "-c", "1", "--headless", "--no-gpu",
        "--on-server-failure", "retry", "--record", str(rec), timeout=120,
    )  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "managed server of arm broken" in p.stderr
    ev = [x for x in lines(rec) if x.get("k") == "e" and x.get("kind") == "server"]
    assert [e["data"]["phase"] for e in ev if e["data"].get("arm") == "broken"] == [
        "starting", "failed", "starting", "failed",
    ]  # fmt: skip
    assert gone(marker)


def test_serve_commands_are_written_without_secrets():
    from tokmon.model.env.redact import redact_argv as redact_command
    from tokmon.sources.managed import gpu_memory_settled

    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_x", "HF_TOKEN=abc", "-p"]
    assert redact_command(argv) == [
        "vllm", "serve", "m", "--api-key", "<redacted>", "--hf-token=<redacted>",
        "HF_TOKEN=<redacted>", "-p",
    ]  # fmt: skip
    # the next server starts once the GPU memory is back near its baseline
    used = iter([70.0, 40.0, 10.2])
    assert gpu_memory_settled(lambda: next(used), 10.0, 5.0)
    assert not gpu_memory_settled(lambda: 70.0, 10.0, 0.6)
    assert gpu_memory_settled(lambda: None, 10.0, 0.1)  # no NVML: nothing to wait for


@pytest.mark.slow
def test_each_managed_arm_counts_its_tokens_in_its_own_time(tmp_path):
    """Two serve= arms on a fixed schedule (5 ms to the first token, then one token every
    25 ms, 40 tokens: 40.8 tokens/s a request, first token included), 8 streams, taking
    turns: the tokens that arrive while a server drains are counted in neither its
    tokens nor its seconds, so each arm's tok/s is within 3% of 8 × 40.8 and never
    above what its streams can make (before: the drain's tokens counted, its time not)."""
    marker = f"own-{uuid.uuid4().hex[:10]}"
    summ = tmp_path / "m.json"
    # (real time: the schedule is the known rate; one token a chunk)
    sim = f"{PY} -m tokmon sim --port {{port}} --model-name {marker} --schedule 5,25,1"
    p = tokmon(
        "run", "--arm", f"plain:serve={sim}", "--arm", f"spec:serve={sim}",
        "--alternate", "4s", "--cycles", "2", "-c", "8", "--max-tokens", "40",
        "--headless", "--no-gpu", "--summary-json", str(summ), timeout=240,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert gone(marker), alive(marker)
    s = json.loads(summ.read_text())
    per_stream = 40 / (0.005 + 39 * 0.025)
    for name, a in s["arms"].items():
        tps = a["output_tokens_per_s"]
        bound = a["throughput_bound"]
        print(f"{name}: {tps:.1f} tok/s over {a['active_s']:.2f} s (8 × {per_stream:.1f} = "
              f"{8 * per_stream:.1f}; bound {bound['tokens_per_s_max']:.1f})")  # fmt: skip
        assert bound["holds"] and tps <= bound["tokens_per_s_max"], (name, a)
        assert tps <= 8 * per_stream * 1.01, (name, tps)
        assert tps == pytest.approx(8 * per_stream, rel=0.03), (name, tps)


def test_nothing_is_sent_once_the_engines_say_they_obeyed_a_pause(make_sim, tmp_path):
    """A restart's "stopping" is when the engines obeyed its Pause, not when it was sent: the
    session says nothing until every engine has obeyed it, and from that moment until the
    resume no request is sent (CI saw a request sent inside a restart: begun while the
    pause was on its way, after the event stamped when it was sent)."""
    sim = make_sim(schedule=(0.5, 0.2, 1), seed=3)
    cfg = RunConfig(
        arms=(Arm("a", url=sim.url, model="sim-27b"),),
        concurrency=4, duration_s=30.0, max_tokens=LengthDist("fixed", 24), workers=2,
    )  # fmt: skip
    path = tmp_path / "p.jsonl"
    s = LiveSession(cfg, target=sim.url, model="sim-27b", recorder=Recorder(str(path)))
    s.start()
    try:
        deadline = time.monotonic() + 30
        while not (s.fold.snapshot and s.fold.snapshot.ok) and time.monotonic() < deadline:
            time.sleep(0.02)
        with s.lock:
            s.send(Pause(True, 7))
            assert s.stage.paused_at(7) is None  # no engine could have said so yet
        while s.stage.paused_at(7) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with s.lock:
            at = s.stage.paused_at(7)
            assert at is not None
            acked = at - s.t_start
            sent_before = sum(st.sent for st in s.intake.statuses.values())
        time.sleep(0.5)  # (a window in which a stray send would happen: no synchronisation)
        with s.lock:
            assert sum(st.sent for st in s.intake.statuses.values()) == sent_before
            s.send(Pause(False))
        time.sleep(0.5)
        s.command(StopRun())
        assert s.wait(30)
    finally:
        s.close()
    sent = [x["ts"] for x in lines(path) if x.get("k") == "r"]
    resumed = [t for t in sent if t > acked]
    assert len(sent) > len(resumed) > 0  # requests before the pause and after the resume
    assert min(resumed) > acked + 400_000_000  # none until the resume, half a second on
