"""The newer doors, locked (issue: secrets in server commands, strange Unicode, files,
signals, crafted inputs). Each case is an attack that once broke something; tokmon runs
as a user would, in a subprocess, and what it wrote is checked as raw bytes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import tokmon
from hostile import Hostile, sse_events, text_event, usage_event

from tokmon.model.env.redact import redact_argv, secrets_in

PY = sys.executable


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return tokmon(*args, env=env, timeout=timeout, text=False)


def every_file(folder: Path) -> list[bytes]:
    return [p.read_bytes() for p in folder.rglob("*") if p.is_file()]


def test_the_redaction_rule():
    argv = ["vllm", "serve", "m", "--api-key", "sk-A", "--api-key=sk-B", "-k", "kk-123",
            "--hf_token", "hf_1", "--admin-api-key", "adm-1", "--auth-token", "at-1",
            "--openai-api-key", "oa-1", "Authorization: Bearer bb-123456", "HF_TOKEN=abc",
            "--max-tokens", "64", "--tokenizer", "t.json", "--api-keys", "k1x,k2y",
            "--max-num-batched-tokens", "4096"]  # fmt: skip
    red = redact_argv(argv)
    for s in ("sk-A", "sk-B", "kk-123", "hf_1", "adm-1", "at-1", "oa-1", "bb-123456", "abc",
              "k1x", "k2y"):  # fmt: skip
        assert not [a for a in red if s in a], (s, red)
    # what only looks like a secret stays: max tokens, a tokenizer file, batch sizes
    assert "64" in red and "t.json" in red and "4096" in red
    assert set(secrets_in(argv)) >= {"sk-A", "sk-B", "k1x", "k2y", "bb-123456"}
    # --show-arg keeps one that looks secret and is not
    assert "kk-123" in redact_argv(["x", "-k", "kk-123"], ["k"])


def test_a_serve_command_with_keys_is_written_without_them(tmp_path):
    """The keys of a serve= command (both forms, and a list with a comma) appear in no
    file and no output, from a run whose server cannot start (so it is quick): the
    recording's command and settings, the summary and stderr."""
    rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
    serve = (f"{PY} -c 'import sys; sys.exit(3)' --port {{port}} --api-key sk-AAA "
             "--api-key=sk-BBB --api-keys k1x-SECRET,k2y-SECRET -k kk-SECRET "
             "--hf_token hf-SECRET 'Authorization: Bearer bear-SECRET'")  # fmt: skip
    p = run("run", "--arm", f"b:serve={serve}", "-d", "2s", "--headless", "--no-gpu",
            "--record", str(rec), "--summary-json", str(summ))  # fmt: skip
    assert p.returncode == 1, p.stderr  # the server exited before it was ready
    assert b"Traceback" not in p.stderr
    outputs = [p.stdout, p.stderr, *every_file(tmp_path)]
    for s in (b"sk-AAA", b"sk-BBB", b"k1x-SECRET", b"k2y-SECRET", b"kk-SECRET", b"hf-SECRET",
              b"bear-SECRET"):  # fmt: skip
        for o in outputs:
            assert s not in o, (s, o[:400])


def test_a_lone_surrogate_from_a_server_is_text(tmp_path):
    """`/v1/models` answering {"id": "m\\ud800x"} and a finish_reason with one: the run
    ends with its summary, the recording reads back whole (it ended "internal error",
    the file unreadable), and tokmon env answers."""
    with Hostile() as srv:
        srv.models_body = b'{"object":"list","data":[{"id":"m\\ud800x","object":"model"}]}'
        srv.events = sse_events(
            text_event("hi"), '{"choices":[{"index":0,"delta":{"content":" \\udfff"},'
            '"finish_reason":"st\\ud800op"}]}', usage_event(2), "[DONE]",
        )  # fmt: skip
        rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
        p = run("run", "--url", srv.url, "--headless", "-c", "2", "-n", "8", "--no-gpu",
                "--record", str(rec), "--summary-json", str(summ))  # fmt: skip
        assert p.returncode == 0, p.stderr
        env = run("env", srv.url)
        assert env.returncode == 0, env.stderr
    s = json.loads(summ.read_text())
    assert s["arms"]["default"]["requests"]["ok"] == 8
    r = run("report", str(rec), "--format", "json")
    assert r.returncode == 0 and b"corrupt" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["arms"]["default"]["requests"]["ok"] == 8


