import numpy as np
import pytest

from tokmon.inputs import load_prompt_file
from tokmon.model.workloads.workload import (
    Arrivals,
    LengthDist,
    WorkloadError,
    parse_duration,
    parse_mix,
    synthetic_prompt,
)


@pytest.mark.parametrize("kind", ["poisson", "constant", "gamma"])
def test_arrival_rate_holds(kind):
    a = Arrivals(kind, 20.0, burstiness=0.5, seed=1)
    gaps = np.array([a.next_gap() for _ in range(20000)])
    assert abs(1 / gaps.mean() - 20.0) / 20.0 < 0.03


def test_burstiness_changes_dispersion():
    cv = {}
    for k in (0.25, 1.0, 4.0):
        a = Arrivals("gamma", 10.0, burstiness=k, seed=2)
        g = np.array([a.next_gap() for _ in range(20000)])
        cv[k] = g.std() / g.mean()
    # gamma CV = 1/sqrt(shape)
    for k, v in cv.items():
        assert abs(v - 1 / np.sqrt(k)) < 0.08
    poisson = Arrivals("poisson", 10.0, seed=3)
    g = np.array([poisson.next_gap() for _ in range(20000)])
    assert abs(g.std() / g.mean() - 1) < 0.05


def test_bad_arrivals():
    with pytest.raises(WorkloadError):
        Arrivals("poisson", 0)
    with pytest.raises(WorkloadError):
        Arrivals("weird", 1)


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert LengthDist.parse("512").sample(rng) == 512
    assert LengthDist.parse("4k").sample(rng) == 4000
    u = [LengthDist.parse("256:2048").sample(rng) for _ in range(5000)]
    assert min(u) >= 256 and max(u) <= 2048 and abs(np.mean(u) - 1152) < 30
    n = [LengthDist.parse("normal:512,128").sample(rng) for _ in range(5000)]
    assert abs(np.mean(n) - 512) < 8 and abs(np.std(n) - 128) < 8
    for bad in ("0", "-3", "10:5", "normal:5", "abc", "normal:0,1"):
        with pytest.raises(WorkloadError):
            LengthDist.parse(bad)


def test_durations():
    assert parse_duration("30s") == 30
    assert parse_duration("10m") == 600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("12") == 12
    for bad in ("", "-1", "10x", "s", "1h-"):
        with pytest.raises(WorkloadError):
            parse_duration(bad)


def test_mix():
    assert parse_mix("code=1,chat=3") == {"code": 0.25, "chat": 0.75}
    for bad in ("code=0,chat=0", "nope=1", "code=x", "code"):
        with pytest.raises(WorkloadError):
            parse_mix(bad)


def test_synthetic_prompt_length():
    rng = np.random.default_rng(0)
    p = synthetic_prompt("code", 300, rng)
    assert abs(len(p.text.split()) - 300) <= 1


def test_prompt_files(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "hello there", "kind": "code"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n'
    )
    ps = load_prompt_file(str(f))
    assert [p.kind for p in ps] == ["code", "chat"]
    g = tmp_path / "sg.json"
    g.write_text(
        '[{"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a"}]}]'
    )
    assert load_prompt_file(str(g))[0].text == "q1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(WorkloadError):
        load_prompt_file(str(bad))
    with pytest.raises(WorkloadError):
        load_prompt_file(str(tmp_path / "missing.jsonl"))


def test_a_bare_prompt_gets_no_invented_kind(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello there"}\n')
    assert [p.kind for p in load_prompt_file(str(f))] == [""]
