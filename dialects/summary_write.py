"""``hlo.summary_write``: TF 2's generic summary op (``WriteSummary``, behind
``tf.summary.write``), which ``tf.summary.image`` and ``tf.summary.text``
are built on: a tensor written under a tag with plugin metadata.

The kernel runs on the host (``HOST_ONLY``; replica 0 writes when a
``replica_id`` is given, as for the other summaries) and formats the data as
TF 2's plugins do:

* ``plugin = ""`` (``tf.summary.write``): the tensor as a ``TensorProto``,
  with ``metadata`` (a serialized ``SummaryMetadata``, hex) when given;
* ``plugin = "text"``: a string tensor for TensorBoard's text plugin;
* ``plugin = "images"``: images ``[k, h, w, c]`` (``c`` 1, 3 or 4; floats in
  [0, 1] or integers in [0, 255]) as TF 2's image summary stores them: a
  string tensor ``[width, height, png_1, ..., png_n]`` of the first
  ``max_outputs`` images, PNG-encoded (``zlib``, 8-bit, no filter).

Events go through the per-directory writers of :mod:`xtpu.dialects.summaries`.
"""

from __future__ import annotations

import struct
import zlib
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, TensorType
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def

from xtpu.dialects import summaries as _summaries
from xtpu.dialects.primitive import IntParam, PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec

PLUGINS = ("", "text", "images")
STEP_DTYPES = ("int64", "int32")


def encode_png(image: np.ndarray) -> bytes:
    """An 8-bit PNG of ``image`` (``uint8 [h, w, c]``, c = 1 gray, 3 RGB, 4 RGBA)."""
    h, w, c = image.shape
    color = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def image_bytes(data: np.ndarray) -> np.ndarray:
    """Images ``[k, h, w, c]`` as uint8: floats scaled by 255.5 and
    saturated (TF's ``convert_image_dtype(..., saturate=True)``), integers clipped."""
    if data.dtype.kind == "f":
        return (np.clip(data, 0.0, 1.0) * 255.5).astype(np.uint8)
    return np.clip(data, 0, 255).astype(np.uint8)


@irdl_op_definition
class SummaryWriteOp(PrimitiveOp):
    """Write ``data`` under ``tag`` at ``step`` (see the module docstring).

    Operands: data (any dtype and shape; images ``[k, h, w, c]``), step
    (int64 / int32 scalar), optional replica_id (int32 scalar).
    Properties: ``tag``, ``logdir``, ``plugin`` (``""``, ``"text"``,
    ``"images"``), optional ``metadata`` (hex of a SummaryMetadata),
    ``max_outputs`` (images), ``description``.
    """

    name = "hlo.summary_write"
    data = operand_def(TensorType)
    step = operand_def(TensorType)
    replica_id = opt_operand_def(TensorType)
    tag = prop_def(StringAttr)
    logdir = prop_def(StringAttr)
    plugin = prop_def(StringAttr)
    max_outputs = opt_prop_def(IntegerAttr[I64])
    metadata = opt_prop_def(StringAttr)
    description = opt_prop_def(StringAttr)
    assembly_format = (
        "$tag `=` $data `at` `step` $step (`if` `replica` $replica_id^ `is` `zero`)? `to` $logdir `plugin` $plugin"
        " (`max_outputs` $max_outputs^)? (`metadata` $metadata^)? (`description` $description^)?"
        " attr-dict `:` type($data) `,` type($step) (`,` type($replica_id)^)?"
    )
    PARAMS: ClassVar = {
        "tag": StrParam(),
        "logdir": StrParam(),
        "plugin": StrParam(),
        "max_outputs": IntParam(),
        "metadata": StrParam(),
        "description": StrParam(),
    }
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # no results (TF: WriteSummary)

    @classmethod
    def infer(cls, specs, tag="", logdir="", plugin="", max_outputs=None, **_):
        if len(specs) not in (2, 3):
            raise ShapeError(
                f"hlo.summary_write takes data, step and an optional replica id, got {len(specs)} operands"
            )
        data, step = specs[0], specs[1]
        if step.shape != () or step.dtype not in STEP_DTYPES:
            raise ShapeError(f"hlo.summary_write step must be an int64 or int32 scalar, got {step}")
        if len(specs) == 3 and specs[2] != TensorSpec((), "int32"):
            raise ShapeError(f"hlo.summary_write replica id must be an int32 scalar, got {specs[2]}")
        if not tag or not logdir:
            raise ShapeError("hlo.summary_write tag and logdir must not be empty")
        if plugin not in PLUGINS:
            raise ShapeError(f"hlo.summary_write plugin must be one of {PLUGINS}, got {plugin!r}")
        if plugin == "text" and data.dtype != "string":
            raise ShapeError(f"hlo.summary_write text data must be strings, got {data}")
        if plugin == "images":
            if data.rank != 4 or data.shape[3] not in (1, 3, 4) or data.dtype == "string" or data.dtype == "bool":
                raise ShapeError(f"hlo.summary_write images must be numeric [k, h, w, c] with c in 1, 3, 4, got {data}")
            if max_outputs is None or int(max_outputs) < 1:
                raise ShapeError(f"hlo.summary_write max_outputs must be positive, got {max_outputs}")
        return []

    @classmethod
    def kernel(cls, tag, logdir, plugin="", max_outputs=None, metadata=None, description=None, **_):
        def run(data, step, replica_id=None):
            if replica_id is None or int(replica_id) == 0:
                _summaries.write_tensor(
                    logdir,
                    tag,
                    tensor_for(plugin, np.asarray(data), max_outputs),
                    int(step),
                    plugin,
                    bytes.fromhex(metadata) if metadata else None,
                    description,
                )

        return run


def tensor_for(plugin: str, data: np.ndarray, max_outputs: int | None) -> np.ndarray:
    """The tensor a plugin stores for ``data`` (images: width, height, PNGs)."""
    if plugin != "images":
        return data
    images = image_bytes(data[: int(max_outputs)])
    h, w = data.shape[1], data.shape[2]
    return np.array([str(w).encode(), str(h).encode()] + [encode_png(im) for im in images], dtype=object)


SUMMARY_WRITE_OPS = [SummaryWriteOp]
