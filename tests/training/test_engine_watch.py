"""training.engine_watch: what scripts/gpu-smoke says about the GPU's JPEG engine while nvJPEG
decodes (the NVML sampling itself needs a GPU)."""
from __future__ import annotations

from training.engine_watch import EngineWatch, summarise


def test_a_busy_engine_is_reported_with_its_mean_and_peak():
    assert summarise([20, 60, None], [50, 70, 90]) == "NVJPG busy 40% (peak 60%), SM 70% (3 samples)"


def test_an_idle_engine_says_nvjpeg_decodes_on_the_cuda_cores():
    line = summarise([0, 0], [80, 90])
    assert line.startswith("NVJPG busy 0% (peak 0%): the hardware JPEG engine is idle")
    assert "CUDA cores" in line


def test_a_driver_without_the_counter_and_no_samples_are_named():
    assert summarise([None, None], [10, 30]).startswith("NVJPG not reported by this driver's NVML, SM 20%")
    assert summarise([], []) == "engines not watched: no sample taken"


def test_without_nvml_the_watch_names_why_and_never_raises():
    watch = EngineWatch("00000000-0000-0000-0000-000000000000", every=0.01)
    with watch:
        pass
    assert watch.summary().startswith("engines not watched:")
