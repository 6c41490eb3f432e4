"""Programs split over logical cores: the suite of issue 17.

Each :class:`Program` is a ``tpu.replicate`` body written once for ``C``
logical cores (``C`` in 2, 4, 8; ``C = 1`` is the unsplit program: every
``tpu.sharding_constraint`` is ``{replicated}``).  It names the rule it
exercises (GSPMD's handler names), and gives, as formulas of ``C`` worked
out by hand from the shapes, the collectives the partitioned program must
hold and the bytes one core receives (``xtpu.passes.spmd_cost``'s measure).
``XLA`` is what XLA's GSPMD moved on the same program at ``C = 8`` (the
figures of issue 17, measured with JAX on 8 CPU devices): no program may
move more.

Used by ``test_spmd_programs.py`` (equality with the unsplit run, collectives
and bytes) and ``benchmarks/spmd.py`` (bytes and step time, split vs
unsplit).  Every value is float32 (4 bytes an element).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

F32 = 4


def sharding(tiles: tuple[int, ...], C: int) -> str:
    """``#tpu.sharding`` tiling ``tiles`` over ``C`` cores in order
    (``{replicated}`` when nothing is split or ``C = 1``)."""
    if C == 1 or math.prod(tiles) == 1:
        return "#tpu.sharding<{replicated}>"
    rep = C // math.prod(tiles)
    dims = list(tiles) + ([rep] if rep > 1 else [])
    tail = " last_tile_dim_replicate" if rep > 1 else ""
    return f"#tpu.sharding<{{devices=[{','.join(map(str, dims))}]<=[{C}]{tail}}}>"


def t(shape: tuple[int, ...]) -> str:
    return "tensor<" + "x".join(map(str, shape)) + ("x" if shape else "") + "f32>"


def con(name: str, src: str, shape: tuple[int, ...], tiles: tuple[int, ...], C: int) -> str:
    return f"%{name} = tpu.sharding_constraint %{src} to {sharding(tiles, C)} : {t(shape)}"


def rows(C: int, rank: int = 2) -> tuple[int, ...]:
    return (C,) + (1,) * (rank - 1)


def cols(C: int) -> tuple[int, int]:
    return (1, C)


# --------------------------------------------------------------------------
# Independent byte counts (from shapes only)
# --------------------------------------------------------------------------


def lacking(n: int, C: int, start: int, m: int) -> list[int]:
    """Rows that core ``c`` needs from other cores when its result tile of a
    window ``operand[start + j * m/C ...]`` of ``m/C`` rows is cut from an
    operand of ``n`` rows split evenly over ``C`` cores: the rows of its
    window inside ``[0, n)`` that its own tile does not hold."""
    L, Ld = n // C, m // C
    out = []
    for c in range(C):
        lo, hi = start + c * Ld, start + (c + 1) * Ld
        lo, hi = max(lo, 0), min(hi, n)
        own = max(0, min(hi, (c + 1) * L) - max(lo, c * L))
        out.append(max(0, hi - lo) - own)
    return out


def concat_lacking(sizes: list[int], C: int) -> list[int]:
    """Rows of core ``c``'s tile of ``concatenate(inputs)`` (each input of
    ``sizes[k]`` rows split evenly over ``C`` cores) that it does not hold."""
    total = sum(sizes)
    Ld = total // C
    out = []
    for c in range(C):
        lo, hi = c * Ld, (c + 1) * Ld
        own, off = 0, 0
        for n in sizes:
            L = n // C
            a, b = off + c * L, off + (c + 1) * L
            own += max(0, min(hi, b) - max(lo, a))
            off += n
        out.append(Ld - own)
    return out


def permutes_if(moved: float) -> dict[str, int | None]:
    """Collective permutes (how many: the window's) when rows move, else none."""
    return {"collective_permute": None} if moved else {}


def all_reduce_bytes(n: int, g: int) -> float:
    return 2 * (g - 1) / g * n


def scatter_bytes(n: int, g: int) -> float:
    return (g - 1) / g * n


@dataclass(frozen=True)
class Program:
    """One program of the suite.

    ``inputs``: (name, shape) of the body arguments; ``body(C)``: the ops;
    ``outputs``: (value, shape) yielded; ``kinds(C)``: the collective kinds
    (``all_reduce`` ...) the partitioned program holds, with how many of
    each (``None``: any positive number); ``bytes(C)``: bytes per core."""

    name: str
    rule: str
    inputs: list[tuple[str, tuple[int, ...]]]
    body: Callable[[int], str]
    outputs: list[tuple[str, tuple[int, ...]]]
    kinds: Callable[[int], dict[str, int | None]]
    bytes: Callable[[int], float]
    xla: float | None = None
    exact: bool = True
    kept: dict[str, Callable[[int], str]] = field(default_factory=dict)

    def text(self, C: int, R: int) -> str:
        """The module: ``@main`` with one replicate of ``R`` replicas x ``C``
        logical cores (``C = 1``: the unsplit program)."""
        params, groups = [], []
        for i, (name, shape) in enumerate(self.inputs):
            names = [f"%in{i}_{r}" for r in range(R)]
            params += [f"{n}: {t(shape)}" for n in names]
            groups.append(f"[{', '.join(names)}] as %{name}: {t(shape)}")
        out_types = [t(shape) for _, shape in self.outputs for _ in range(R)]
        k = len(out_types)
        lhs = "%r = " if k == 1 else f"%r:{k} = "
        rets = ["%r" if k == 1 else f"%r#{j}" for j in range(k)]
        body = "\n".join("    " + line.strip() for line in self.body(C).strip().splitlines())
        yields = ", ".join(f"%{v}" for v, _ in self.outputs)
        ytypes = ", ".join(t(s) for _, s in self.outputs)
        return f"""
func.func @main({", ".join(params)}) -> ({", ".join(out_types)}) {{
  {lhs}tpu.replicate({", ".join(groups)}) {{n = {R} : i64, num_cores_per_replica = {C} : i64}} {{
{body}
    tpu.yield {yields} : {ytypes}
  }}
  func.return {", ".join(rets)} : {", ".join(out_types)}
}}
"""


def _image_tiles(C: int) -> tuple[int, ...]:
    return {1: (1, 1, 1, 1), 2: (1, 2, 1, 1), 4: (1, 2, 2, 1), 8: (1, 2, 4, 1)}[C]


def _reshape_tiles(C: int) -> tuple[int, ...]:
    return (min(C, 4), max(C // 4, 1), 1)


PROGRAMS: list[Program] = [
    Program(
        "elementwise_chain",
        "elementwise",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %a = hlo.multiply %xs, %xs : {t((64, 16))}
            %b = hlo.add %a, %xs : {t((64, 16))}
            %c = hlo.tanh %b : {t((64, 16))}
            %y = hlo.subtract %c, %xs : {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {},
        lambda C: 0.0,
    ),
    Program(
        "matmul_rows",
        "HandleDot: lhs batch-like rows",
        [("x", (64, 32)), ("w", (32, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 32), rows(C), C)}
            %y = hlo.dot_general %xs, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 32))}, {t((32, 16))}) -> {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {},
        lambda C: 0.0,
    ),
    Program(
        "matmul_contracting",
        "HandleDot: partial sums, all_reduce",
        [("x", (64, 32)), ("w", (32, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 32), cols(C), C)}
            {con("ws", "w", (32, 16), rows(C), C)}
            %y = hlo.dot_general %xs, %ws, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 32))}, {t((32, 16))}) -> {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {"all_reduce": 1},
        lambda C: all_reduce_bytes(64 * 16 * F32, C),
    ),
    Program(
        "matmul_cost_choice",
        "HandleDot + cost model: keep the larger operand's split",
        [("x", (64, 32)), ("w", (32, 256))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 32), rows(C), C)}
            {con("ws", "w", (32, 256), cols(C), C)}
            %y = hlo.dot_general %xs, %ws, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 32))}, {t((32, 256))}) -> {t((64, 256))}
        """
        ),
        [("y", (64, 256))],
        # x (8 KB) is gathered, not w (32 KB): result split on columns
        lambda C: {"all_gather": 1},
        lambda C: (C - 1) * 64 * 32 * F32 / C,
        kept={"y": lambda C: sharding(cols(C), C)},
    ),
    Program(
        "transpose",
        "HandleTranspose",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %tr = hlo.transpose %xs, dims = [1, 0] : ({t((64, 16))}) -> {t((16, 64))}
            %y = hlo.exponential %tr : {t((16, 64))}
        """
        ),
        [("y", (16, 64))],
        lambda C: {},
        lambda C: 0.0,
        kept={"y": lambda C: sharding(cols(C), C)},
    ),
    Program(
        "reshape_merge",
        "HandleReshape: merge led by the split dimension",
        [("x", (8, 8, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (8, 8, 16), rows(C, 3), C)}
            %m = hlo.reshape %xs : ({t((8, 8, 16))}) -> {t((64, 16))}
            %y = hlo.negate %m : {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {},
        lambda C: 0.0,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "reshape_two_dims",
        "HandleReshape: tile assignment over two dimensions",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %m = hlo.reshape %xs : ({t((64, 16))}) -> {t((4, 16, 16))}
            %y = hlo.exponential %m : {t((4, 16, 16))}
        """
        ),
        [("y", (4, 16, 16))],
        lambda C: {},
        lambda C: 0.0,
        xla=0.0,
        kept={"y": lambda C: sharding(_reshape_tiles(C), C)},
    ),
    Program(
        "reduce_kept_dim",
        "HandleReduce: split dimension kept",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %z = hlo.constant dense<0.0> : tensor<f32>
            %y = hlo.reduce(%xs init: %z) applies add across dimensions = [1] : ({t((64, 16))}, tensor<f32>) -> {t((64,))}
        """
        ),
        [("y", (64,))],
        lambda C: {},
        lambda C: 0.0,
    ),
    Program(
        "reduce_split_dim",
        "HandleReduce: partial results, all_reduce",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %z = hlo.constant dense<0.0> : tensor<f32>
            %y = hlo.reduce(%xs init: %z) applies add across dimensions = [0] : ({t((64, 16))}, tensor<f32>) -> {t((16,))}
        """
        ),
        [("y", (16,))],
        lambda C: {"all_reduce": 1},
        lambda C: all_reduce_bytes(16 * F32, C),
    ),
    Program(
        "reduce_scatter_result",
        "HandleReduce: partial results with a split result, reduce_scatter",
        [("x", (16, 64))],
        lambda C: (
            f"""
            {con("xs", "x", (16, 64), cols(C), C)}
            %z = hlo.constant dense<0.0> : tensor<f32>
            %s = hlo.reduce(%xs init: %z) applies max across dimensions = [1] : ({t((16, 64))}, tensor<f32>) -> {t((16,))}
            {con("y", "s", (16,), (C,), C)}
        """
        ),
        [("y", (16,))],
        lambda C: {"reduce_scatter": 1},
        lambda C: scatter_bytes(16 * F32, C),
    ),
    Program(
        "dot_reduce_scatter",
        "HandleDot: partial sums with a split output, reduce_scatter",
        [("x", (64, 128)), ("w", (128, 32))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 128), cols(C), C)}
            {con("ws", "w", (128, 32), rows(C), C)}
            %h = hlo.dot_general %xs, %ws, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 128))}, {t((128, 32))}) -> {t((64, 32))}
            {con("y", "h", (64, 32), rows(C), C)}
        """
        ),
        [("y", (64, 32))],
        lambda C: {"reduce_scatter": 1},
        lambda C: scatter_bytes(64 * 32 * F32, C),
        xla=7168.0,
    ),
    Program(
        "concat_split",
        "HandleConcatenate: split concatenated dimension kept",
        [("a", (64, 16)), ("b", (64, 16))],
        lambda C: (
            f"""
            {con("as", "a", (64, 16), rows(C), C)}
            {con("bs", "b", (64, 16), rows(C), C)}
            %c = hlo.concatenate %as, %bs dim = 0 : ({t((64, 16))}, {t((64, 16))}) -> {t((128, 16))}
            %y = hlo.exponential %c : {t((128, 16))}
        """
        ),
        [("y", (128, 16))],
        lambda C: {"collective_permute": None},
        lambda C: max(concat_lacking([64, 64], C)) * 16 * F32,
        xla=1792.0,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "concat_three_uneven",
        "HandleConcatenate: inputs of different sizes",
        [("a", (32, 16)), ("b", (64, 16)), ("c", (32, 16))],
        lambda C: (
            f"""
            {con("as", "a", (32, 16), rows(C), C)}
            {con("bs", "b", (64, 16), rows(C), C)}
            {con("cs", "c", (32, 16), rows(C), C)}
            %y = hlo.concatenate %as, %bs, %cs dim = 0 : ({t((32, 16))}, {t((64, 16))}, {t((32, 16))}) -> {t((128, 16))}
        """
        ),
        [("y", (128, 16))],
        lambda C: {"collective_permute": None},
        lambda C: max(concat_lacking([32, 64, 32], C)) * 16 * F32,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "concat_with_replicated",
        "HandleConcatenate: a split input and a replicated one",
        [("a", (64, 16)), ("b", (64, 16))],
        lambda C: (
            f"""
            {con("as", "a", (64, 16), rows(C), C)}
            {con("bs", "b", (64, 16), (1, 1), C)}
            %y = hlo.concatenate %as, %bs dim = 0 : ({t((64, 16))}, {t((64, 16))}) -> {t((128, 16))}
        """
        ),
        [("y", (128, 16))],
        # only a's tiles move: b is whole on every core
        lambda C: {"collective_permute": None},
        lambda C: max(concat_lacking([64, 64], C)[: C // 2]) * 16 * F32,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "concat_other_dim",
        "HandleConcatenate: split of another dimension",
        [("a", (64, 8)), ("b", (64, 8))],
        lambda C: (
            f"""
            {con("as", "a", (64, 8), rows(C), C)}
            %y = hlo.concatenate %as, %b dim = 1 : ({t((64, 8))}, {t((64, 8))}) -> {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {},
        lambda C: 0.0,
    ),
    Program(
        "stencil_halo",
        "HandleSlice: shifted slices, halo exchange",
        [("x", (72, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (72, 16), rows(C), C)}
            %u = hlo.slice %xs, start = [4, 0], limit = [68, 16], strides = [1, 1] : ({t((72, 16))}) -> {t((64, 16))}
            %v = hlo.slice %xs, start = [0, 0], limit = [64, 16], strides = [1, 1] : ({t((72, 16))}) -> {t((64, 16))}
            %y = hlo.add %u, %v : {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: {"collective_permute": None},
        lambda C: max(a + b for a, b in zip(lacking(72, C, 4, 64), lacking(72, C, 0, 64))) * 16 * F32,
        xla=728.0,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "slice_uneven_tiles",
        "HandleSlice: operand and result tiles of different sizes",
        [("x", (80, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (80, 16), rows(C), C)}
            %u = hlo.slice %xs, start = [8, 0], limit = [72, 16], strides = [1, 1] : ({t((80, 16))}) -> {t((64, 16))}
            %y = hlo.exponential %u : {t((64, 16))}
        """
        ),
        [("y", (64, 16))],
        lambda C: permutes_if(max(lacking(80, C, 8, 64))),
        lambda C: max(lacking(80, C, 8, 64)) * 16 * F32,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "slice_strided",
        "HandleSlice: a strided slice inside every tile",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %y = hlo.slice %xs, start = [1, 0], limit = [64, 16], strides = [2, 1] : ({t((64, 16))}) -> {t((32, 16))}
        """
        ),
        [("y", (32, 16))],
        lambda C: {},
        lambda C: 0.0,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "pad_halo",
        "HandlePad: edge padding of a split dimension",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %z = hlo.constant dense<-1.0> : tensor<f32>
            %p = hlo.pad %xs, %z, low = [4, 0], high = [4, 0], interior = [0, 0] : ({t((64, 16))}, tensor<f32>) -> {t((72, 16))}
            %y = hlo.exponential %p : {t((72, 16))}
        """
        ),
        [("y", (72, 16))],
        lambda C: permutes_if(max(lacking(64, C, -4, 72))),
        lambda C: max(lacking(64, C, -4, 72)) * 16 * F32,
        kept={"y": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "softmax_split_axis",
        "HandleReduce + elementwise: softmax along the split axis",
        [("x", (16, 64))],
        lambda C: (
            f"""
            {con("xs", "x", (16, 64), cols(C), C)}
            %ninf = hlo.constant dense<-1000.0> : tensor<f32>
            %m = hlo.reduce(%xs init: %ninf) applies max across dimensions = [1] : ({t((16, 64))}, tensor<f32>) -> {t((16,))}
            %mb = hlo.broadcast_in_dim %m, dims = [0] : ({t((16,))}) -> {t((16, 64))}
            %d = hlo.subtract %xs, %mb : {t((16, 64))}
            %e = hlo.exponential %d : {t((16, 64))}
            %z = hlo.constant dense<0.0> : tensor<f32>
            %s = hlo.reduce(%e init: %z) applies add across dimensions = [1] : ({t((16, 64))}, tensor<f32>) -> {t((16,))}
            %sb = hlo.broadcast_in_dim %s, dims = [0] : ({t((16,))}) -> {t((16, 64))}
            %y = hlo.divide %e, %sb : {t((16, 64))}
        """
        ),
        [("y", (16, 64))],
        lambda C: {"all_reduce": 2},
        lambda C: 2 * all_reduce_bytes(16 * F32, C),
        exact=False,
        kept={"y": lambda C: sharding(cols(C), C)},
    ),
    Program(
        "image_pixel_mlp",
        "the seed's image split [1,2,4,1], a per-pixel dense layer",
        [("x", (2, 8, 8, 3)), ("w", (3, 8))],
        lambda C: (
            f"""
            {con("xs", "x", (2, 8, 8, 3), _image_tiles(C), C)}
            %h = hlo.dot_general %xs, %w, batching_dims = [] x [], contracting_dims = [3] x [0] : ({t((2, 8, 8, 3))}, {t((3, 8))}) -> {t((2, 8, 8, 8))}
            %z = hlo.constant dense<0.0> : {t((2, 8, 8, 8))}
            %y = hlo.maximum %h, %z : {t((2, 8, 8, 8))}
        """
        ),
        [("y", (2, 8, 8, 8))],
        lambda C: {},
        lambda C: 0.0,
        kept={"y": lambda C: sharding(_image_tiles(C), C)},
    ),
    Program(
        "backward_from_output",
        "propagation backward from an annotated output",
        [("x", (64, 16))],
        lambda C: (
            f"""
            %e = hlo.exponential %x : {t((64, 16))}
            %m = hlo.multiply %e, %x : {t((64, 16))}
            {con("y", "m", (64, 16), rows(C), C)}
        """
        ),
        [("y", (64, 16))],
        lambda C: {},
        lambda C: 0.0,
        kept={"e": lambda C: sharding(rows(C), C)},
    ),
    Program(
        "conflicting_annotations",
        "two annotations of one chain: all_to_all between them",
        [("x", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 16), rows(C), C)}
            %e = hlo.exponential %xs : {t((64, 16))}
            {con("y", "e", (64, 16), cols(C), C)}
        """
        ),
        [("y", (64, 16))],
        lambda C: {"all_to_all": 1},
        lambda C: scatter_bytes(64 * 16 * F32 // C, C),
    ),
    Program(
        "mlp_two_layers",
        "HandleDot twice, a batch reduction at the end",
        [("x", (64, 32)), ("w1", (32, 64)), ("w2", (64, 16))],
        lambda C: (
            f"""
            {con("xs", "x", (64, 32), rows(C), C)}
            %h = hlo.dot_general %xs, %w1, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 32))}, {t((32, 64))}) -> {t((64, 64))}
            %zero = hlo.constant dense<0.0> : {t((64, 64))}
            %a = hlo.maximum %h, %zero : {t((64, 64))}
            %o = hlo.dot_general %a, %w2, batching_dims = [] x [], contracting_dims = [1] x [0] : ({t((64, 64))}, {t((64, 16))}) -> {t((64, 16))}
            %z = hlo.constant dense<0.0> : tensor<f32>
            %y = hlo.reduce(%o init: %z) applies add across dimensions = [0] : ({t((64, 16))}, tensor<f32>) -> {t((16,))}
        """
        ),
        [("y", (16,))],
        lambda C: {"all_reduce": 1},
        lambda C: all_reduce_bytes(16 * F32, C),
    ),
]

BY_NAME = {p.name: p for p in PROGRAMS}
