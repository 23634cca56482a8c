"""A fake ``pynvml`` module: implements the calls tokmon uses, and raises the real
NVMLError classes (from nvidia-ml-py) that real drivers raise."""

from __future__ import annotations

import types

import pynvml as real


class Mem:
    def __init__(self, used: int, total: int) -> None:
        self.used, self.total, self.free = used, total, total - used


class Util:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class Proc:
    def __init__(self, pid: int, mem: int) -> None:
        self.pid, self.usedGpuMemory = pid, mem


def make(
    n: int = 2,
    power_mw: int = 350_000,
    unsupported: tuple[str, ...] = (),
    lost: set[int] | None = None,
    no_library: bool = False,
) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU
    m.NVML_CLOCK_SM = real.NVML_CLOCK_SM
    m.NVMLError = real.NVMLError
    state = {"init": 0, "shutdown": 0}
    m.state = state
    lost = lost or set()

    def err(code: int) -> Exception:
        return real.NVMLError(code)

    def init() -> None:
        if no_library:
            raise err(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        state["init"] += 1

    def check(name: str, h: int) -> None:
        if h in lost:
            raise err(real.NVML_ERROR_GPU_IS_LOST)
        if name in unsupported:
            raise err(real.NVML_ERROR_NOT_SUPPORTED)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)
    m.nvmlDeviceGetCount = lambda: n
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlSystemGetDriverVersion = lambda: "580.65.06"
    m.nvmlSystemGetNVMLVersion = lambda: "13.580.65.06"
    m.nvmlDeviceGetName = lambda h: f"NVIDIA H200 #{h}"

    def f(name, value):
        def call(h, *a):
            check(name, h)
            return value(h) if callable(value) else value

        return call

    m.nvmlDeviceGetMemoryInfo = f("mem", lambda h: Mem((40 + h) * 2**30, 141 * 2**30))
    m.nvmlDeviceGetUtilizationRates = f("util", lambda h: Util(90 - 10 * h, 50))
    m.nvmlDeviceGetPowerUsage = f("power", power_mw)
    m.nvmlDeviceGetEnforcedPowerLimit = f("power_limit", 700_000)
    m.nvmlDeviceGetTemperature = f("temp", 60)
    m.nvmlDeviceGetClockInfo = f("clock", 1980)
    m.nvmlDeviceGetComputeRunningProcesses = f("procs", lambda h: [Proc(4242, 30 * 2**30)])
    return m
