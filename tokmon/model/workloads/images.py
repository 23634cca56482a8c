"""Images as a kind of the workload (#61): synthetic PNGs of a set size, made here, sent as
data URLs in an ``image_url`` part beside the text (the OpenAI chat form every vision
server takes: vLLM, SGLang, llama.cpp's mtmd, TGI).

An image is made once per size and seed: a gradient with a pattern (so it is no blank
square a server might special-case), encoded as an 8-bit RGB PNG by the standard
library's zlib (no imaging library: a PNG is a signature, three chunks and a CRC each).
What it costs the server is its **image tokens**: the prompt tokens the server counted
less the text's (the text was built to an exact length, ``prompt_tokens_asked``).
"""

from __future__ import annotations

import base64
import struct
import zlib
from functools import lru_cache

import numpy as np

IMAGE = "image"  # the kind
SIZES = (64, 128, 256, 512, 768, 1024, 2048)  # the sizes tokmon makes, in pixels a side


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@lru_cache(maxsize=8)
def png(size: int, seed: int = 0) -> bytes:
    """A ``size`` × ``size`` RGB PNG: a gradient crossed by a seeded pattern."""
    if size not in SIZES:
        raise ValueError(f"an image is {', '.join(map(str, SIZES))} pixels a side")
    y, x = np.mgrid[0:size, 0:size]
    px = np.stack([x * 255 // size, y * 255 // size,
                   ((x // 8) * 7 + (y // 8) * 13 + seed * 31) & 255], axis=-1)  # fmt: skip
    rows = np.zeros((size, 1 + 3 * size), dtype=np.uint8)  # each row: filter 0, then RGB
    rows[:, 1:] = px.astype(np.uint8).reshape(size, 3 * size)
    raw = zlib.compress(rows.tobytes(), 6)
    head = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", head) + _chunk(b"IDAT", raw) + _chunk(b"IEND", b"")
    )


@lru_cache(maxsize=8)
def data_url(size: int, seed: int = 0) -> str:
    return "data:image/png;base64," + base64.b64encode(png(size, seed)).decode()


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG from its header, or None where it is not one."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)
