"""Watch a GPU's engines while something runs: the JPEG decoder engine (NVJPG) and the SMs.

nvJPEG decodes either on the GPU's hardware JPEG engine (A100, H100 and later) or on its CUDA
cores (and partly the CPU); a decode rate alone does not say which. ``EngineWatch`` samples
NVML's JPG and GPU utilisation of one device on a thread while a ``with`` block runs, and
``summary()`` says what it saw, e.g. ``NVJPG busy 41% (peak 88%), SM 63%``, or why it saw
nothing (no NVML, a driver whose NVML has no JPG counter, no sample taken).

- ``summarise(jpg, sm)`` (pure): the line for lists of samples (percentages), ``None`` entries
  being samples the counter did not give.
- ``EngineWatch(uuid, every=0.1)``: NVML through ``ctypes`` (``libnvidia-ml.so.1``, which the
  driver installs; nothing to build or pip-install), the device found by its UUID (torch's
  ``get_device_properties(i).uuid``: CUDA's and NVML's device orders can differ). NVML is
  opened when the block starts and shut down when it ends. Never raises for NVML: what is
  missing becomes ``summary()``'s reason.
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence

NVML_SUCCESS = 0


def summarise(jpg: Sequence[int | None], sm: Sequence[int | None]) -> str:
    """The engines' line for the samples taken (module docstring). Pure."""
    jpg_seen = [v for v in jpg if v is not None]
    sm_seen = [v for v in sm if v is not None]
    if not jpg_seen and not sm_seen:
        return "engines not watched: no sample taken"
    parts = []
    if jpg_seen:
        mean = sum(jpg_seen) / len(jpg_seen)
        parts.append(f"NVJPG busy {mean:.0f}% (peak {max(jpg_seen)}%)"
                     + ("" if max(jpg_seen) else ": the hardware JPEG engine is idle, nvJPEG "
                        "decodes on the CUDA cores"))
    else:
        parts.append("NVJPG not reported by this driver's NVML")
    if sm_seen:
        parts.append(f"SM {sum(sm_seen) / len(sm_seen):.0f}%")
    return ", ".join(parts) + f" ({max(len(jpg), len(sm))} samples)"


class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class EngineWatch:
    """Sample one device's NVJPG and SM utilisation while the ``with`` block runs."""

    def __init__(self, uuid: str, every: float = 0.1):
        self.uuid = uuid
        self.every = every
        self.jpg: list[int | None] = []
        self.sm: list[int | None] = []
        self.reason = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: ctypes.CDLL | None = None
        self._handle = ctypes.c_void_p()

    def _open(self) -> None:
        """NVML initialised and the device found (``_nvml`` set), or ``reason`` says why not;
        an NVML initialised for nothing is shut down again."""
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as exc:
            self.reason = f"engines not watched: no NVML ({exc})"
            return
        name = self.uuid if self.uuid.startswith(("GPU-", "MIG-")) else f"GPU-{self.uuid}"
        if nvml.nvmlInit_v2() != NVML_SUCCESS:
            self.reason = "engines not watched: nvmlInit failed"
            return
        if nvml.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(self._handle)) != NVML_SUCCESS:
            self.reason = f"engines not watched: NVML knows no device {name}"
            nvml.nvmlShutdown()
            return
        self._nvml = nvml

    def _sample(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        util, period = ctypes.c_uint(), ctypes.c_uint()
        jpg_fn = getattr(nvml, "nvmlDeviceGetJpgUtilization", None)
        while not self._stop.is_set():
            jpg = None
            if jpg_fn is not None and jpg_fn(self._handle, ctypes.byref(util),
                                             ctypes.byref(period)) == NVML_SUCCESS:
                jpg = util.value
            rates = _Util()
            ok = nvml.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(rates)) == NVML_SUCCESS
            self.jpg.append(jpg)
            self.sm.append(rates.gpu if ok else None)
            self._stop.wait(self.every)

    def __enter__(self) -> EngineWatch:
        """Open NVML (each init is matched by a shutdown in ``__exit__``) and start sampling."""
        self._open()
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._sample, name="engine-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None and (self._thread is None or not self._thread.is_alive()):
            self._nvml.nvmlShutdown()  # NVML counts its inits: one shutdown for ours
        self._nvml = None

    def summary(self) -> str:
        """What the watch saw, or why it saw nothing."""
        return self.reason or summarise(self.jpg, self.sm)
