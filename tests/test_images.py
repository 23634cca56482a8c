"""Images as a kind of the workload (#61): synthetic PNGs of a set size sent as data URLs,
the server's counted tokens per image, and TTFT per image and per 1,000 image tokens."""

from __future__ import annotations

import json

import pytest
from helpers import tokmon

from tokmon.model.workloads.images import SIZES, data_url, png, png_size
from tokmon.sim.process import SimProcess
from tokmon.sim.server import SimConfig


def test_a_synthetic_png_is_a_png_of_its_size():
    import zlib

    b = png(256, seed=3)
    assert png_size(b) == (256, 256) and png(256, seed=3) == b
    assert zlib.decompressobj().decompress(b[b.index(b"IDAT") + 4 : -16])[:1] == b"\x00"
    assert data_url(64).startswith("data:image/png;base64,iVBORw0KGgo")
    with pytest.raises(ValueError):
        png(100)
    assert 512 in SIZES


def test_ttft_per_image_and_per_1000_image_tokens(tmp_path):
    """A 512×512 image is 19 × 19 = 361 patches of 28 pixels; each image token adds
    0.5 ms to the simulator's 20 ms TTFT: the image requests' TTFT is 200.5 ms, what the
    image adds per 1,000 image tokens 500 ms, against the text requests' TTFT."""
    cfg = SimConfig(schedule=(20.0, 5.0, 1), image_ms_per_token=0.5, seed=2)
    summ = tmp_path / "s.json"
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "-n", "60", "-c", "4", "--mix", "image=1,chat=1",
                   "--image-size", "512", "--max-tokens", "8", "--headless", "--no-gpu",
                   "--status-interval", "1h", "--summary-json", str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    a = json.loads(summ.read_text())["images"]["arms"]["default"]["512"]
    assert a["image_tokens_p50"] == 361 and a["per_1k_is"] == "added by the image"
    assert abs(a["ttft_ms_p50"] - (20 + 180.5)) < 4, a
    assert abs(a["ttft_ms_per_1k_image_tokens"] - 500.0) < 10, a
    assert "512×512: 361 image tokens" in r.stdout


def test_several_image_sizes_in_one_run_each_with_its_tokens_and_ttft(tmp_path):
    """``--image-size 256,1024``: the sizes sent in turn, half the images each; a 256-pixel
    image is 10 × 10 = 100 patches of 28 pixels, a 1024-pixel one 37 × 37 = 1,369; each
    image token adds 0.5 ms to the simulator's 20 ms TTFT: 70 and 704.5 ms."""
    cfg = SimConfig(schedule=(20.0, 5.0, 1), image_ms_per_token=0.5, seed=2)
    summ = tmp_path / "s.json"
    with SimProcess(cfg) as sim:
        r = tokmon("run", "--url", sim.url, "-n", "24", "-c", "2", "--mix", "image=1",
                   "--image-size", "256,1024", "--max-tokens", "4", "--headless", "--no-gpu",
                   "--status-interval", "1h", "--summary-json", str(summ))  # fmt: skip
    assert r.returncode == 0, r.stderr
    sizes = json.loads(summ.read_text())["images"]["arms"]["default"]
    assert sorted(sizes) == ["1024", "256"]
    assert sizes["256"]["requests"] == sizes["1024"]["requests"] == 12, sizes
    assert (sizes["256"]["image_tokens_p50"], sizes["1024"]["image_tokens_p50"]) == (100, 1369)
    assert abs(sizes["256"]["ttft_ms_p50"] - 70.0) < 4, sizes
    assert abs(sizes["1024"]["ttft_ms_p50"] - 704.5) < 8, sizes
    assert "256×256: 100 image tokens" in r.stdout and "1024×1024: 1369 image tokens" in r.stdout
    bad = tokmon("run", "--url", sim.url, "-n", "1", "--image-size", "256,300")
    assert bad.returncode == 2 and "--image-size: each of" in bad.stderr
    assert "Traceback" not in bad.stderr
