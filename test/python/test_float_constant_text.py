"""Float constants survive the text form bit for bit (issue 10).

xDSL 0.74 prints -inf as ``0xff800000`` and parsed it back as the integer
4286578688; it also printed ``[0.0, -0.0]`` as a splat of 0.0 and a finite
float32 such as 123456792.0 as a hex literal it then misread.  Every value
below goes through ``as_text()``, ``xtpu-opt`` (custom and generic form) and
``xtpu-run`` in subprocesses, and through the Python parser, and must come
back with the same bits.
"""

import subprocess
import sys

import numpy as np
import pytest
from xdsl.parser import Parser
from xdsl.printer import Printer

import xtpu
from xtpu.dialects import hlo, make_context
from xtpu.dialects.primitive import array_from_dense, dense_from_array
from xtpu.dialects.tensor_spec import FLOAT_DTYPES, from_saved, numpy_dtype
from xtpu.tools import opt, run

BITS = {
    "float32": (
        np.uint32,
        [
            0x7F800000,  # inf
            0xFF800000,  # -inf
            0x7FC00000,  # quiet NaN
            0xFFC00000,  # -NaN
            0x7FC12345,  # NaN with a payload
            0x7F800001,  # signalling NaN
            0xFFBFFFFF,  # negative signalling NaN, largest payload
            0x80000000,  # -0.0
            0x00000000,  # 0.0
            0x00000001,  # smallest subnormal
            0x7F7FFFFF,  # largest finite
            0x4CEB79A3,  # 123456792.0: 9 digits without a '.', printed in hex
            0x3F800000,  # 1.0
            0xBFC00000,  # -1.5
        ],
    ),
    "float64": (
        np.uint64,
        [
            0x7FF0000000000000,
            0xFFF0000000000000,
            0x7FF8000000000000,
            0xFFF8000000000000,
            0x7FF8000000012345,
            0x7FF0000000000001,
            0xFFF7FFFFFFFFFFFF,
            0x8000000000000000,
            0x0000000000000000,
            0x0000000000000001,
            0x7FEFFFFFFFFFFFFF,
            int(np.array(12345678901234568.0).view(np.uint64)),
            0x3FF0000000000000,
            0xBFF8000000000000,
        ],
    ),
    "bfloat16": (
        np.uint16,
        [
            0x7F80,  # inf
            0xFF80,  # -inf
            0x7FC0,  # quiet NaN
            0xFFC0,  # -NaN
            0x7FC5,  # NaN with a payload
            0x7F81,  # signalling NaN
            0xFFBF,  # negative signalling NaN, largest payload
            0x8000,  # -0.0
            0x0000,  # 0.0
            0x0001,  # smallest subnormal
            0x7F7F,  # largest finite
            0x807F,  # largest negative subnormal
            0x3F80,  # 1.0
            0xBFC0,  # -1.5
        ],
    ),
    "float16": (
        np.uint16,
        [
            0x7C00,
            0xFC00,
            0x7E00,
            0xFE00,
            0x7E45,
            0x7C01,
            0xFDFF,
            0x8000,
            0x0000,
            0x0001,
            0x7BFF,  # 65504.0
            0x83FF,
            0x3C00,
            0xBE00,
        ],
    ),
}


def test_every_float_dtype_is_covered():
    assert set(FLOAT_DTYPES) == set(BITS)


def constants(dtype):
    """The test constants of ``dtype``: one vector of all values, each
    non-finite value as a splat scalar and as a splat vector, a 2-d array and
    one with more than 100 elements (the hex string form)."""
    udt, bits = BITS[dtype]
    vec = np.array(bits, dtype=udt).view(numpy_dtype(dtype))
    out = [vec, vec[:12].reshape(3, 4), np.tile(vec, 9)]
    for v in vec[:7]:
        out.append(np.array(v))
        out.append(np.full(3, v))
    return out


