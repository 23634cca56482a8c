"""Probes: the GPU (NVML or DCGM), the host (psutil), the server's own /metrics.

Each runs on its own thread on a drift-free schedule and offers ``latest()`` (a flat
dict of neutral fields); a missing library, GPU or endpoint is "not available", never a
crash. Samples carry the same monotonic clock as request records.
"""
