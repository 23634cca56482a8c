"""The simulator's tokenizer: a fixed rule, not a vocabulary, so that prompt tokens are not
words (as a real model's are not) and an exact-length workload has something to get right.

A run of letters and digits costs one token per six characters (``latency`` is two, ``the``
one), every other non-space character one; the text starts with a BOS token, and a chat
request adds four tokens per message (role markers) and three for the assistant's turn.
"""

from __future__ import annotations

import re
import zlib

_PIECES = re.compile(r"\w+|[^\w\s]")
BOS = 1  # tokens
BOS_ID = 1  # its id
PER_MESSAGE = 4
GENERATION = 3


def pieces(text: str) -> list[str]:
    out: list[str] = []
    for m in _PIECES.finditer(text):
        p = m.group()
        if p[0].isalnum() or p[0] == "_":
            out.extend(p[i : i + 6] for i in range(0, len(p), 6))
        else:
            out.append(p)
    return out


def count_text(text: str) -> int:
    return len(pieces(text))


def count_prompt(texts: list[str], chat: bool) -> int:
    """Prompt tokens of a request: its texts (one per message for chat) as the server
    counts them, the template included."""
    n = BOS + sum(count_text(t) for t in texts)
    if chat:
        n += PER_MESSAGE * len(texts) + GENERATION
    return n


def token_ids(text: str) -> list[int]:
    """Stable ids for /tokenize (the same piece, the same id)."""
    return [zlib.crc32(p.encode()) % 32000 for p in pieces(text)]
