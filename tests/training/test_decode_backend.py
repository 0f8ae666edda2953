"""training.decode_backend: the decoder named, and its rate measured. No GPU here: the CUDA
path is the same code with ``device`` cuda; the CPU fallback is what these tests run."""
import pytest
import torch

from training.decode_backend import PIL_CPU, backend_name, probe


@pytest.mark.parametrize("jpegs, on_device, device, name", [
    (True, True, "cuda", "nvJPEG (torchcodec on cuda)"),
    (True, True, "cpu", "torchcodec on the cpu"),
    (True, False, "cuda", PIL_CPU),
    (False, True, "cuda", "none (synthetic data)"),
])
def test_the_settings_name_the_decoder(jpegs, on_device, device, name):
    assert backend_name(jpegs, on_device, device) == name


def test_a_device_decoder_that_fails_falls_back_to_pil_on_the_cpu_and_says_why():
    def broken(data, device):
        raise RuntimeError("nvJPEG: NVJPEG_STATUS_ARCH_MISMATCH")

    result = probe(torch.device("cpu"), decoder=broken, seconds=0.2)
    assert result.backend == PIL_CPU and result.rate > 0
    assert "RuntimeError: nvJPEG: NVJPEG_STATUS_ARCH_MISMATCH" in result.fallback_reason
    line = result.line()
    assert line.startswith(f"decode backend: {PIL_CPU}, ")
    assert " img/s on 224 px JPEGs (device decoder unusable: " in line


def test_a_working_decoder_is_named_with_its_rate():
    pytest.importorskip("torchcodec")
    result = probe(torch.device("cpu"), seconds=0.2)
    assert result.backend == "torchcodec on the cpu" and result.rate > 0 and not result.fallback_reason