def test_a_kind_with_a_surrogate_keeps_metrics_answering(tmp_path):
    """A prompts file whose kind holds a lone surrogate: /metrics still answers (every
    scrape was HTTP 500) and the kind is text."""
    import httpx

    from tokmon.sources.managed import free_port

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello there", "kind": "k\\udfff"}\n')
    port = free_port()
    with Hostile() as srv:
        proc = __import__("subprocess").Popen(
            [PY, "-m", "tokmon", "run", "--url", srv.url, "--headless", "--no-gpu",
             "--prompts", str(prompts), "-d", "20s", "-c", "1",
             "--prometheus", f"127.0.0.1:{port}"],
            stdout=-3, stderr=-1,
        )  # fmt: skip
        try:
            import time

            deadline = time.monotonic() + 30
            body = None
            while time.monotonic() < deadline:
                try:
                    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    if r.status_code == 200 and b'kind="k' in r.content:
                        body = r.content
                        break
                    assert r.status_code == 200, r.status_code
                except httpx.TransportError:
                    pass
                time.sleep(0.3)
            assert body is not None
            assert b"\\ud" not in body.lower()
        finally:
            proc.terminate()
            proc.wait(30)


def test_files_are_the_users_alone_and_no_symlink_is_followed(tmp_path):
    """With umask 022: the recording (with prompts), the summary and reports are 0600;
    a symlink placed in advance where tokmon writes is refused in one line (a dangling
    one created its target with the prompts; a summary over one overwrote its target);
    an existing file that is not tokmon's is not truncated."""
    old = os.umask(0o022)
    try:
        with Hostile() as srv:
            rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
            p = run("run", "--url", srv.url, "--headless", "-c", "1", "-n", "3", "--no-gpu",
                    "--record", str(rec), "--record-prompts", "--summary-json", str(summ))  # fmt: skip
            assert p.returncode == 0, p.stderr
            rep = tmp_path / "rep.md"
            assert run("report", str(rec), "-F", "md", "-o", str(rep)).returncode == 0
            for f in (rec, summ, rep):
                assert (f.stat().st_mode & 0o777) == 0o600, (f, oct(f.stat().st_mode))
            shared = tmp_path / "g.jsonl"
            p = run("run", "--url", srv.url, "--headless", "-n", "2", "--no-gpu",
                    "--record", str(shared), "--group-readable")  # fmt: skip
            assert p.returncode == 0 and (shared.stat().st_mode & 0o777) == 0o640
            # a dangling link where the recording goes: refused, its target not created
            target = tmp_path / "elsewhere" / "stolen.jsonl"
            target.parent.mkdir()
            link = tmp_path / "link.jsonl"
            link.symlink_to(target)
            p = run("run", "--url", srv.url, "--headless", "-n", "2", "--no-gpu",
                    "--record", str(link))  # fmt: skip
            assert p.returncode == 2 and b"symbolic link" in p.stderr, p.stderr
            assert not target.exists()
            # a summary over a link to someone's file: refused, the file untouched
            victim = tmp_path / "victim.txt"
            victim.write_text("precious")
            slink = tmp_path / "s2.json"
            slink.symlink_to(victim)
            p = run("run", "--url", srv.url, "--headless", "-n", "2", "--no-gpu",
                    "--summary-json", str(slink))  # fmt: skip
            assert p.returncode != 0 and b"symbolic link" in p.stderr, p.stderr
            assert victim.read_text() == "precious"
            # a report over an existing file that is not tokmon's: refused, kept
            p = run("report", str(rec), "-F", "text", "-o", str(victim))
            assert p.returncode == 2 and b"not tokmon's" in p.stderr, p.stderr
            assert victim.read_text() == "precious"
    finally:
        os.umask(old)


