"""The command line end to end, in subprocesses, against real loopback servers."""

import contextlib
import json
import os
import subprocess
import time
import uuid

import pytest
from helpers import PY, tokmon

from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


@pytest.fixture(scope="module")
def sim():
    with SimProcess(SimConfig(schedule=(20.0, 2.0, 1), seed=1)) as s:
        yield s


def test_headless_summary_json(sim, tmp_path):
    out = tmp_path / "s.json"
    r = tokmon(
        "run",
        "--url",
        sim.url,
        "--headless",
        "--requests",
        "40",
        "-c",
        "4",
        "--max-tokens",
        "32",
        "--warmup",
        "4",
        "--summary-json",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    a = s["arms"]["default"]
    assert a["requests"]["ok"] == 40 and a["requests"]["failed"] == 0
    assert a["requests"]["warmup"] == 4
    assert a["ttft_ms"]["count"] == 36
    assert set(a["ttft_ms"]) == {"p50", "p90", "p95", "p99", "mean", "min", "max", "count"}
    assert a["output_tokens"] == 36 * 32
    assert 15 < a["ttft_ms"]["p50"] < 40
    assert s["target"]["model"] == "sim-27b" and s["target"]["endpoint"] == "chat"
    for key in ("tokmon_version", "started_at", "duration_s"):
        assert key in s
    assert "default" in r.stdout and "TTFT" in r.stdout


BAD = [
    (["run", "--url", "http://127.0.0.1:9/v1", "-n", "1"], "refused"),
    (["run", "--url", "not-a-url", "-n", "1"], "url"),
    (["run", "-n", "1"], "--url"),
    (["run", "--url", "{sim}", "--rate", "-1"], "--rate"),
    (["run", "--url", "{sim}", "--rate", "0"], "--rate"),
    (["run", "--url", "{sim}", "-c", "1000000000"], "--concurrency"),
    (["run", "--url", "{sim}", "--duration", "-5s"], "--duration"),
    (["run", "--url", "{sim}", "--duration", "soon"], "--duration"),
    (["run", "--url", "{sim}", "--extra-body", "{bad"], "--extra-body"),
    (["run", "--url", "{sim}", "--prompts", "/nonexistent.jsonl"], "--prompts"),
    (["run", "--url", "{sim}", "--model", "nope"], "unknown model"),
    (["run", "--url", "{sim}", "--max-tokens", "0"], "--max-tokens"),
    (["run", "--url", "{sim}", "--arm", "a:url={sim}", "--arm", "a:url={sim}"], "two arms"),
    (["run", "--url", "{sim}", "--arm", ":url={sim}"], "name"),
    (["run", "--url", "{sim}", "--arm", "a:colour=red"], "unknown key"),
    (["run", "--url", "{sim}", "--mix", "poetry=1"], "--mix"),
    (["run", "--url", "{sim}", "--slo", "ttft=fast"], "--slo"),
    (["run", "--url", "{sim}", "--config", "/nonexistent.toml"], "--config"),
    (["run", "--url", "{base}/nowhere", "-n", "1"], "404"),
    (["sim", "--profile", "nope"], "unknown profile"),
    (["sim", "--faults", "explode=1"], "unknown fault"),
    (["sim", "--faults", "http_500=2"], "between 0 and 1"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_one_line_exit_2(sim, args, needle):
    base = sim.url[: -len("/v1")]
    args = [a.replace("{sim}", sim.url).replace("{base}", base) for a in args]
    t0 = time.monotonic()
    r = tokmon(*args, timeout=30)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert needle.lower() in lines[0].lower(), lines[0]
    assert time.monotonic() - t0 < 10


def test_sim_port_in_use(sim):
    r = tokmon("sim", "--port", str(sim.port), timeout=20)
    assert r.returncode == 2 and "cannot listen" in r.stderr


def test_config_file(sim, tmp_path):
    cfg = tmp_path / "t.toml"
    cfg.write_text(
        f'url = "{sim.url}"\nrequests = 6\nmax-tokens = "8"\nheadless = true\n'
        f"[arms.one]\n[arms.two]\nbody = {{speculative = false}}\n"
    )
    out = tmp_path / "s.json"
    r = tokmon("run", "--config", str(cfg), "--summary-json", str(out), "--assign", "alternate")
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert set(s["arms"]) == {"one", "two"}
    assert s["arms"]["one"]["requests"]["ok"] + s["arms"]["two"]["requests"]["ok"] == 6
    bad = tmp_path / "bad.toml"
    bad.write_text("colour = 'red'\n")
    r = tokmon("run", "--config", str(bad))
    assert r.returncode == 2 and "unknown key" in r.stderr


def test_core_never_imports_ui():
    code = (
        "import sys, tokmon.sources.live, tokmon.engine.worker, tokmon.model.judge.summary, "
        "tokmon.engine.client, tokmon.sim.server; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def marked(mark: str) -> list[str]:
    """Live processes that carry `mark` in their environment: a tokmon started with it
    and every process under it, whatever session it moved to (the simulators, like a
    serve= arm's server, run in sessions of their own). A zombie has exited; it lingers
    only where PID 1 does not reap orphans (containers)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("TOKMON_TEST_MARK") == mark:
                out.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:80]}")
    return out


def marked_env() -> tuple[str, dict[str, str]]:
    mark = uuid.uuid4().hex
    return mark, dict(os.environ, TOKMON_TEST_MARK=mark)


@pytest.mark.slow
def test_demo_headless_exits_cleanly_no_children():
    mark, e = marked_env()
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "demo", "--headless", "--duration", "6s", "--time-scale", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=e,
        stdin=subprocess.DEVNULL,
    )
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    assert "baseline" in out and "spec" in out
    deadline = time.monotonic() + 10  # exited processes may take a moment to be reaped
    while time.monotonic() < deadline and marked(mark):
        time.sleep(0.1)
    assert marked(mark) == []  # no engine or simulator process left


def test_killed_parent_leaves_no_children():
    mark, e = marked_env()
    p = subprocess.Popen(
        [PY, "-m", "tokmon", "demo", "--headless"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env=e,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(marked(mark)) < 4:
        time.sleep(0.2)
    assert len(marked(mark)) >= 4  # parent, engine, two simulators
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and marked(mark):
        time.sleep(0.2)
    assert marked(mark) == []


def test_fail_on_slo_gate(sim, tmp_path):
    # TTFT is ~20 ms: an SLO of 5 ms fails the gate, 500 ms passes it.
    base = ["run", "--url", sim.url, "--headless", "-n", "12", "--max-tokens", "8", "--no-gpu"]
    bad = tokmon(
        *base, "--slo", "ttft=5", "--fail-on-slo", "--summary-json", str(tmp_path / "b.json")
    )
    assert bad.returncode == 1 and "below the target" in bad.stderr
    assert json.loads((tmp_path / "b.json").read_text())["arms"]["default"]["slo_fraction"] == 0
    good = tokmon(*base, "--slo", "ttft=500,tpot=100", "--fail-on-slo")
    assert good.returncode == 0, good.stderr


def test_api_key_file_never_echoed(sim, tmp_path):
    kf = tmp_path / "key"
    kf.write_text("sk-file-secret-999\n")
    r = tokmon(
        "run",
        "--url",
        sim.url,
        "--headless",
        "-n",
        "3",
        "--max-tokens",
        "4",
        "--api-key-file",
        str(kf),
        "--no-gpu",
    )
    assert r.returncode == 0 and "sk-file-secret" not in r.stdout + r.stderr
    r = tokmon("run", "--url", sim.url, "--api-key-file", str(tmp_path / "none"))
    assert r.returncode == 2 and "--api-key-file" in r.stderr


@pytest.mark.parametrize(
    "content,needle",
    [
        ("url = \n", "not valid TOML"),
        ("concurrency = 5\n[arms.a]\ncolour = 1\n", "unknown key"),
        ("arms = 3\n", "table"),
    ],
)
def test_bad_config_files(tmp_path, content, needle):
    f = tmp_path / "c.toml"
    f.write_text(content)
    r = tokmon("run", "--config", str(f))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_summary_is_handed_over_when_the_run_ends_not_when_the_dashboard_closes(sim):
    """A dashboard run that ended by --duration writes --summary-json at once: the SSH
    session may close before anyone presses q."""
    from tokmon.model.workloads.arms import Arm
    from tokmon.model.workloads.config import RunConfig
    from tokmon.sources.live import LiveSession

    got: list[dict] = []
    s = LiveSession(RunConfig(arms=(Arm("a", url=sim.url, model="sim-27b"),), requests=4))
    s.on_finished = got.append
    s.start()
    assert s.wait(60)
    assert got and got[0]["arms"]["a"]["requests"]["ok"] == 4  # before close() is called
    s.close()


def test_a_bad_theme_is_refused_before_the_run():
    r = tokmon("run", "--url", "http://127.0.0.1:9/v1", "--theme", "nope")
    assert r.returncode == 2 and "unknown theme 'nope'" in r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.slow
def test_a_headless_run_prints_its_alert_when_it_is_raised(tmp_path):
    """The issue's new user: ``tokmon run -c 4 --headless`` against a scripted server
    whose decoding slows by a third at 45 s (TTFT unchanged). The alert is a line on
    stderr while the run goes on (it was only in --summary-json), the closing summary
    lists it, and --alerts-exit gives 3. Decode speed and tokens/s are flagged between
    45 and 75 s and placed at 45 ± 5 s (on the run's clock: the recording's wall start
    against the simulator's); TTFT, which did not change, raises nothing."""
    from tokmon.recording.reader import read_recording
    from tokmon.sim.faults import Faults

    out_json, rec = tmp_path / "s.json", tmp_path / "r.jsonl"
    cfg = SimConfig(schedule=(50.0, 10.0, 1), faults=Faults(step=50.0, step_at=45.0), seed=6)
    before = time.time()
    with SimProcess(cfg) as s:
        after = time.time()  # the simulator's clock began between the two
        e = dict(os.environ)
        e.pop("OPENAI_API_KEY", None)
        e.pop("TOKMON_API_KEY", None)
        args = ["run", "--url", s.url, "-c", "4", "--duration", "80s", "--headless",
                "--max-tokens", "64", "--ignore-eos", "--summary-json", str(out_json),
                "--record", str(rec)]  # fmt: skip
        proc = subprocess.Popen(
            [PY, "-m", "tokmon", *args, "--alerts-exit", "--no-gpu"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=e,
        )
        assert proc.stderr is not None and proc.stdout is not None
        alerts = []  # (line, when it arrived)
        for line in proc.stderr:
            if " ALERT " in line:
                alerts.append((line, time.monotonic()))
        out = proc.stdout.read()
        code = proc.wait(60)
        ended = time.monotonic()
    assert code == 3, out
    assert alerts, out
    line, came = alerts[0]
    assert "change point:" in line and "(-3" in line, line
    assert not any("TTFT" in a for a, _ in alerts)  # TTFT's level did not move
    # live: it came while the run still had time to go, not with the closing summary
    assert ended - came > 8, (ended - came, line)
    assert "alerts raised: " in out and "change point: tokens/s" in out
    wall0 = read_recording(str(rec)).header["wall_start"]
    lo, hi = before + 45.0 - wall0, after + 45.0 - wall0  # the step on the run's clock
    cps = [a for a in json.loads(out_json.read_text())["alerts"] if a["alert"] == "change_point"]
    assert {a["metric"] for a in cps} == {"decode", "tok_s"}, cps  # nothing on TTFT
    for a in cps:
        assert lo <= a["found_s"] <= hi + 30, (a["message"], lo, hi)
        assert lo - 5 <= a["at_s"] <= hi + 5, (a["message"], lo, hi)
        assert a["change_pct"] < -20  # a third slower: about −33%


@pytest.mark.parametrize(
    "command", ["", "run", "demo", "replay", "report", "view", "env", "export", "sim"]
)
def test_every_help_prints(command, capsys):
    """`--help` of every command prints (a bare % in one option's help once made argparse
    raise, and `tokmon run --help` printed a traceback)."""
    from tokmon.cli.parser import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--help"] if command else ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tokmon") and "Traceback" not in out
    if command == "run":
        assert "(5%, or 0.05)" in out and "5%/h" in out
