"""GPU sampling through NVML (``pynvml`` from nvidia-ml-py), or a DCGM exporter."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from tokmon.probes.base import Sampler

GIB = 1024**3


class NvmlProbe(Sampler):
    """Per GPU: memory used/total, GPU and memory utilization, power and limit,
    temperature, SM clock; and the server process's GPU memory when it is local."""

    name = "gpu"

    def __init__(
        self,
        interval: float = 0.5,
        gpus: list[int] | None = None,
        server_pid: int | None = None,
        nvml: ModuleType | None = None,
    ) -> None:
        super().__init__(interval)
        self.gpus = gpus
        self.server_pid = server_pid
        self._nvml = nvml
        self._handles: list[tuple[int, Any]] = []
        self._ready = False
        self._failed: str | None = None
        self.info: dict[str, Any] = {}

    def init(self) -> None:
        """NVML is initialised lazily, on the first sample, and only once."""
        if self._ready or self._failed:
            return
        try:
            nv = self._nvml or importlib.import_module("pynvml")
            self._nvml = nv
            nv.nvmlInit()
        except ImportError:
            self._failed = "no NVML library (pip install nvidia-ml-py)"
            return
        except Exception as e:
            msg = _nvml_msg(e)
            self._failed = (
                "no GPU (NVML library not found)"
                if "Library" in msg or "library" in msg
                else f"no GPU: {msg}"
            )
            return
        try:
            n = nv.nvmlDeviceGetCount()
            ids = self.gpus if self.gpus is not None else list(range(n))
            bad = [i for i in ids if i < 0 or i >= n]
            if bad:
                self._failed = f"no GPU {bad[0]} (this host has {n})"
                return
            self._handles = [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in ids]
            self.info = {
                "driver": _s(_try(nv.nvmlSystemGetDriverVersion)),
                "nvml": _s(_try(nv.nvmlSystemGetNVMLVersion)),
                "gpus": [_s(_try(nv.nvmlDeviceGetName, h)) for _, h in self._handles],
            }
        except Exception as e:
            self._failed = f"NVML error: {_nvml_msg(e)}"
            return
        if not self._handles:
            self._failed = "no GPU on this host"
            return
        self._ready = True

    def sample(self) -> dict[str, Any]:
        self.init()
        if not self._ready:
            return {"gpu_note": self._failed or "no GPU"}
        nv = self._nvml
        assert nv is not None
        devices = []
        for i, h in self._handles:
            d: dict[str, Any] = {"index": i}
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not _NA:
                d["mem_used_gib"] = mem.used / GIB
                d["mem_total_gib"] = mem.total / GIB
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            if util is not _NA:
                d["util"] = float(util.gpu)
                d["mem_util"] = float(util.memory)
            p = _try(nv.nvmlDeviceGetPowerUsage, h)
            if p is not _NA:
                d["power_w"] = p / 1000.0
            pl = _try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            if pl is not _NA:
                d["power_limit_w"] = pl / 1000.0
            t = _try(nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
            if t is not _NA:
                d["temp_c"] = float(t)
            c = _try(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1))
            if c is not _NA:
                d["sm_clock_mhz"] = float(c)
            if self.server_pid is not None:
                procs = _try(nv.nvmlDeviceGetComputeRunningProcesses, h)
                if procs is not _NA:
                    for pr in procs:
                        if getattr(pr, "pid", None) == self.server_pid and pr.usedGpuMemory:
                            d["server_mem_gib"] = pr.usedGpuMemory / GIB
            lost = d.pop("_lost", None)
            if lost:
                d["note"] = "GPU lost"
            devices.append(d)
        return aggregate(devices)

    def close(self) -> None:
        if self._ready and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._ready = False


def gpu_memory_used_gib(nvml: ModuleType | None = None) -> float | None:
    """GPU memory in use on every GPU of this host, now (None: no NVML, no GPU). For a
    managed server's restart: the next one starts once the last one's memory is free."""
    probe = NvmlProbe(1.0, nvml=nvml)
    try:
        used = probe.sample().get("gpu_devices") or []
        vals = [d["mem_used_gib"] for d in used if isinstance(d, dict) and "mem_used_gib" in d]
        return float(sum(vals)) if vals else None
    except Exception:
        return None
    finally:
        probe.close()