def _rss_limited(*args: str, limit_mb: int = 600):
    """tokmon with its address space capped: a reader that loads a crafted file whole
    fails the test with a MemoryError instead of eating the machine."""
    import resource
    import subprocess

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))

    return subprocess.run(
        [PY, "-m", "tokmon", *args], capture_output=True, text=True, timeout=60,
        preexec_fn=cap, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_crafted_input_files_are_one_line_and_cheap(tmp_path):
    """/dev/zero behind a symlink as every input file, a trace line with 2M hash_ids, a
    recording whose requests ask 50M prompt tokens, a config of 100k nested arrays, a
    trace timestamp of 1e20: each is one line naming the file, exit 2, in bounded
    memory (they took 1.7–7.7 GB, or a traceback)."""
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    url = "http://127.0.0.1:9/v1"
    for opt in ("--trace", "--prompts", "--conversations"):
        p = _rss_limited("run", "--url", url, opt, str(zero), "--headless", "-n", "1")
        assert p.returncode == 2 and "not a regular file" in p.stderr, (opt, p.stderr)
        assert "Traceback" not in p.stderr and str(zero) in p.stderr
    p = _rss_limited("run", "--config", str(zero))
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr
    with Hostile() as srv:  # (the tokenizer is read once the server answered)
        p = _rss_limited("run", "--url", srv.url, "--tokenizer", str(zero), "-n", "1",
                         "--headless", "--no-gpu")  # fmt: skip
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    p = _rss_limited("run", "--config", str(deep))
    assert p.returncode == 2 and str(deep) in p.stderr and "Traceback" not in p.stderr, p.stderr
    trace = tmp_path / "t.jsonl"
    line = {"timestamp": 0, "input_length": 10, "output_length": 4}
    for extra, says in (
        ({"hash_ids": list(range(2_000_000))}, "line 1 is over 16 MiB"),
        ({"hash_ids": list(range(200_000))}, "hash_ids for input_length 10"),
        ({"timestamp": 1e20}, "timestamp must be"),
    ):
        trace.write_text(json.dumps({**line, **extra}) + "\n")
        p = _rss_limited("run", "--url", url, "--trace", str(trace), "--headless")
        assert p.returncode == 2 and says in p.stderr, (says, p.stderr)
    from tokmon.model.data.records import RequestRecord
    from tokmon.recording.writer import Recorder

    rec = tmp_path / "r.jsonl"
    w = Recorder(str(rec))
    w.open({"settings": {"arms": [{"name": "a"}]}}, 0)
    w.records([RequestRecord(rid=0, arm="a", outcome="ok", t_sched=0, t_end=1,
                             prompt_tokens_asked=50_000_000)])  # fmt: skip
    w.end(2)
    w.close()
    p = _rss_limited("run", "--url", url, "--replay-load", str(rec), "--headless")
    assert p.returncode == 2 and "over 10,000,000" in p.stderr, p.stderr


DAEMON = r"""
import os, signal, sys, time
port = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
        os.execv(sys.executable, [sys.executable, "-m", "tokmon", "sim", "--port", port,
                                  "--time-scale", "8", "--model-name", sys.argv[2]])
    os._exit(0)
while True:
    time.sleep(1)
"""


@pytest.mark.slow
def test_a_server_that_daemonises_does_not_outlive_tokmon(tmp_path):
    """A serve= server that forks, calls setsid, forks again and ignores SIGTERM: tokmon
    stops it anyway (it is the orphan's subreaper), says so naming the PID, exits 1, and
    leaves nothing on the port (a -d 4s run took 36 s, exited 0, the daemon listening)."""
    import subprocess
    import time
    import uuid

    from tokmon.sources.managed import port_holders

    marker = f"daemon-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    t0 = time.monotonic()
    p = run("run", "--arm", f"d:serve={PY} {script} {{port}} {marker}", "-d", "4s", "-c", "1",
            "--headless", "--no-gpu")  # fmt: skip
    took = time.monotonic() - t0
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "left process" in err and "stopped by tokmon" in err, err
    assert took < 30, took
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, left
    port = int(err.split("on port ")[1].split()[0])
    assert not port_holders(port)


@pytest.mark.parametrize("sig,code", [("TERM", 143), ("HUP", 129)])
def test_sigterm_and_sighup_end_a_headless_run_like_ctrl_c(tmp_path, sig, code):
    """SIGTERM to the whole process group (systemd, `timeout`) or SIGHUP (an SSH drop):
    the run drains, writes its summary and recording, and exits 143 / 129 -- no false
    "engine failed: exit code -15", no lost summary."""
    import signal
    import subprocess
    import time

    with Hostile() as srv:
        rec, summ = tmp_path / "r.jsonl", tmp_path / "s.json"
        p = subprocess.Popen(
            [PY, "-m", "tokmon", "run", "--url", srv.url, "--headless", "--no-gpu", "-c", "2",
             "-d", "5m", "--record", str(rec), "--summary-json", str(summ),
             "--status-interval", "0.5s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            assert p.stderr is not None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # until a status line shows requests done
                line = p.stderr.readline()
                if line.startswith("[") and " ok 0 " not in line and "ok " in line:
                    break
            os.killpg(p.pid, getattr(signal, f"SIG{sig}"))
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == code, err
    assert "failed" not in err and "exit code" not in err, err
    assert json.loads(summ.read_text())["arms"]["default"]["requests"]["ok"] > 0
    assert b'"k":"end"' in rec.read_bytes() or b'"k": "end"' in rec.read_bytes()


def test_a_prometheus_port_in_use_is_one_line_before_the_run():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = run("run", "--url", "http://127.0.0.1:9/v1", "--prometheus", f"127.0.0.1:{port}",
                "--headless", "-n", "1")  # fmt: skip
    assert p.returncode == 2 and b"is in use" in p.stderr and b"Traceback" not in p.stderr
    assert b"connection refused" not in p.stderr  # said before the pre-flight


def test_the_html_reports_summary_reads_back_with_json_parse(tmp_path):
    """The summary embedded in the HTML report is the JSON a script reads (it was
    HTML-escaped inside <script>, so JSON.parse of it failed), and a server's
    '</script><script>…' in it cannot end the block."""
    import re

    with Hostile() as srv:
        srv.model_id = "m</script><script>alert(1)</script>&amp;"
        rec = tmp_path / "r.jsonl"
        p = run("run", "--url", srv.url, "--headless", "-c", "1", "-n", "3", "--no-gpu",
                "--record", str(rec))  # fmt: skip
        assert p.returncode == 0, p.stderr
    page = run("report", str(rec), "-F", "html").stdout.decode()
    m = re.search(r"<script type='application/json' id='tokmon-summary'>(.*?)</script>", page,
                  re.S)  # fmt: skip
    assert m is not None
    body = m.group(1)
    assert "<" not in body and "&quot;" not in body and "&amp;" not in body
    summary = json.loads(body)  # what JSON.parse(el.textContent) gives
    assert summary["target"]["model"].startswith("m</script>")


def test_a_server_that_publishes_its_key_is_redacted_and_named(tmp_path):
    """SGLang hands out its server_args (api_key included) at /get_server_info: tokmon
    env -F json copied it verbatim. Now the key is redacted by the same rule as every
    command line, and the security section says the server publishes it."""
    info = {"server_args": {"model_path": "m", "api_key": "sk-published-9876",
                            "admin_api_key": "adm-published-5555", "tp_size": 1}}  # fmt: skip
    with Hostile() as srv:
        srv.extra_get["/get_server_info"] = json.dumps(info).encode()
        p = run("env", srv.url, "-F", "json")
        text = run("env", srv.url)
    assert p.returncode == 0, p.stderr
    for out in (p.stdout, text.stdout):
        assert b"sk-published-9876" not in out and b"adm-published-5555" not in out
    doc = json.loads(p.stdout)
    assert any("publishes a secret" in w and "api_key" in w
               for w in doc["security"]["warnings"]), doc["security"]  # fmt: skip


@pytest.mark.parametrize(
    "name", ["x/../../../../elsewhere/evil", "a\nb", "a\x1bb", "b\x07", "..", "n" * 33, ""]
)
def test_arm_names_are_checked_like_every_option(tmp_path, name):
    """An arm's name becomes a file name (its server's log) and a /metrics label: a path,
    a newline, ESC or BEL, or over 32 characters is one line and exit 2, from --arm and
    from a config file alike (a TOML arm wrote a log outside the recording's folder)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[arms.{json.dumps(name)}]\nserve = "{PY} x.py --port {{port}}"\n')
    for args in (["--config", str(cfg)], ["--arm", f"{name}:url=http://127.0.0.1:9/v1"]):
        p = run("run", *args, "--headless", "-n", "1")
        assert p.returncode == 2, (args, p.stderr)
        assert b"Traceback" not in p.stderr and b"\x1b" not in p.stderr and b"\x07" not in p.stderr
    assert not (tmp_path.parent / "elsewhere").exists()
