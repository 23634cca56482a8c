"""A recording read ahead in a thread: the same items in the same order, the reader's
error raised where it happened, and a consumer that stops early stops the reader."""

import threading

import pytest

from tokmon.recording.prefetch import CHUNK, read_ahead


def test_items_come_in_order():
    n = CHUNK * 7 + 3
    assert list(read_ahead(iter(range(n)), depth=2)) == list(range(n))
    assert list(read_ahead(iter([]))) == []


def test_an_error_is_raised_after_the_items_before_it():
    def source():
        yield from range(1000)
        raise ValueError("cut file")

    got = []
    with pytest.raises(ValueError, match="cut file"):
        for x in read_ahead(source()):
            got.append(x)
    assert got == list(range(1000))


def test_stopping_early_closes_the_reader_and_its_source():
    closed = threading.Event()

    def source():
        try:
            i = 0
            while True:  # endless: only closing stops it
                yield i
                i += 1
        finally:
            closed.set()

    it = read_ahead(source(), depth=2)
    assert [next(it) for _ in range(10)] == list(range(10))
    it.close()  # joins the reader
    assert closed.is_set()
    assert not any(t.name == "tokmon-read-ahead" for t in threading.enumerate())
