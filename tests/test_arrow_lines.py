"""Request lines read by Arrow's JSON reader give exactly what the dict path gives: the
same rows, the same columns, the same vocabulary, the same lines counted corrupt."""

import dataclasses

import numpy as np
import pytest
from test_table import varied

from tokmon.model.data.table import RequestTable
from tokmon.recording import arrow_lines
from tokmon.recording import reader as reader_mod
from tokmon.recording.writer import Recorder

pytest.importorskip("pyarrow")


def lines_of(tmp_path, recs, name="r.jsonl") -> list[bytes]:
    """The request lines the real writer writes for ``recs``."""
    path = tmp_path / name
    w = Recorder(str(path), chunks=True)
    w.open({"settings": {"arms": [{"name": "plain"}, {"name": "spec"}]}}, 0)
    w.records(recs)
    w.close()
    return [ln for ln in path.read_bytes().split(b"\n") if ln.startswith(b'{"k":"r",')]


def ascii_records(n: int, seed: int):
    # (the error text of ``varied`` is not ASCII: such a batch is left to the dict path)
    return [dataclasses.replace(r, error=r.error.replace("\u00e9", "e")) for r in varied(n, seed)]


# the keys Arrow is told a batch holds (``arrow_lines.parse``): every key (None), none
# learned yet, some (a line then holds keys not learned), and more than the lines hold
KEYS = {
    "every key": None,
    "none learned": set(),
    "some learned": {"id", "arm", "o", "ts", "te", "n"},
    "more learned": set(arrow_lines._FIELDS),
}


def read_both(batch: list[bytes], monkeypatch) -> tuple[tuple, tuple]:
    """The reader's columns of ``batch`` without Arrow, and with it, equal however many
    keys Arrow was told of (checked here)."""
    out = []
    for use in ("dict", *KEYS):
        with monkeypatch.context() as m:
            if use == "dict":
                m.setattr(arrow_lines, "pa", None)
            keys = KEYS.get(use)
            vocab: dict = {}
            parts: list = []
            mask = reader_mod._columns(
                b"\n".join(batch),
                len(batch),
                vocab,
                parts,
                keys=None if keys is None else set(keys),
            )
            out.append((mask, parts[0] if parts else None, vocab))
    for other in out[2:]:
        assert_same(out[1], other)
    return out[1], out[0]


def assert_same(a, b) -> None:
    (ma, ta, va), (mb, tb, vb) = a, b
    assert ma.tolist() == mb.tolist()
    assert va == vb
    assert (ta is None) == (tb is None)
    if ta is None:
        return
    assert ta.cols.keys() == tb.cols.keys()
    for k in ta.cols:
        assert ta.cols[k].dtype == tb.cols[k].dtype, k
        assert np.array_equal(ta.cols[k], tb.cols[k], equal_nan=True), k
    assert ta.gaps == tb.gaps


def test_a_written_batch_is_read_by_arrow_and_equals_the_dict_path(tmp_path, monkeypatch):
    batch = lines_of(tmp_path, ascii_records(2000, seed=5))
    fast = arrow_lines.read(b"\n".join(batch), len(batch), {})
    assert fast is not None, "a clean batch must take the columnar path"
    slow = RequestTable.from_lines([reader_mod.load_line(b) for b in batch], {})
    for k in slow.cols:
        assert np.array_equal(fast.cols[k], slow.cols[k], equal_nan=True), k
    assert fast.gaps == slow.gaps and fast.gaps is not None  # (chunk gaps recorded)
    assert fast.records_at(np.arange(fast.n)) == ascii_records(2000, seed=5)
    a, b = read_both(batch, monkeypatch)
    assert_same(a, b)


def test_new_strings_are_numbered_by_first_row_whatever_the_keys_of_their_lines(
    tmp_path, monkeypatch
):
    # two shapes of line (a key left out at its default) with new kinds interleaved: the
    # dict path groups lines by their keys, Arrow reads them in order; same codes
    recs = ascii_records(40, seed=7)
    for i, r in enumerate(recs):
        recs[i] = dataclasses.replace(r, kind=f"k{i % 5}", tokens_estimated=i % 2 == 0)
    batch = lines_of(tmp_path, recs)
    a, b = read_both(batch, monkeypatch)
    assert a[2]["kind"][:6] == ["", "k0", "k1", "k2", "k3", "k4"]
    assert_same(a, b)


GOOD = (
    b'{"k":"r","id":7,"arm":"plain","o":"ok","ts":100,"te":900,"kind":"code","ttft":12.5,'
    b'"e2e":80.25,"n":4,"tpot":3.5,"dec":285.7,"fr":"stop","hs":200}'
)


