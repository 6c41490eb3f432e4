"""The text of a sharding: XLA's HloSharding notation, read with a lark grammar.

The notation is the one ``HloSharding::ToString`` prints and
``HloParserImpl::ParseSingleSharding`` reads (``xla/hlo/ir/hlo_sharding.cc``,
``xla/hlo/parser/hlo_parser.cc``)::

  {replicated}
  {manual}
  {maximal device=1}
  {devices=[2,1]0,1}                                 tile assignment [2,1], devices in tile order
  {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}   the last dimension replicates
  {devices=[2,2]<=[4]}                               iota: devices 0..3 in order
  {devices=[2,2]<=[2,2]T(1,0)}                       iota reshaped to [2,2], transposed

As in XLA the items inside the braces may come in any order and
``last_tile_dims={replicated}`` is another spelling of
``last_tile_dim_replicate``.  xtpu does not take tuple shardings
(``{{...}, {...}}``), ``metadata=``, ``shard_as`` / ``shard_like``, or the
``unknown`` and ``unreduced`` kinds: each is rejected with a message saying so.

This module only reads text: :func:`parse_sharding_text` returns a
:class:`ShardingText` (what was written, checked against XLA's parser
rules) or raises :class:`ShardingParseError` pointing at the column.
:mod:`xtpu.dialects.sharding` turns it into a :class:`~xtpu.dialects.sharding.Sharding`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # lark is imported when a sharding is first read (~40 ms off every start)
    from lark import Lark, Token, Tree
    from lark.exceptions import UnexpectedInput

GRAMMAR = r"""
    sharding: "{" item* "}"

    item: "replicated"                                      -> replicated
        | "manual"                                          -> manual
        | "maximal"                                         -> maximal
        | "device" "=" INT                                  -> device
        | "devices" "=" dims assignment                     -> devices
        | "last_tile_dim_replicate"                         -> last_tile_dim_replicate
        | "last_tile_dims" "=" "{" subgroup ("," subgroup)* "}" -> last_tile_dims

    dims: "[" _dim_list "]"
    assignment: _device_list                                -> explicit
              | "<=" dims transpose?                        -> iota
    transpose: "T" "(" _perm_list ")"
    // Three list rules rather than one, so that an error inside each list
    // expects only what can follow there.
    _dim_list: INT | _dim_list "," INT
    _device_list: INT | _device_list "," INT
    _perm_list: INT | _perm_list "," INT
    !subgroup: "replicated" | "manual" | "maximal" | "unreduced"

    INT: /-?[0-9]+/
    %ignore /[ \t\r\n]+/