def bits_of(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(bits_of(got), bits_of(want))


def returns_constants(cs):
    return lambda x: (x, *[xtpu.constant(c) for c in cs])


def module_text(op, generic=False):
    from io import StringIO

    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(op)
    return out.getvalue()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_replicate_keeps_the_bits(dtype):
    cs = constants(dtype)
    (outs,) = xtpu.replicate(returns_constants(cs), [[np.float32(0)]])
    for got, want in zip(outs[1:], cs):
        assert_same_bits(got, want)


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_python_parser_round_trip(dtype, generic):
    cs = constants(dtype)
    text = xtpu.lower(returns_constants(cs), [[np.float32(0)]]).as_text()
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    if generic:
        module = Parser(ctx, module_text(module, generic=True)).parse_module()
    got = [array_from_dense(op.value) for op in module.walk() if isinstance(op, hlo.ConstantOp)]
    assert len(got) == len(cs)
    for g, want in zip(got, cs):
        assert_same_bits(g, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_dense_attribute_round_trip(dtype):
    """The attribute alone, through xDSL's attribute printer and parser."""
    for c in constants(dtype) + [np.array([0.0, -0.0], dtype)]:
        attr = dense_from_array(c)
        back = Parser(make_context(), str(attr)).parse_attribute()
        assert_same_bits(array_from_dense(back), c)


@pytest.mark.parametrize(
    "text, dtype, bits",
    [
        ("dense<0xFF800000> : tensor<f32>", "float32", [0xFF800000]),
        ("dense<0xff800000> : tensor<f32>", "float32", [0xFF800000]),
        ("dense<[0x7F800000, 1.0, 2]> : tensor<3xf32>", "float32", [0x7F800000, 0x3F800000, 0x40000000]),
        ("dense<0x7FF0000000000001> : tensor<2xf64>", "float64", [0x7FF0000000000001] * 2),
        ("dense<0x3F800000> : tensor<f64>", "float64", [0x3F800000]),  # bits, not the number
    ],
)
def test_hex_elements_are_bit_patterns(text, dtype, bits):
    """MLIR's meaning of a hex literal in a float dense attribute."""
    udt = BITS[dtype][0]
    op = Parser(make_context(), f"%c = hlo.constant {text}").parse_op()
    got = array_from_dense(op.value)
    np.testing.assert_array_equal(bits_of(got).reshape(-1), np.array(bits, udt))


@pytest.mark.parametrize(
    "text, message",
    [
        ("dense<-0x7F800000> : tensor<f32>", "should not have a leading minus"),
        ("dense<0x1FF800000> : tensor<f32>", "out of range for type f32"),
        ("dense<0x10000000000000000> : tensor<f64>", "out of range for type f64"),
    ],
)
def test_bad_hex_elements_are_errors(text, message):
    from xdsl.utils.exceptions import ParseError

    with pytest.raises(ParseError, match=message):
        Parser(make_context(), f"%c = hlo.constant {text}").parse_op()


def test_non_finite_values_print_as_upper_case_bit_patterns():
    cs = [np.float32(-np.inf), np.array([np.inf, np.nan, -0.0, 1.5], np.float64)]
    text = xtpu.lower(returns_constants(cs), [[np.float32(0)]]).as_text()
    assert "hlo.constant dense<0xFF800000> : tensor<f32>" in text
    assert (
        "hlo.constant dense<[0x7FF0000000000000, 0x7FF8000000000000, -0.000000e+00, 1.500000e+00]> : tensor<4xf64>"
        in text
    )


def run_tool(module, *args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_as_text_through_xtpu_opt_and_xtpu_run(dtype, generic, tmp_path):
    """The tools' mains called here, on files: the text is all that passes
    from one to the next, as between processes (two interpreters per case
    were 23 s of the suite; test_reduce_max_through_the_tools and
    test_cli.py start the commands themselves)."""
    cs = constants(dtype)
    x = np.float32(0)
    (tmp_path / "lowered.mlir").write_text(xtpu.lower(returns_constants(cs), [[x]]).as_text())
    opt_args = ["--print-op-generic"] if generic else []
    src = tmp_path / "m.mlir"
    opt.main([str(tmp_path / "lowered.mlir"), "-o", str(src), *opt_args])
    np.save(tmp_path / "x.npy", x)
    assert run.main([str(src), "-i", str(tmp_path / "x.npy"), "--save", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as saved:
        for j, want in enumerate(cs, start=1):
            assert_same_bits(from_saved(saved[f"replica0_output{j}"]), want)


def test_reduce_max_through_the_tools(tmp_path):
    """The issue's reproducer: -inf as reduce_max's init value."""
    x = np.ones(3, np.float32)
    text = xtpu.lower(lambda x: xtpu.math.reduce_max(x, axis=0, keepdims=True), [[x]] * 2).as_text()
    src = tmp_path / "m.mlir"
    src.write_text(text)
    np.save(tmp_path / "x.npy", x)
    out = run_tool("xtpu.tools.run", str(src), "-i", str(tmp_path / "x.npy"), "-i", str(tmp_path / "x.npy"))
    assert out.count("float32[1] = [1.]") == 2, out
