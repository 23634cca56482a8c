"""A recording read ahead in a thread, and its batches parsed on more: the same items in
the same order, an error raised where it happened, and a consumer that stops early stops
the threads."""

import threading

import pytest

from tokmon.recording.prefetch import CHUNK, map_ahead, read_ahead


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


def test_mapped_items_keep_their_place_among_the_others():
    made_in: set[str] = set()

    def double(x: int) -> int:
        made_in.add(threading.current_thread().name)
        return 2 * x

    items = list(range(500))
    got = list(map_ahead(iter(items), double, lambda x: x % 3 == 0, workers=2, depth=3))
    assert got == [2 * x if x % 3 == 0 else x for x in items]
    assert made_in and all(n.startswith("tokmon-parse") for n in made_in)
    assert list(map_ahead(iter([]), double, bool)) == []


def test_a_mapping_error_is_raised_in_its_items_place():
    def fn(x: int) -> int:
        if x == 60:
            raise ValueError("bad batch")
        return x

    got = []
    with pytest.raises(ValueError, match="bad batch"):
        for x in map_ahead(iter(range(100)), fn, lambda x: x % 2 == 0):
            got.append(x)
    assert got == list(range(60))


def test_an_error_in_the_source_of_a_map_comes_after_every_item_before_it():
    def source():
        yield from range(50)
        raise ValueError("cut file")

    got = []
    with pytest.raises(ValueError, match="cut file"):
        for x in map_ahead(source(), lambda x: -x, lambda x: x % 2 == 0, depth=8):
            got.append(x)
    assert got == [-x if x % 2 == 0 else x for x in range(50)]


def test_stopping_a_map_early_closes_its_source_and_its_threads():
    closed = threading.Event()

    def source():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    it = map_ahead(source(), lambda x: x + 1, lambda x: True, workers=2, depth=2)
    assert [next(it) for _ in range(10)] == list(range(1, 11))
    it.close()
    assert closed.is_set()
    assert not any(t.name.startswith("tokmon-parse") for t in threading.enumerate())
