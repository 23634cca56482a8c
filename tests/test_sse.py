import pytest

from tokmon.engine.sse import SSEError, SSEParser


def feed_all(parts, **kw):
    p = SSEParser(**kw)
    out = []
    for part in parts:
        out += p.feed(part)
    return out + p.flush()


def test_simple_events():
    assert feed_all([b"data: a\n\ndata: b\n\n"]) == [b"a", b"b"]


def test_event_split_across_reads_at_every_byte():
    raw = b'data: {"x": 1}\n\ndata: [DONE]\n\n'
    for i in range(len(raw)):
        assert feed_all([raw[:i], raw[i:]]) == [b'{"x": 1}', b"[DONE]"]


def test_crlf_and_split_crlf():
    raw = b"data: a\r\n\r\ndata: b\r\n\r\n"
    for i in range(len(raw)):
        assert feed_all([raw[:i], raw[i:]]) == [b"a", b"b"], i


def test_comments_event_id_lines_ignored():
    raw = b": ping - 2025-01-01\n\nevent: message\nid: 7\ndata: x\n\nretry: 10\n\n"
    assert feed_all([raw]) == [b"x"]


def test_multiline_data_joined():
    assert feed_all([b"data: a\ndata: b\n\n"]) == [b"a\nb"]


def test_no_space_after_colon():
    assert feed_all([b"data:{}\n\n"]) == [b"{}"]


def test_final_event_without_blank_line_flushed():
    assert feed_all([b"data: a\n\ndata: last"]) == [b"a", b"last"]


def test_overlong_event_is_an_error():
    p = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 200)
