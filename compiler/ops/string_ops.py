"""Host-only ops: ``xtpu.strings.format``, ``xtpu.strings.to_number`` and
``xtpu.print`` (TF's ``tf.strings.format``, ``tf.strings.to_number`` and
``tf.print``).  Inside a replicated computation they run on the host: in an
explicit ``outside_compilation`` or in a cluster of their own that
``tpu-mark-outside-compilation`` makes (TF's soft placement)."""

from __future__ import annotations

import sys
from typing import Any

from xtpu.core.tracing import bind, convert
from xtpu.dialects import hlo_host
from xtpu.dialects.strings import check_stream
from xtpu.ops.core import dtype_name, dtype_of


def _as_tensor(v: Any) -> Any:
    return convert(v)


def format(template: str, inputs: Any, placeholder: str = "{}", summarize: int = 3, name: str | None = None) -> Any:  # noqa: A001
    """A scalar string: ``template`` with each ``placeholder`` replaced by the
    next input's text form (tf.strings.format).

    Raises:
      ValueError: the number of placeholders differs from the number of inputs.
    """
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    if placeholder != "{}":
        template = template.replace("{}", "{{}}").replace(placeholder, "{}")
    tensors = [_as_tensor(v) for v in inputs]
    (out,) = bind(hlo_host.StringFormatOp, tensors, template=template, summarize=summarize)
    return out


def to_number(string_tensor: Any, out_type: Any = "float32", name: str | None = None) -> Any:
    """Parse each string as a number of ``out_type`` (tf.strings.to_number).

    Raises:
      ValueError: at run time, a string that is not a number, in TF's words.
    """
    x = convert(string_tensor)
    if dtype_of(x) != "string":
        raise TypeError(f"to_number expects a string tensor, got {dtype_of(x)}")
    (out,) = bind(hlo_host.StringToNumberOp, [x], out_type=dtype_name(out_type))
    return out


def _stream_name(stream: Any) -> str:
    if stream is None or stream is sys.stdout:
        return "stdout"
    if stream is sys.stderr:
        return "stderr"
    if isinstance(stream, str):
        check_stream(stream)
        return stream
    raise ValueError(f"output_stream must be sys.stdout, sys.stderr or a 'file://PATH' string, got {stream!r}")


def print(
    *inputs: Any,
    output_stream: Any = None,
    summarize: int = 3,
    sep: str = " ",
    end: str = "\n",
    name: str | None = None,
) -> None:  # noqa: A001
    """Print tensors and Python strings (tf.print): joined by ``sep``, ended
    by ``end``, to sys.stdout (default), sys.stderr or ``file://PATH``.
    Tensors show at most ``summarize`` leading and trailing elements per
    dimension."""
    tensors = [_as_tensor(v) for v in inputs]
    bind(
        hlo_host.PrintOp,
        tensors,
        sep=sep,
        end=end,
        output_stream=_stream_name(output_stream),
        summarize=summarize,
    )
    return None
