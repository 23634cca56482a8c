"""The simulator's prefix cache: like vLLM's automatic prefix caching, in whole blocks of
16 tokens, each block known by a hash of everything up to its end (so a block is reused
only after the same prefix), kept least-recently-used first out."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from tokmon.sim.tokenizer import pieces

BLOCK = 16


class PrefixCache:
    def __init__(self, blocks: int = 8192) -> None:
        self.capacity = blocks
        self.blocks: OrderedDict[bytes, None] = OrderedDict()

    def lookup(self, texts: list[str], prompt_tokens: int) -> int:
        """Tokens of this prompt found cached (whole blocks from its start; never the
        last token, which is always computed, as in vLLM), and its blocks cached from now."""
        toks = [p for t in texts for p in ("<m>", *pieces(t))]  # (a mark per message)
        h = hashlib.blake2b(digest_size=16)
        hit = 0
        missed = False
        for i in range(0, min(len(toks), prompt_tokens - 1) // BLOCK * BLOCK, BLOCK):
            h.update("\x1f".join(toks[i : i + BLOCK]).encode())
            key = h.copy().digest()
            if not missed and key in self.blocks:
                hit += BLOCK
                self.blocks.move_to_end(key)
            else:
                missed = True
                self.blocks[key] = None
                if len(self.blocks) > self.capacity:
                    self.blocks.popitem(last=False)
        return hit
