"""xtpu.summary.image / text / write (issue 15) against TF 2's formats: the
tensor summaries TensorBoard's image and text plugins read (PNGs decoded
back here), eagerly and traced (replica 0 writes)."""

import struct
import zlib

import numpy as np
import pytest
from test_summary import read_events

import xtpu


def tensors(logdir):
    return [(v.tag, e.step, v) for e in read_events(logdir) for v in e.summary.value if v.HasField("tensor")]


def decode_png(data: bytes) -> np.ndarray:
    """8-bit, filter-0 PNG -> uint8 [h, w, c], checking signature and CRCs."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color = ihdr[:4]
    c = {0: 1, 2: 3, 6: 4}[color]
    assert depth == 8
    raw = zlib.decompress(idat)
    rows = [raw[y * (w * c + 1) : (y + 1) * (w * c + 1)] for y in range(h)]
    assert all(r[0] == 0 for r in rows)
    return np.frombuffer(b"".join(r[1:] for r in rows), np.uint8).reshape(h, w, c)


def test_image_text_write_eagerly(logdir):
    rng = np.random.default_rng(0)
    imgs = rng.random((4, 5, 6, 3)).astype(np.float32)
    gray = rng.integers(0, 300, size=(2, 3, 2, 1))
    w = xtpu.summary.create_file_writer(logdir)
    with w.as_default(step=4):
        assert xtpu.summary.image("rgb", imgs, max_outputs=2, description="two of four") is True
        assert xtpu.summary.image("gray", gray, step=5) is True
        assert xtpu.summary.text("notes", np.array([["a", "b"], ["c", "d"]], dtype=object)) is True
        assert xtpu.summary.write("raw", np.arange(6, dtype=np.int64).reshape(2, 3)) is True
    (t1, s1, v1), (t2, s2, v2), (t3, s3, v3), (t4, s4, v4) = tensors(logdir)
    assert (t1, s1, t2, s2, t3, s3, t4, s4) == ("rgb", 4, "gray", 5, "notes", 4, "raw", 4)
    assert v1.metadata.plugin_data.plugin_name == "images" and v1.metadata.summary_description == "two of four"
    strings = list(v1.tensor.string_val)
    assert strings[:2] == [b"6", b"5"] and len(strings) == 4  # width, height, 2 PNGs
    for k in range(2):  # TF's convert_image_dtype(saturate=True): x * 255.5, truncated
        np.testing.assert_array_equal(decode_png(strings[2 + k]), (imgs[k] * 255.5).astype(np.uint8))
    np.testing.assert_array_equal(decode_png(v2.tensor.string_val[3]), np.clip(gray[1], 0, 255).astype(np.uint8))
    assert v3.metadata.plugin_data.plugin_name == "text"
    assert list(v3.tensor.string_val) == [b"a", b"b", b"c", b"d"] and [d.size for d in v3.tensor.tensor_shape.dim] == [
        2,
        2,
    ]
    assert v4.tensor.dtype == 9  # DT_INT64
    np.testing.assert_array_equal(
        np.frombuffer(v4.tensor.tensor_content, "<i8").reshape(2, 3), np.arange(6).reshape(2, 3)
    )
    with pytest.raises(ValueError, match="images must be numeric \\[k, h, w, c\\] with c in 1, 3, 4"):
        with w.as_default(step=1):
            xtpu.summary.image("bad", np.zeros((2, 3, 3)))
    assert xtpu.summary.text("nowriter", "x", step=1) is False


def test_traced_summaries_are_written_by_replica_zero(logdir):
    w = xtpu.summary.create_file_writer(logdir)
    imgs = [np.full((1, 2, 2, 1), v, np.float32) for v in (0.25, 0.75)]

    def fn(x):
        xtpu.summary.image("img", x, step=np.int64(7))
        xtpu.summary.text("msg", xtpu.strings.format("mean {}", [xtpu.reduce_mean(x)]), step=np.int64(7))
        return x

    with w.as_default():
        xtpu.replicate(fn, [[imgs[0]], [imgs[1]]])
    w.flush()
    got = tensors(logdir)
    assert [(t, s) for t, s, _ in got] == [("img", 7), ("msg", 7)]
    np.testing.assert_array_equal(decode_png(got[0][2].tensor.string_val[2]), np.full((2, 2, 1), 63, np.uint8))
    assert list(got[1][2].tensor.string_val) == [b"mean 0.25"]