def pid_listening_on(url: str) -> int | None:
    """The local process that listens on the URL's port (for the server's GPU memory)."""
    from urllib.parse import urlparse

    import psutil

    u = urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except (psutil.Error, OSError):
        return None
    return None


def aggregate(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """Neutral GPU fields over the selected devices (means of rates, sums of amounts)."""
    out: dict[str, Any] = {"gpu_devices": devices}

    def vals(k: str) -> list[float]:
        return [d[k] for d in devices if d.get(k) is not None]

    if u := vals("util"):
        out["gpu_util"] = sum(u) / len(u)
    if m := vals("mem_used_gib"):
        out["gpu_mem_used_gib"] = sum(m)
        tot = vals("mem_total_gib")
        if tot and sum(tot) > 0:
            out["gpu_mem_total_gib"] = sum(tot)
            out["gpu_mem_pct"] = 100.0 * sum(m) / sum(tot)
    if p := vals("power_w"):
        out["gpu_power_w"] = sum(p)
    if pl := vals("power_limit_w"):
        out["gpu_power_limit_w"] = sum(pl)
    if t := vals("temp_c"):
        out["gpu_temp_c"] = max(t)
    if c := vals("sm_clock_mhz"):
        out["gpu_sm_clock_mhz"] = sum(c) / len(c)
    if s := vals("server_mem_gib"):
        out["gpu_server_mem_gib"] = sum(s)
    if not any(k in out for k in ("gpu_util", "gpu_mem_used_gib", "gpu_power_w")):
        out["gpu_note"] = "GPU fields not supported"
    return out


class _NAType:
    def __repr__(self) -> str:
        return "n/a"


_NA: Any = _NAType()


def _try(fn: Any, *args: Any) -> Any:
    """Call an NVML function; 'not supported' and friends are n/a, never an error."""
    try:
        return fn(*args)
    except Exception:
        return _NA


def _s(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return None if v is _NA else v


def _nvml_msg(e: Exception) -> str:
    try:
        return str(e) or type(e).__name__
    except Exception:
        return type(e).__name__


DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("util", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_gib", 1 / 1024),  # MiB
    "DCGM_FI_DEV_FB_FREE": ("mem_free_gib", 1 / 1024),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
}


def dcgm_devices(text: str, gpus: list[int] | None = None) -> list[dict[str, Any]]:
    """Map a DCGM exporter's exposition to the NVML probe's per-device fields."""
    from prometheus_client.parser import text_string_to_metric_families

    by_gpu: dict[int, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            f = DCGM_FIELDS.get(s.name)
            if f is None:
                continue
            try:
                idx = int(s.labels.get("gpu", "0"))
            except ValueError:
                continue
            if gpus is not None and idx not in gpus:
                continue
            d = by_gpu.setdefault(idx, {"index": idx})
            d[f[0]] = float(s.value) * f[1]
    for d in by_gpu.values():
        if "mem_used_gib" in d and "mem_free_gib" in d:
            d["mem_total_gib"] = d["mem_used_gib"] + d.pop("mem_free_gib")
    return [by_gpu[k] for k in sorted(by_gpu)]


class DcgmProbe(Sampler):
    """The same fields from a DCGM exporter on another host (``--dcgm-url``)."""

    name = "gpu"

    def __init__(self, url: str, interval: float = 1.0, gpus: list[int] | None = None) -> None:
        super().__init__(interval)
        self.url = url
        self.gpus = gpus
        self._reported = False
        self._client: Any = None

    def sample(self) -> dict[str, Any]:
        import httpx

        from tokmon.bodies import fetch

        if self._client is None:
            self._client = httpx.Client(timeout=2.0, trust_env=False)
        try:
            r = fetch(self._client, "GET", self.url)
            r.raise_for_status()
        except (httpx.HTTPError, ValueError) as e:
            if not self._reported:
                self._reported = True
                self.event(
                    "probe", f"DCGM exporter not available at {self.url}: {type(e).__name__}"
                )
            return {"gpu_note": "DCGM exporter not answering"}
        devices = dcgm_devices(r.text, self.gpus)
        if not devices:
            return {"gpu_note": "no DCGM GPU fields"}
        return aggregate(devices)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