"""

# Words of XLA's notation that xtpu recognises but does not support.
_UNSUPPORTED = {
    "metadata": "'metadata=' is not supported in xtpu shardings; drop it",
    "shard_as": "'shard_as' is not supported in xtpu shardings",
    "shard_like": "'shard_like' is not supported in xtpu shardings",
    "unknown": "the 'unknown' sharding is not supported by xtpu",
    "unreduced": "the 'unreduced' sharding is not supported by xtpu",
}

_TUPLE = "tuple shardings are not supported: a #tpu.sharding describes one tensor"


MAX_TILE_DEVICES = 1 << 16
"""Most devices a tile assignment may name (the runtime's limit on replicas
x logical cores); the assignment is an array of that many ids."""


class ShardingParseError(ValueError):
    """Malformed sharding text.

    ``message`` says what is wrong; ``pos`` and ``end`` are 0-based offsets
    into ``text`` of the offending part and ``column`` is ``pos + 1``.
    ``str()`` shows the text with a caret under the offending part.
    """

    def __init__(self, message: str, text: str, pos: int, end: int | None = None):
        self.message = message
        self.text = text
        self.pos = max(0, min(pos, len(text)))
        self.end = max(self.pos, min(end if end is not None else self.pos + 1, len(text)))
        super().__init__(str(self))

    @property
    def column(self) -> int:
        """1-based column of the error in ``text`` (for one-line text)."""
        return self.pos + 1

    def __str__(self) -> str:
        line_start = self.text.rfind("\n", 0, self.pos) + 1
        line_end = self.text.find("\n", self.pos)
        line = self.text[line_start : line_end if line_end >= 0 else len(self.text)]
        col = self.pos - line_start
        width = max(1, min(self.end, line_start + len(line)) - self.pos)
        return f"invalid sharding at column {self.column}: {self.message}\n  {line}\n  {' ' * col}{'^' * width}"


@dataclass(frozen=True)
class ShardingText:
    """A sharding as written, after XLA's parser checks.

    ``kind`` is ``"replicated"``, ``"manual"``, ``"maximal"`` or ``"tiled"``.
    For ``maximal``, ``device`` is the device.  For ``tiled``, ``dims`` is the
    tile-assignment shape (with the replication dimension last when
    ``last_tile_dim_replicate``) and either ``devices`` (the explicit list, in
    tile order) or ``iota`` (``(reshape_dims, transpose_perm)``) is set.
    """

    kind: str
    device: int | None = None
    dims: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    iota: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    last_tile_dim_replicate: bool = False


@lru_cache(maxsize=1)
def _parser() -> Lark:
    """The LALR parser, built on first use (building it costs ~60 ms, which
    every xtpu-opt start would otherwise pay)."""
    from lark import Lark

    return Lark(GRAMMAR, start="sharding", parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _describe_terminals(names) -> str:
    """'expected ...' text for a set of lark terminal names."""
    shown = []
    for name in sorted(names):
        if name == "INT":
            shown.append("an integer")
        elif name in ("$END", "<END-OF-FILE>"):
            shown.append("the end of the text")
        else:
            try:
                shown.append(repr(_parser().get_terminal(name).pattern.value))
            except KeyError:
                shown.append(name)
    shown = sorted(set(shown), key=lambda s: (not s.startswith("an "), s))
    if len(shown) == 1:
        return shown[0]
    return "one of " + ", ".join(shown)


def _word_at(text: str, pos: int) -> str:
    end = pos
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return text[pos:end]


def _syntax_error(text: str, e: UnexpectedInput) -> ShardingParseError:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    pos = e.pos_in_stream if e.pos_in_stream is not None and e.pos_in_stream >= 0 else len(text)
    word = _word_at(text, pos)
    if word in _UNSUPPORTED:
        return ShardingParseError(_UNSUPPORTED[word], text, pos, pos + len(word))
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            return ShardingParseError(
                f"the text ends early: expected {_describe_terminals(e.expected)}", text, len(text)
            )
        first_item = text.find("{") + 1
        if tok.type == "LBRACE" and text[first_item:pos].strip() == "":
            return ShardingParseError(_TUPLE, text, pos)
        return ShardingParseError(
            f"expected {_describe_terminals(e.expected)}, got {str(tok)!r}", text, pos, pos + max(1, len(str(tok)))
        )
    if isinstance(e, UnexpectedCharacters):
        got = word or text[pos]
        allowed = _describe_terminals(e.allowed) if e.allowed else "nothing more"
        return ShardingParseError(f"unexpected {got!r}: expected {allowed}", text, pos, pos + len(got))
    if isinstance(e, UnexpectedEOF):
        return ShardingParseError(f"the text ends early: expected {_describe_terminals(e.expected)}", text, len(text))
    return ShardingParseError(str(e), text, pos)


def _ints(tokens) -> tuple[list[int], list[Token]]:
    from lark import Token

    toks = [t for t in tokens if isinstance(t, Token) and t.type == "INT"]
    return [int(t) for t in toks], toks


def _start(node) -> int:
    from lark import Token

    if isinstance(node, Token):
        return node.start_pos
    return node.meta.start_pos


def _end(node) -> int:
    from lark import Token

    if isinstance(node, Token):
        return node.end_pos
    return node.meta.end_pos


def _fmt(values) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def _check_iota(text: str, dims: list[int], node: Tree) -> tuple[tuple[int, ...], tuple[int, ...]]:
    reshape_node = node.children[0]
    reshape, reshape_toks = _ints(reshape_node.children)
    for v, t in zip(reshape, reshape_toks):
        if v < 1:
            raise ShardingParseError(f"iota reshape dimensions must be positive, got {v}", text, t.start_pos, t.end_pos)
    if len(node.children) > 1:
        perm_node = node.children[1]
        perm, perm_toks = _ints(perm_node.children)
        if len(perm) != len(reshape):
            raise ShardingParseError(
                "iota_transpose_perm should have the same rank as iota_reshape_dims : "
                f"expected {len(reshape)}, saw {len(perm)}.",
                text,
                _start(perm_node),
                _end(perm_node),
            )
        for v, t in zip(perm, perm_toks):
            if not 0 <= v < len(reshape):
                raise ShardingParseError(
                    f"Out of range iota minor_to_major value {v}: T(...) permutes the "
                    f"{len(reshape)} dimensions of {_fmt(reshape)}",
                    text,
                    t.start_pos,
                    t.end_pos,
                )
        seen: set[int] = set()
        for v, t in zip(perm, perm_toks):
            if v in seen:
                raise ShardingParseError(
                    f"T{tuple(perm)} is not a permutation: {v} appears twice", text, t.start_pos, t.end_pos
                )
            seen.add(v)
    elif len(reshape) > 1:
        raise ShardingParseError(
            f"expected 'T(' to start sharding devices iota_transpose_perm after the "
            f"{len(reshape)}-dimensional iota {_fmt(reshape)}",
            text,
            _end(reshape_node),
        )
    else:
        perm = [0]
    tiles = math.prod(dims)
    if math.prod(reshape) != tiles:
        raise ShardingParseError(
            f"iota <={_fmt(reshape)} lists {math.prod(reshape)} devices but the tile assignment "
            f"{_fmt(dims)} has {tiles} tiles",
            text,
            _start(node),
            _end(node),
        )
    return tuple(reshape), tuple(perm)


def _check_explicit(text: str, dims: list[int], node: Tree) -> tuple[int, ...]:
    devices, toks = _ints(node.children)
    tiles = math.prod(dims)
    if len(devices) != tiles:
        raise ShardingParseError(
            f"tile assignment {_fmt(dims)} has {tiles} tiles but {len(devices)} "
            f"device{'s are' if len(devices) != 1 else ' is'} listed",
            text,
            _start(node),
            _end(node),
        )
    if len(devices) <= 1:
        raise ShardingParseError(
            "non-maximal shardings must have more than one device assigned "
            f"(for one device write {{maximal device={devices[0]}}})",
            text,
            _start(node),
            _end(node),
        )
    seen: set[int] = set()
    for v, t in zip(devices, toks):
        if v < 0:
            raise ShardingParseError(f"device {v} is negative in tile assignment", text, t.start_pos, t.end_pos)
        if v >= tiles:
            raise ShardingParseError(
                f"device {v} is out of range: a tile assignment of {tiles} tiles uses devices 0..{tiles - 1}",
                text,
                t.start_pos,
                t.end_pos,
            )
        if v in seen:
            raise ShardingParseError(f"device {v} is listed twice", text, t.start_pos, t.end_pos)
        seen.add(v)
    return tuple(devices)


def parse_sharding_text(text: str) -> ShardingText:
    """Read one sharding in XLA's notation.

    Raises:
      ShardingParseError: the text is not a sharding, or breaks one of XLA's
        rules (a replicated sharding with devices, a device list that does not
        fill the tile assignment, a device out of range or listed twice, ...);
        the error points at the offending column.
    """
    return _parse_cached(text)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> ShardingText:
    from lark.exceptions import UnexpectedInput

    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None

    if not tree.children:
        raise ShardingParseError(_TUPLE + " ('{}' is XLA's empty tuple sharding)", text, 0, len(text))
    items: dict[str, Tree] = {}
    for item in tree.children:
        name = str(item.data)
        if name in items:
            raise ShardingParseError(f"'{name}' appears twice in the sharding", text, _start(item), _end(item))
        items[name] = item

    body_start = text.find("{") + 1
    body_end = text.rfind("}")
    kinds = [k for k in ("replicated", "manual", "maximal") if k in items]
    if len(kinds) > 1:
        second = items[kinds[1]]
        raise ShardingParseError(
            f"a sharding is either replicated, manual, maximal or tiled (devices=); got both {kinds[0]} and {kinds[1]}",
            text,
            _start(second),
            _end(second),
        )

    replicate = "last_tile_dim_replicate" in items
    if "last_tile_dims" in items:
        node = items["last_tile_dims"]
        types = [str(sub.children[0]) for sub in node.children]
        if replicate:
            raise ShardingParseError(
                "give either last_tile_dim_replicate or last_tile_dims={replicated}, not both",
                text,
                _start(node),
                _end(node),
            )
        if types != ["replicated"]:
            raise ShardingParseError(
                f"last_tile_dims={{{', '.join(types)}}} is not supported by xtpu: only "
                "last_tile_dims={replicated} (the same as last_tile_dim_replicate)",
                text,
                _start(node),
                _end(node),
            )
        replicate = True
        items["last_tile_dim_replicate"] = node

    device_item = items.get("device") or items.get("devices")
    if kinds and kinds[0] in ("replicated", "manual"):
        kind = kinds[0]
        if device_item is not None:
            raise ShardingParseError(
                f"{kind} shardings should not have any devices assigned",
                text,
                _start(device_item),
                _end(device_item),
            )
        if replicate:
            node = items["last_tile_dim_replicate"]
            raise ShardingParseError(
                "last_tile_dim_replicate applies to tiled (devices=) shardings only", text, _start(node), _end(node)
            )
        return ShardingText(kind)

    if kinds:  # maximal
        if "device" not in items:
            where = items.get("devices") or items["maximal"]
            raise ShardingParseError(
                "maximal shardings should have exactly one device assigned: write {maximal device=N}",
                text,
                _start(where),
                _end(where),
            )
        if "devices" in items:
            node = items["devices"]
            raise ShardingParseError(
                "maximal shardings should have exactly one device assigned: give device=, not devices=",
                text,
                _start(node),
                _end(node),
            )
        if replicate:
            node = items["last_tile_dim_replicate"]
            raise ShardingParseError(
                "last_tile_dim_replicate applies to tiled (devices=) shardings only", text, _start(node), _end(node)
            )
        tok = items["device"].children[0]
        if int(tok) < 0:
            raise ShardingParseError(f"device {int(tok)} is negative", text, tok.start_pos, tok.end_pos)
        return ShardingText("maximal", device=int(tok))

    # Tiled.
    if "device" in items:
        node = items["device"]
        raise ShardingParseError(
            "non-maximal shardings must have a tile assignment list including dimensions: "
            "device= needs maximal ({maximal device=N}); a tiled sharding is written devices=[...]...",
            text,
            _start(node),
            _end(node),
        )
    if "devices" not in items:
        raise ShardingParseError(
            "non-maximal shardings must have a tile assignment list including dimensions "
            "(write {replicated}, {manual}, {maximal device=N} or {devices=[...]...})",
            text,
            body_start - 1,
            body_end + 1,
        )
    dims_node, assignment = items["devices"].children
    dims, dim_toks = _ints(dims_node.children)
    for v, t in zip(dims, dim_toks):
        if v < 1:
            raise ShardingParseError(
                f"tile assignment dimensions must be positive, got {v}", text, t.start_pos, t.end_pos
            )
    if math.prod(dims) > MAX_TILE_DEVICES:
        raise ShardingParseError(
            f"a tile assignment of {math.prod(dims)} devices is more than xtpu supports ({MAX_TILE_DEVICES})",
            text,
            _start(dims_node),
            _end(dims_node),
        )
    if assignment.data == "iota":
        iota = _check_iota(text, dims, assignment)
        if math.prod(dims) <= 1:
            raise ShardingParseError(
                "non-maximal shardings must have more than one device assigned "
                "(for one device write {maximal device=0})",
                text,
                _start(assignment),
                _end(assignment),
            )
        return ShardingText("tiled", dims=tuple(dims), iota=iota, last_tile_dim_replicate=replicate)
    devices = _check_explicit(text, dims, assignment)
    return ShardingText("tiled", dims=tuple(dims), devices=devices, last_tile_dim_replicate=replicate)
