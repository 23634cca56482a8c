"""A recording read ahead in a thread while the fold takes what was read.

Inflating a part (zlib) and parsing its request lines (Arrow's JSON reader) run without
the GIL, so on a machine with two cores a report's reading and folding overlap: the
fold waits on the file only when the reader is behind. The items keep their order; an
error in the reader is raised in the reader's place, where the fold takes the next item.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

CHUNK = 512  # items handed over at a time (a queue operation per fact would cost more)
DEPTH = 8  # chunks read ahead at most: a few batches of requests in memory, not a file


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def read_ahead(items: Iterator[T], depth: int = DEPTH, chunk: int = CHUNK) -> Iterator[T]:
    """``items`` as they come, made in a thread up to ``depth`` chunks of ``chunk`` items
    ahead (a chunk of one: items that are each much work, handed on as soon as made).
    Closing this generator (a consumer that stops early) stops the thread and closes
    ``items``."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x: object) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        got: list[T] = []
        try:
            for x in items:
                got.append(x)
                if len(got) >= chunk:
                    if not put(got):
                        return
                    got = []
            if got and not put(got):
                return
            put(_END)
        except BaseException as e:  # handed to the consumer, raised where it reads
            if not got or put(got):  # (the items read before it first)
                put(_Failed(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=run, name="tokmon-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            got = q.get()
            if got is _END:
                return
            if isinstance(got, _Failed):
                raise got.exc
            yield from got  # type: ignore[misc]
    finally:
        stop.set()
        reader.join()


def map_ahead(
    items: Iterator[T],
    fn: Callable[[T], T],
    pick: Callable[[T], bool],
    workers: int = 2,
    depth: int = 3,
) -> Iterator[T]:
    """``items`` in their order, those ``pick`` chooses replaced by ``fn`` of them, made on
    ``workers`` threads up to ``depth`` ahead of the consumer (``fn`` is work that runs
    without the GIL: a batch's parse, while the consumer folds the batch before). An
    error in ``fn`` is raised in its item's place, and one in ``items`` after the items
    before it. Closing this generator cancels what was not begun, waits for what was,
    and closes ``items``."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="tokmon-parse")
    pending: deque[object] = deque()  # futures, and the items not picked between them
    running = 0

    def front() -> T:
        nonlocal running
        y = pending.popleft()
        if isinstance(y, Future):
            running -= 1
            return y.result()  # type: ignore[no-any-return]
        return y  # type: ignore[return-value]

    try:
        while True:
            try:
                x = next(items)
            except StopIteration:
                break
            except BaseException:
                while pending:  # (the items before an error in ``items`` first)
                    yield front()
                raise
            if pick(x):
                pending.append(pool.submit(fn, x))
                running += 1
            else:
                pending.append(x)
            while running > depth:
                yield front()
        while pending:
            yield front()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(items, "close", None)
        if close is not None:
            close()
