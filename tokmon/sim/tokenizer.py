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


def pieces(text: str, token_bytes: int = 0) -> list[str]:
    """The text's tokens. ``token_bytes`` > 0: another rule, every ``token_bytes`` bytes
    of the UTF-8 text a token (as byte-level tokenizers do; no filler word is then one
    token, and exact lengths must be built from other units)."""
    if token_bytes > 0:
        raw = text.encode("utf-8")
        return [raw[i : i + token_bytes].decode("utf-8", "replace")
                for i in range(0, len(raw), token_bytes)]  # fmt: skip
    out: list[str] = []
    for m in _PIECES.finditer(text):
        p = m.group()
        if p[0].isalnum() or p[0] == "_":
            out.extend(p[i : i + 6] for i in range(0, len(p), 6))
        else:
            out.append(p)
    return out


def count_text(text: str, token_bytes: int = 0) -> int:
    return len(pieces(text, token_bytes))


def count_prompt(texts: list[str], chat: bool, token_bytes: int = 0) -> int:
    """Prompt tokens of a request: its texts (one per message for chat) as the server
    counts them, the template included."""
    n = BOS + sum(count_text(t, token_bytes) for t in texts)
    if chat:
        n += PER_MESSAGE * len(texts) + GENERATION
    return n


def token_ids(text: str, token_bytes: int = 0) -> list[int]:
    """Stable ids for /tokenize (the same piece, the same id)."""
    return [zlib.crc32(p.encode()) % 32000 for p in pieces(text, token_bytes)]
