"""A run plan you can read: the options become a checked, frozen plan before any server
is asked; a separate step performs what the plan needs (the pre-flight, the prompts'
measuring, the environment survey)."""

from __future__ import annotations

import dataclasses
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokmon.cli.parser import UsageError, build_parser
from tokmon.cli.run import RunPlan, plan_run, prepare_run


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


def args_of(*argv: str):
    return build_parser().parse_args(["run", *argv])


def test_the_plan_asks_no_server_and_the_performing_step_resolves_the_model(server):
    a = args_of("--url", server, "-c", "3", "--approx-prompt-tokens", "--no-env",
                "--arm", "x:body={\"temperature\":0}", "--arm", "y:model=")  # fmt: skip
    plan = plan_run(a, [])
    assert isinstance(plan, RunPlan) and Counting.seen == []  # nothing asked yet
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.target = "elsewhere"  # type: ignore[misc]
    assert [x.name for x in plan.cfg.arms] == ["x", "y"]
    assert all(x.url == server and x.model == "" for x in plan.cfg.arms)  # as given
    assert plan.cfg.concurrency == 3 and not plan.measure_prompts and not plan.survey
    run = prepare_run(plan, a)
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
            plan_run(args_of(*argv), [])
    assert Counting.seen == []
