"""What an image costs the server's prefill (#61): a registered judgment.

Per arm and image size, whole run, of its counted requests that ended ok: the image
tokens the server counted (its prompt tokens less those the text was built to have),
TTFT p50, and **the TTFT of 1,000 image tokens**: where the run also sent text alone,
(TTFT p50 of the image requests − TTFT p50 of the text ones) per 1,000 image tokens —
what the images add; else the whole TTFT per 1,000 image tokens, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokmon.model.contract.registry import PerArm, register
from tokmon.model.data.table import RequestTable
from tokmon.model.statistics.sketch import Quantiles


def _q() -> Quantiles:
    return Quantiles(np.float64)


@dataclass
class _Size:
    ttft: Quantiles = field(default_factory=_q)
    tokens: Quantiles = field(default_factory=_q)


@dataclass
class _Arm:
    sizes: dict[int, _Size] = field(default_factory=dict)
    # requests without an image, from the run's first (kept only once images came, a
    # live run's batches and a replay's stretches kept other text requests)
    text_ttft: Quantiles = field(default_factory=_q)


@dataclass(frozen=True, slots=True)
class ImageCost:
    arm: str
    px: int
    requests: int
    tokens_p50: float | None
    ttft_p50: float | None
    per_1k_ms: float | None  # TTFT per 1,000 image tokens
    added: bool  # per_1k_ms is what the images add (a text-only TTFT to subtract)

    def text(self) -> str:
        tok = "—" if self.tokens_p50 is None else f"{self.tokens_p50:.0f}"
        ttft = "—" if self.ttft_p50 is None else f"{self.ttft_p50:.0f} ms"
        out = f"{self.arm} {self.px}×{self.px}: {tok} image tokens, TTFT p50 {ttft}"
        if self.per_1k_ms is not None:
            what = "added by the image" if self.added else "of the whole TTFT"
            out += f" · {self.per_1k_ms:.1f} ms per 1,000 image tokens ({what})"
        return out + f" · {self.requests} requests"


@dataclass(frozen=True, slots=True)
class ImagesView:
    costs: tuple[ImageCost, ...]

    def panel_lines(self) -> tuple[str, ...]:
        return ("images (whole run, the server's counted tokens):",
                *("  " + c.text() for c in self.costs))  # fmt: skip


@register
class Images(PerArm[_Arm]):
    name = "images"
    state = _Arm

    def add(self, a: _Arm, tb: RequestTable, sel: np.ndarray) -> None:
        c = tb.cols
        shows = ~np.isnan(c["image_px"][sel])
        t = c["ttft_ms"][sel[~shows]]
        a.text_ttft.extend(t[~np.isnan(t)])
        img = sel[shows]
        for p in np.unique(c["image_px"][img]).tolist():
            at = img[c["image_px"][img] == p]
            s = a.sizes.setdefault(int(p), _Size())
            t = c["ttft_ms"][at]
            s.ttft.extend(t[~np.isnan(t)])
            n = c["prompt_tokens"][at] - c["prompt_tokens_asked"][at]
            s.tokens.extend(n[~np.isnan(n) & (n > 0)])

    def view(self, now: int, reads: dict[str, Any]) -> ImagesView | None:
        out = []
        for arm, a in self.arms.items():
            base = a.text_ttft.median()
            for px, s in sorted(a.sizes.items()):
                tok, ttft = s.tokens.median(), s.ttft.median()
                per = None
                if tok and ttft is not None:
                    per = ((ttft - base) if base is not None else ttft) / tok * 1000.0
                out.append(ImageCost(arm, px, len(s.ttft), tok, ttft, per, base is not None))
        return ImagesView(tuple(out)) if out else None

    def figures(self, v: ImagesView) -> dict[str, Any]:
        figures: dict[str, Any] = {"arms": {}}
        for c in v.costs:
            figures["arms"].setdefault(c.arm, {})[str(c.px)] = {
                "requests": c.requests,
                "image_tokens_p50": c.tokens_p50,
                "ttft_ms_p50": c.ttft_p50,
                "ttft_ms_per_1k_image_tokens": c.per_1k_ms,
                "per_1k_is": "added by the image" if c.added else "the whole TTFT",
            }
        return figures
