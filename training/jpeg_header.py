"""What a JPEG's header says about its colour coding, read without decoding it.

nvJPEG decodes YCbCr and grayscale JPEGs; a CMYK or YCCK one (4 components: ImageNet holds
~22) or an Adobe RGB-coded one (3 components, Adobe transform 0) is not what its colour
conversion expects, and it may return wrong colours instead of an error, which nothing
would notice. ``needs_cpu_decode`` tells those apart so that the device path decodes them
with PIL on the CPU (``training.device_augment``).

The walk follows the markers' segment lengths from SOI to the first frame header (SOFn), so
an EXIF thumbnail (a whole JPEG inside APP1) is skipped, not mistaken for the image.
"""

from __future__ import annotations

from typing import NamedTuple

# SOF0..SOF15 less DHT (C4), JPG (C8) and DAC (CC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})


class JpegColour(NamedTuple):
    """The frame's component count and the Adobe APP14 transform (None: no Adobe marker)."""

    components: int
    adobe_transform: int | None


def colour_coding(data) -> JpegColour | None:
    """The colour coding of JPEG bytes (``bytes``, ``memoryview`` or a 1-D uint8 numpy array);
    None when they do not start as a JPEG or end before a frame header."""
    buf = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    n = len(buf)
    if n < 4 or buf[0] != 0xFF or buf[1] != 0xD8:
        return None
    adobe: int | None = None
    i = 2
    while i + 3 < n:
        if buf[i] != 0xFF:
            return None  # not at a marker: malformed
        marker = buf[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data before any frame header
            return None
        length = (buf[i + 2] << 8) | buf[i + 3]
        if length < 2:
            return None
        if marker in _SOF:
            if i + 9 >= n:
                return None
            return JpegColour(buf[i + 9], adobe)
        if marker == 0xEE and length >= 14 and bytes(buf[i + 4:i + 9]) == b"Adobe":
            adobe = buf[i + 15]
        i += 2 + length
    return None


def needs_cpu_decode(data) -> bool:
    """True for a JPEG nvJPEG cannot be trusted with: 4 components (CMYK, YCCK) or 3 stored
    as RGB (Adobe transform 0). Grayscale and YCbCr (and bytes that are not a JPEG, which the
    decoder reports itself) are False."""
    coding = colour_coding(data)
    if coding is None:
        return False
    return coding.components == 4 or (coding.components == 3 and coding.adobe_transform == 0)
