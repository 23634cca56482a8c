"""A run plan you can read: the options become a checked, frozen plan before any server
is asked; a separate step performs what the plan needs (the pre-flight, the prompts'
measuring, the environment survey)."""

from __future__ import annotations

import dataclasses
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokmon.cli.given import read_given
from tokmon.cli.options import RunOptions
from tokmon.cli.parser import UsageError, build_parser
from tokmon.cli.plan import RunPlan, plan_run
from tokmon.cli.run import prepare_run


class Counting(BaseHTTPRequestHandler):
    """A server that answers /v1/models and counts every request it gets."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        Counting.seen.append(self.path)
        body = b'{"object": "list", "data": [{"id": "m1", "object": "model"}]}'
        code = 200 if self.path.endswith("/models") else 404
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def server():
    Counting.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def args_of(*argv: str) -> RunOptions:
    return RunOptions.of(build_parser().parse_args(["run", *argv]))


def plan_of(o: RunOptions) -> RunPlan:
    return plan_run(o, read_given(o, {}), [], "r1")


def test_the_plan_asks_no_server_and_the_performing_step_resolves_the_model(server):
    a = args_of("--url", server, "-c", "3", "--approx-prompt-tokens", "--no-env",
                "--arm", "x:body={\"temperature\":0}", "--arm", "y:model=")  # fmt: skip
    plan = plan_of(a)
    assert isinstance(plan, RunPlan) and Counting.seen == []  # nothing asked yet
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.target = "elsewhere"  # type: ignore[misc]
    assert [x.name for x in plan.cfg.arms] == ["x", "y"]
    assert all(x.url == server and x.model == "" for x in plan.cfg.arms)  # as given
    assert plan.cfg.concurrency == 3 and not plan.measure_prompts and not plan.survey
    run = prepare_run(plan)
    assert Counting.seen == ["/v1/models"]  # one pre-flight for the one server
    assert [x.model for x in run.cfg.arms] == ["m1", "m1"] and run.model == "m1"
    assert run.target == server and run.models[server]["data"][0]["id"] == "m1"
    assert run.cfg.arms[0].body == {"temperature": 0}  # the rest of the plan as it was


def test_a_bad_option_is_an_error_before_any_server_is_asked(server):
    for argv, said in (
        (("--url", server, "--slo-bad"), None),
        (("--url", server, "-c", "2", "--rate", "3"), "exclude each other"),
        (("--url", server, "--tokenizer", "t", "--approx-prompt-tokens"), "exclude each other"),
        (("--url", server, "--extra-body", "[1]"), "JSON object"),
    ):
        if said is None:
            with pytest.raises(SystemExit):  # argparse: an option that does not exist
                args_of(*argv)
            continue
        with pytest.raises(UsageError, match=said):
            plan_of(args_of(*argv))
    assert Counting.seen == []


def test_the_plan_reads_no_file_and_opens_no_socket_what_it_names_is_read_before(
    tmp_path, monkeypatch
):
    """``read_given`` reads the files and the environment; ``plan_run`` then only checks
    and assembles: with every way to a file, a socket or the environment closed, the
    same plan comes out."""
    import builtins
    import io
    import json
    import os
    import socket

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1000 + 50 * i, "input_length": 300,
                                         "output_length": 4, "hash_ids": [1, 2 + i]}) + "\n"
                             for i in range(5)))  # fmt: skip
    quality = tmp_path / "q.jsonl"
    quality.write_text('{"prompt": "2+2?", "answer": 4, "check": "number"}\n')
    rec = tmp_path / "out" / "r.jsonl"
    o = args_of("--trace", str(trace), "--quality-file", str(quality), "--quality-probes", "5%",
                "--record", str(rec), "--record-rotate", "1h", "--prometheus", "127.0.0.1:0",
                "--window", "20s", "--gpus", "0,2", "--net-interval", "off", "--no-env",
                "--arm", "a:serve=sleep 1000 --port {port}", "--arm", "b:url=http://127.0.0.1:9/v1")  # fmt: skip
    given = read_given(o, {"TOKMON_URL": "http://127.0.0.1:8/v1", "TOKMON_API_KEY": "sk-1"})
    assert given.url == "http://127.0.0.1:8/v1" and given.api_key == "sk-1"
    assert given.trace is not None and given.trace.count == 5 and len(given.quality_items) == 1

    def closed(*a, **k):
        raise AssertionError("the plan touched a file or a socket")

    class NoEnviron(dict):
        def __getitem__(self, k):
            raise AssertionError("the plan read the environment")

        get = __getitem__

    expected = plan_run(o, given, [], "r1")
    for mod, name in ((builtins, "open"), (io, "open"), (os, "open"), (os, "stat"),
                      (socket, "socket"), (socket, "create_connection")):  # fmt: skip
        monkeypatch.setattr(mod, name, closed)
    monkeypatch.setattr(os, "environ", NoEnviron())
    plan = plan_run(o, given, [], "r1")
    monkeypatch.undo()
    assert plan == expected and not rec.parent.exists()  # (the folder is made when performed)
    assert plan.cfg.run_id == "r1" and plan.cfg.mode == "trace" and plan.cfg.requests == 5
    assert plan.cfg.api_key == "sk-1" and plan.auth == {"authorization": "Bearer sk-1"}
    assert plan.window_s == 20.0 and plan.probes.gpus == (0, 2)
    assert plan.probes.net_interval_s is None and plan.view.prometheus == ("127.0.0.1", 0)
    assert plan.record is not None and plan.record.rotate_s == 3600.0
    assert plan.servers is not None and plan.servers.log_dir == str(rec.parent)


def test_every_option_is_checked_in_the_plan_also_those_read_once_the_run_is_up():
    """A bad --window, --status-interval or --gpus was found once the run started (after a
    managed server was up); --cycles without --alternate was ignored unless a server was
    managed. Each is now a line from the plan, before anything starts."""
    for argv, said in (
        (("--window", "0s"), "--window"),
        (("--status-interval", "soon"), "--status-interval"),
        (("--gpus", "0,x"), "--gpus"),
        (("--drift-alert=-1%/h",), "--drift-alert"),
        (("--slo", "ttft=fast"), "--slo"),
        (("--cycles", "2"), "--cycles needs --alternate"),
        (("--record", "r.jsonl", "--append", "--overwrite"), "exclude each other"),
        (("--record", "r.jsonl", "--record-max-size", "1k"), "at least 64KiB"),
        (("--metrics-interval", "0s"), "--metrics-interval"),
    ):
        with pytest.raises(UsageError, match=said):
            plan_of(args_of("--url", "http://127.0.0.1:9/v1", *argv))


def test_a_clash_of_options_about_a_file_is_told_before_the_file_is_read(tmp_path):
    missing = str(tmp_path / "nowhere.jsonl")
    with pytest.raises(UsageError, match="not with --rate"):
        read_given(args_of("--trace", missing, "--rate", "2"), {})
    with pytest.raises(UsageError, match="--quality-file asks its questions"):
        read_given(args_of("--quality-file", missing), {})
    with pytest.raises(UsageError, match="--trace"):  # (then the file: one line)
        read_given(args_of("--trace", missing), {})
