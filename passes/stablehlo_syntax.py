"""StableHLO's attributes and types as xDSL attributes, for the converters
between xtpu's dialects and StableHLO (:mod:`xtpu.passes.stablehlo_table`).

xDSL 0.74 has no ``stablehlo`` dialect.  StableHLO is therefore held in
MLIR's *generic* form: ops are xDSL's unregistered ops (``"stablehlo.add"(...)``),
builtin attributes (``array<i64: ...>``, ``dense<...>``, ``3 : i64``) are
xDSL's own, and StableHLO's dialect attributes (``#stablehlo.dot<...>``,
``#stablehlo<comparison_direction LT>``, ``!stablehlo.token``) are xDSL's
``UnregisteredAttr``, whose body is the text between the brackets.  This
module builds those attributes and reads them back (the body grammar is
StableHLO's attribute syntax, https://openxla.org/stablehlo/spec).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xdsl.context import Context
from xdsl.dialects.builtin import (
    Builtin,
    IntegerType,
    Signedness,
    UnregisteredAttr,
)
from xdsl.dialects.func import Func
from xdsl.ir import Attribute, Operation


def generic_context() -> Context:
    """A context with builtin and func loaded and unregistered ops and
    attributes allowed: it reads and builds StableHLO's generic form."""
    ctx = Context(allow_unregistered=True)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    return ctx


_CTX = generic_context()

ui32 = IntegerType(32, Signedness.UNSIGNED)
ui64 = IntegerType(64, Signedness.UNSIGNED)


def op_class(name: str) -> type[Operation]:
    """The (unregistered) xDSL op class of the StableHLO op ``name``."""
    return _CTX.get_op(name)


def dialect_attr(name: str, body: str) -> Attribute:
    """``#name<body>``, e.g. ``dialect_attr("stablehlo.dot", "lhs_contracting_dimensions = [1]")``."""
    cls = _CTX.get_optional_attr(name)
    return cls(name, False, False, body)  # type: ignore[misc]


def enum_attr(kind: str, value: str) -> Attribute:
    """``#stablehlo<kind VALUE>``, e.g. ``enum_attr("comparison_direction", "LT")``."""
    name = f"stablehlo.{kind}"
    cls = _CTX.get_optional_attr(name)
    return cls(name, False, True, f" {value}")  # type: ignore[misc]


def token_type() -> Attribute:
    """``!stablehlo.token``."""
    cls = _CTX.get_optional_type("stablehlo.token")
    return cls("stablehlo.token", True, False, "")  # type: ignore[misc]


def is_token(t: Attribute) -> bool:
    return isinstance(t, UnregisteredAttr) and t.attr_name.data == "stablehlo.token"


def channel_handle(handle: int, kind: int) -> Attribute:
    """``#stablehlo.channel_handle<handle = N, type = T>``: type 1 is
    DEVICE_TO_DEVICE, 2 DEVICE_TO_HOST, 3 HOST_TO_DEVICE (XLA's ChannelHandle)."""
    return dialect_attr("stablehlo.channel_handle", f"handle = {int(handle)}, type = {int(kind)}")


def ints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def dot_dimension_numbers(lb: Sequence[int], rb: Sequence[int], lc: Sequence[int], rc: Sequence[int]) -> Attribute:
    """``#stablehlo.dot<...>``, empty fields left out as MLIR prints them."""
    fields = []
    for key, vals in (
        ("lhs_batching_dimensions", lb),
        ("rhs_batching_dimensions", rb),
        ("lhs_contracting_dimensions", lc),
        ("rhs_contracting_dimensions", rc),
    ):
        if len(vals):
            fields.append(f"{key} = {ints(vals)}")
    return dialect_attr("stablehlo.dot", ", ".join(fields))


# ---- reading ----------------------------------------------------------------


def attr_name(attr: Attribute) -> str | None:
    """``stablehlo.dot`` for ``#stablehlo.dot<...>``; None for a builtin attribute."""
    return attr.attr_name.data if isinstance(attr, UnregisteredAttr) else None


def attr_body(attr: Attribute) -> str:
    assert isinstance(attr, UnregisteredAttr), attr
    return attr.value.data.strip()


def enum_value(attr: Attribute) -> str:
    """``LT`` for ``#stablehlo<comparison_direction LT>``."""
    return attr_body(attr).split()[-1]


def fields(attr: Attribute) -> dict[str, str]:
    """``{"handle": "1", "type": "1"}`` for ``#stablehlo.channel_handle<handle = 1, type = 1>``:
    the top-level ``key = value`` pairs of a struct attribute's body."""
    body = attr_body(attr)
    out: dict[str, str] = {}
    depth, start, parts = 0, 0, []
    for i, c in enumerate(body):
        if c in "[<({":
            depth += 1
        elif c in "])>}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for part in parts:
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def int_list(text: str) -> tuple[int, ...]:
    """``(1, 2)`` for ``[1, 2]``."""
    return tuple(int(v) for v in re.findall(r"-?\d+", text))