def edit(old: bytes, new: bytes) -> bytes:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


HOSTILE = {
    "explicit null where a count belongs": edit(b'"n":4', b'"n":null'),
    "explicit null where a time may be missing": edit(b'"ttft":12.5', b'"ttft":null'),
    "explicit null string": edit(b'"kind":"code"', b'"kind":null'),
    "NaN": edit(b'"ttft":12.5', b'"ttft":NaN'),
    "Infinity": edit(b'"e2e":80.25', b'"e2e":Infinity'),
    "-Infinity": edit(b'"e2e":80.25', b'"e2e":-Infinity'),
    "a number too big for a double": edit(b'"e2e":80.25', b'"e2e":1e400'),
    "a key twice": edit(b'"arm":"plain"', b'"arm":"plain","arm":"spec"'),
    "a float where an int belongs": edit(b'"n":4', b'"n":4.5'),
    "an exponent where an int belongs": edit(b'"id":7', b'"id":7e0'),
    "text where a number belongs": edit(b'"n":4', b'"n":"4"'),
    "a number where text belongs": edit(b'"kind":"code"', b'"kind":5'),
    "a bool where a number belongs": edit(b'"ttft":12.5', b'"ttft":true'),
    "a number where a bool belongs": edit(b'"hs":200', b'"hs":200,"w":1'),
    "an id past int64": edit(b'"id":7', b'"id":99999999999999999999'),
    "a count past int32": edit(b'"n":4', b'"n":3000000000'),
    "a negative count": edit(b'"n":4', b'"n":-4'),
    "an impossible time": edit(b'"te":900', b'"te":50'),
    "no end time": edit(b',"te":900', b""),
    "two objects on a line": GOOD + GOOD,
    "an unknown key holding an object": edit(b'"hs":200', b'"hs":200,"zz":{"a":[1,{"b":2}]}'),
    "a lone surrogate": edit(b'"fr":"stop"', b'"fr":"\\ud800"'),
    "an escaped accent": edit(b'"fr":"stop"', b'"fr":"caf\\u00e9"'),
    "raw UTF-8": edit(b'"fr":"stop"', '"fr":"café"'.encode()),
    "bytes that are not UTF-8": edit(b'"fr":"stop"', b'"fr":"\xff\xfe"'),
    "a cut line": GOOD[:60],
    "an object in an array": b'{"k":"r",' + b"[1,2]}",
    "bad gaps": edit(b'"hs":200', b'"hs":200,"g":5'),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_reads_the_same_with_arrow_and_without(case, monkeypatch):
    batch = [GOOD, HOSTILE[case], edit(b'"id":7', b'"id":8')]
    a, b = read_both(batch, monkeypatch)
    assert_same(a, b)
    assert a[0][0] and a[0][2]  # the good lines around it are kept


def test_a_line_longer_than_a_block_is_read_by_arrow(tmp_path, monkeypatch):
    """Arrow reads 1 MiB blocks of whole lines: a longer line (a server's long error
    text) is read with bigger blocks, by Arrow still, not left to the dict path."""
    recs = ascii_records(50, seed=9)
    recs[20] = dataclasses.replace(recs[20], outcome="http", error="x" * (3 << 20))
    batch = lines_of(tmp_path, recs)
    assert max(map(len, batch)) > 1 << 20
    fast = arrow_lines.read(b"\n".join(batch), len(batch), {})
    assert fast is not None
    assert fast.records_at(np.arange(fast.n)) == recs
    a, b = read_both(batch, monkeypatch)
    assert_same(a, b)


def test_keys_are_learned_and_a_batch_with_a_new_key_is_read_again_whole(tmp_path):
    recs = ascii_records(300, seed=11)
    batch = lines_of(tmp_path, recs)
    keys: set[str] = set()
    first = arrow_lines.read(b"\n".join(batch), len(batch), {}, keys)
    assert first is not None
    held = {k for ln in batch for k in reader_mod.load_line(ln)} - {"k"}
    assert keys == held  # (learned from the batch read with every key)
    # a later batch of the same keys is read with those only, and gives the same columns
    again = arrow_lines.read(b"\n".join(batch), len(batch), {}, keys)
    assert again is not None and keys == held
    for k in first.cols:
        assert np.array_equal(first.cols[k], again.cols[k], equal_nan=True), k
    # a line with a key not learned (a count of stalls) is read again with every key
    few = {"id", "arm", "o", "ts", "te"}
    lines = [edit(b'"hs":200', b'"hs":200,"st":3'), GOOD]
    got = arrow_lines.read(b"\n".join(lines), 2, {}, few)
    assert got is not None and got.cols["stalls"].tolist() == [3, 0]
    assert "st" in few
