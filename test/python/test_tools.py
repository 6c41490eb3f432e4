"""xtpu-run on traced and lowered modules, and its errors."""

import contextlib
import importlib
import io
import subprocess
import sys

import numpy as np
import pytest

import xtpu
from xtpu.tools.run import main as xtpu_run


def seed(x):
    return xtpu.math.reduce_mean(x + 1)


@pytest.fixture
def seed_module(tmp_path):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    path = tmp_path / "seed.mlir"
    path.write_text(xtpu.lower(seed, [[x], [x]]).as_text())
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "y.npz", np.array([4.0, 5.0, 6.0], np.float32))
    return path


def test_runs_a_traced_module_per_replica(seed_module, tmp_path, capsys):
    out = tmp_path / "out.npz"
    rc = xtpu_run([str(seed_module), "-i", str(tmp_path / "x.npy"), "-i", str(tmp_path / "y.npz"), "--save", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "replica 0:\n  output 0: float32[] = 3.0" in text
    assert "replica 1:\n  output 0: float32[] = 6.0" in text
    with np.load(out) as saved:
        assert float(saved["replica0_output0"]) == np.mean(np.array([1, 2, 3], np.float32) + 1)
        assert float(saved["replica1_output0"]) == 6.0


def test_runs_a_lowered_module_with_host_code(tmp_path, capsys):
    def f(x):
        return xtpu.outside_compilation(lambda v: xtpu.strings.to_number(xtpu.strings.format("1{}", v)), x)

    compiled = xtpu.lower(f, [[np.int32(2)]]).compile()
    path = tmp_path / "lowered.mlir"
    path.write_text(compiled.as_text())
    np.save(tmp_path / "a.npy", np.int32(7))
    assert xtpu_run([str(path), "-i", str(tmp_path / "a.npy")]) == 0
    assert "float32[] = 17.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d: ["-i", str(d / "x.npy")], "give -i once per replica, got 1"),
        (
            lambda d: ["-i", str(d / "x.npy"), "-i", str(d / "bad.npy")],
            "input 0 of replica 1 must be float32[3], got float32[2]",
        ),
        (lambda d: ["-i", str(d / "x.npy"), "-i", str(d / "pickled.npy")], "cannot read"),
        (lambda d: ["-i", str(d / "x.npy"), "-i", str(d / "missing.npy")], "cannot read"),
        (lambda d: ["-i", str(d / "x.npy"), "-i", str(d / "x.txt")], "must be .npy or .npz"),
    ],
)
def test_bad_inputs_exit_1_with_a_message(seed_module, tmp_path, capsys, make_args, message):
    np.save(tmp_path / "bad.npy", np.zeros(2, np.float32))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert xtpu_run([str(seed_module)] + make_args(tmp_path)) == 1
    assert message in capsys.readouterr().err


def test_a_module_that_does_not_parse(tmp_path, capsys):
    path = tmp_path / "broken.mlir"
    path.write_text("func.func @main( {")
    assert xtpu_run([str(path)]) == 1
    assert "broken.mlir" in capsys.readouterr().err


def test_a_module_that_does_not_verify(tmp_path, capsys):
    path = tmp_path / "invalid.mlir"
    path.write_text(
        """
        func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
          %r = tpu.replicate([%a] as %x: tensor<2xf32>) {n = 1 : i64} {
            %y = hlo.reshape %x : (tensor<2xf32>) -> tensor<3xf32>
            tpu.yield %x : tensor<2xf32>
          }
          func.return %r : tensor<2xf32>
        }
        """
    )
    assert xtpu_run([str(path)]) == 1
    assert "cannot reshape" in capsys.readouterr().err


def test_console_script_runs(seed_module, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "xtpu.tools.run",
            str(seed_module),
            "-i",
            str(tmp_path / "x.npy"),
            "-i",
            str(tmp_path / "x.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("float32[] = 3.0") == 2


def test_runs_a_module_split_over_logical_devices(tmp_path, capsys):
    def model(image, w):
        x = xtpu.split_to_logical_devices(image, [1, 2, 4, 1])
        return xtpu.math.reduce_sum(xtpu.reshape(xtpu.nn.relu(x), [2, -1]) @ w, axis=1)

    rng = np.random.default_rng(0)
    image = rng.integers(-2, 3, size=(2, 8, 8, 3)).astype(np.float32)
    w = rng.integers(-2, 3, size=(192, 4)).astype(np.float32)
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[2, 2, 1, 2])
    path = tmp_path / "split.mlir"
    path.write_text(xtpu.lower(model, [[image, w]], device_assignment=da).as_text())
    np.savez(tmp_path / "in.npz", image, w)
    out = tmp_path / "out.npz"
    assert xtpu_run([str(path), "-i", str(tmp_path / "in.npz"), "--save", str(out)]) == 0
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["replica0_output0"], model(image, w))


# --------------------------------------------------------------------------
# Unknown passes and options, malformed attributes: one line, no traceback
# --------------------------------------------------------------------------


def _tool(tool, *args):
    """A tool's ``main`` on ``args`` in this process, with what a subprocess
    would give: the exit status, stdout and stderr (``SystemExit`` as the
    status; any other exception fails the test, as a traceback would).
    Starting ``python -m xtpu.tools.opt`` once per case took 1.5-3 s each;
    test_console_script_runs, test_cli.py and
    test_an_unclosed_string_is_a_parse_error_at_once start the commands."""
    main = importlib.import_module(f"xtpu.tools.{tool}").main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args]) or 0
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def _tool_process(tool, *args):
    """Run a console script's module in a subprocess (as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-m", f"xtpu.tools.{tool}", *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "tpu-lower-cross-replica-sums",
            "unknown pass 'tpu-lower-cross-replica-sums' (did you mean tpu-lower-cross-replica-sum?)",
        ),
        (
            "tpu-mark-outside-compilation{allow-soft-placment=false}",
            "pass 'tpu-mark-outside-compilation' has no option 'allow-soft-placment' (did you mean allow-soft-placement?)",
        ),
        ("canonicalise", "unknown pass 'canonicalise' (did you mean canonicalize"),
        (
            "tpu-mark-outside-compilation{",
            "malformed pass pipeline 'tpu-mark-outside-compilation{': Expected argument name here",
        ),
        ("tpu-mark-outside-compilation{allow-soft-placement=maybe}", "pass 'tpu-mark-outside-compilation': "),
    ],
)
def test_xtpu_opt_names_the_nearest_pass_or_option(seed_module, spec, message):
    proc = _tool("opt", seed_module, "-p", spec)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_xtpu_run_names_the_nearest_pass(seed_module, tmp_path, capsys):
    x = str(tmp_path / "x.npy")
    assert xtpu_run([str(seed_module), "-i", x, "-i", x, "--pipeline", "tpu-outline-outside-compilaton"]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == "xtpu-run: --pipeline: unknown pass 'tpu-outline-outside-compilaton' (did you mean tpu-outline-outside-compilation?)\n"
    )


def _twice_and_print(x):
    a = x + 1.0
    b = x + 1.0  # the same value again: cse merges it
    xtpu.print(a)  # a host-only op on the device: the option decides
    return a * b


def test_xtpu_opt_accepts_xdsl_passes_with_options(tmp_path):
    """xDSL's cse and an xtpu pass's option, each with a visible effect on the
    module (issue 25: the module used to have nothing for either to do)."""
    x = np.array([1.0, 2.0], np.float32)
    path = tmp_path / "twice.mlir"
    path.write_text(xtpu.lower(_twice_and_print, [[x]]).as_text())
    assert path.read_text().count("hlo.add") == 2
    soft = _tool("opt", path, "-p", "cse,tpu-mark-outside-compilation{allow-soft-placement=true}")
    assert soft.returncode == 0, soft.stderr
    assert soft.stdout.count("hlo.add") == 1 and "hlo.multiply %3, %3" in soft.stdout  # cse ran
    assert 'tpu.outside_compilation "auto0"' in soft.stdout  # soft placement moved the print to the host
    strict = _tool("opt", path, "-p", "cse,tpu-mark-outside-compilation{allow-soft-placement=false}")
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    assert "'hlo.print' op cannot run on the device" in strict.stderr


REPLICATE_N = """func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : TYPE} {
    tpu.yield %x : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}
"""


@pytest.mark.parametrize("elem", ["bf16", "f32"])
def test_a_float_replica_count_is_a_parse_error_in_both_tools(tmp_path, capsys, elem):
    path = tmp_path / "n.mlir"
    path.write_text(REPLICATE_N.replace("TYPE", elem))
    np.save(tmp_path / "a.npy", np.float32(1))
    a = str(tmp_path / "a.npy")
    assert xtpu_run([str(path), "-i", a, "-i", a]) == 1
    err = capsys.readouterr().err
    assert "n.mlir:2:53" in err and "tpu.replicate's n must be the number of replicas, an integer" in err
    proc = _tool("opt", path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "n.mlir:2:53" in proc.stderr and f"got 2.000000e+00 : {elem}" in proc.stderr


GROUPS = """func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<f32>) {n = 2 : i64} {
    %s = tpu.cross_replica_sum %x groups = GROUPS : tensor<f32>
    tpu.yield %s : tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<f32>, tensor<f32>
}
"""


@pytest.mark.parametrize(
    "groups, message",
    [
        ("dense<[[0, 5]]> : tensor<1x2xi64>", "names replicas [5] that do not exist"),
        ("dense<[[0.0, 1.0]]> : tensor<1x2xf32>", "group_assignment must hold integer ids"),
    ],
)
def test_both_tools_reject_groups_the_runtime_cannot_run(tmp_path, capsys, groups, message):
    path = tmp_path / "groups.mlir"
    path.write_text(GROUPS.replace("GROUPS", groups))
    np.save(tmp_path / "a.npy", np.float32(1))
    a = str(tmp_path / "a.npy")
    assert xtpu_run([str(path), "-i", a, "-i", a]) == 1
    err = capsys.readouterr().err
    assert "groups.mlir:3:5: 'tpu.cross_replica_sum' op" in err and message in err
    proc = _tool("opt", path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "groups.mlir:3:5: 'tpu.cross_replica_sum' op" in proc.stderr and message in proc.stderr


def test_xtpu_run_lowers_a_host_op_in_a_branch(tmp_path, capsys):
    """A print in an xtpu.cond branch is a host-only op in the device program
    (not directly in the replicate body): the module is lowered first."""

    def f(v):
        def true_fn():
            xtpu.print(v, output_stream="file://" + str(tmp_path / "printed.txt"))
            return v

        return xtpu.cond(xtpu.math.greater(v, 0.0), true_fn, lambda: v)

    path = tmp_path / "branch.mlir"
    path.write_text(xtpu.lower(f, [[np.float32(1.5)]]).as_text())
    np.save(tmp_path / "v.npy", np.float32(1.5))
    assert xtpu_run([str(path), "-i", str(tmp_path / "v.npy")]) == 0, capsys.readouterr().err
    assert "float32[] = 1.5" in capsys.readouterr().out


def test_xtpu_run_does_not_lower_a_lowered_module_again(tmp_path, capsys):
    """A host replicate (head cluster) holds host-only ops by design: a
    lowered module over 2 logical cores runs as it is."""
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=1)

    def f(v):
        c = xtpu.constant([[0.5], [0.5]])
        xtpu.print(c, output_stream="file://" + str(tmp_path / "printed.txt"))
        return c, xtpu.split_to_logical_devices(c, [2, 1])

    inputs = [[np.zeros((2, 2), np.float32)]]
    path = tmp_path / "lowered.mlir"
    path.write_text(xtpu.lower(f, inputs, device_assignment=da).compile().as_text())
    np.save(tmp_path / "v.npy", inputs[0][0])
    out = tmp_path / "out.npz"
    assert xtpu_run([str(path), "-i", str(tmp_path / "v.npy"), "--save", str(out)]) == 0, capsys.readouterr().err
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["replica0_output1"], [[0.5], [0.5]])


def test_xtpu_run_names_an_op_it_cannot_run_outside_the_device_program(tmp_path, capsys):
    path = tmp_path / "main.mlir"
    path.write_text(
        """func.func @main(%a: tensor<f32>) -> tensor<f32> {
  %s = ccl.all_reduce %a applies add groups = dense<[[0]]> : tensor<1x1xi64> : tensor<f32>
  %r = tpu.replicate([%s] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.yield %x : tensor<f32>
  }
  func.return %r : tensor<f32>
}
"""
    )
    np.save(tmp_path / "a.npy", np.float32(1))
    assert xtpu_run([str(path), "-i", str(tmp_path / "a.npy")]) == 1
    err = capsys.readouterr().err
    assert "main.mlir:2:3: the runtime cannot run this module: ccl.all_reduce has no numpy kernel" in err


def test_xtpu_run_names_a_channel_nothing_sends_on(tmp_path, capsys):
    """A recv whose key no send uses would wait until the timeout."""

    def f(x):
        return xtpu.outside_compilation(lambda v: v + 1.0, x * 2.0) * 3.0

    text = xtpu.lower(f, [[np.float32(1)]]).compile().as_text()
    assert 'recv_from_host "host_compute_channel_0_retvals"' in text
    path = tmp_path / "keys.mlir"
    path.write_text(text.replace('recv_from_host "host_compute_channel_0_retvals"', 'recv_from_host "elsewhere"'))
    np.save(tmp_path / "x.npy", np.float32(1))
    assert xtpu_run([str(path), "-i", str(tmp_path / "x.npy"), "--timeout", "60"]) == 1
    err = capsys.readouterr().err
    assert "keys.mlir:" in err and "'tpu.recv_from_host' op waits on channel 'elsewhere', which nothing" in err


def test_xtpu_run_names_a_main_without_a_body(tmp_path, capsys):
    path = tmp_path / "decl.mlir"
    path.write_text("func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>)\n")
    assert xtpu_run([str(path)]) == 1
    assert "decl.mlir:1:1: 'func.func' op @main is a declaration; it needs a body to run" in capsys.readouterr().err


def test_an_unclosed_string_is_a_parse_error_at_once(tmp_path):
    """xDSL 0.74's lexer backtracks exponentially on an unclosed '"' (30
    characters after it on the line took 30 s); xtpu's lexer does not."""
    path = tmp_path / "quote.mlir"
    path.write_text(
        'func.func @f(%x: tensor<4x2xf32>) {\n  %0 = hlo.negate %x {a = "'
        + "x" * 60
        + "} : tensor<4x2xf32>\n  func.return\n}\n"
    )
    for tool in ("opt", "run"):
        proc = _tool_process(tool, path)  # times out after 120 s: a hang would not end in this process
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "quote.mlir:2:27" in proc.stderr and "End of file reached before closing string literal" in proc.stderr


def test_bytes_that_are_not_utf8_are_a_parse_error(tmp_path, capsys):
    path = tmp_path / "bytes.mlir"
    path.write_bytes(b'func.func @f() attributes {a = "\xff"} {\n  func.return\n}\n')
    assert xtpu_run([str(path)]) == 1
    assert "bytes.mlir:1:33" in capsys.readouterr().err
    proc = _tool("opt", path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "bytes.mlir:1:33" in proc.stderr and "the input is not UTF-8 text" in proc.stderr


def test_a_program_that_does_not_fit_in_memory_is_an_error(tmp_path, capsys):
    path = tmp_path / "iota.mlir"
    path.write_text(
        """func.func @main(%a: tensor<f32>) -> tensor<100000x100000x100000xi64> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %i = hlo.iota dim = 0 : tensor<100000x100000x100000xi64>
    %j = hlo.add %i, %i : tensor<100000x100000x100000xi64>
    tpu.yield %j : tensor<100000x100000x100000xi64>
  }
  func.return %r : tensor<100000x100000x100000xi64>
}
"""
    )
    np.save(tmp_path / "a.npy", np.float32(1))
    assert xtpu_run([str(path), "-i", str(tmp_path / "a.npy")]) == 1
    assert "xtpu-run: replica 0, op hlo.add: MemoryError: Unable to allocate" in capsys.readouterr().err


BF16_RUN = """func.func @main(%a: tensor<6xbf16>) -> (tensor<6xbf16>, tensor<6xbf16>, tensor<6xf32>) {
  %r:3 = tpu.replicate([%a] as %x: tensor<6xbf16>) {n = 1 : i64} {
    %c = hlo.constant dense<[0x7F80, 0xFF80, 0x7FC5, -0.0, 0x0001, 1.5]> : tensor<6xbf16>
    %w = hlo.convert %x : (tensor<6xbf16>) -> tensor<6xf32>
    tpu.yield %x, %c, %w : tensor<6xbf16>, tensor<6xbf16>, tensor<6xf32>
  }
  func.return %r#0, %r#1, %r#2 : tensor<6xbf16>, tensor<6xbf16>, tensor<6xf32>
}
"""


def test_xtpu_run_keeps_bfloat16_bits_through_npy_files(tmp_path, capsys):
    """Issue 28: a bfloat16 input file (numpy writes it as ``|V2``), a
    constant with inf, a NaN payload, -0.0 and a subnormal, and an exact
    widening come back from ``xtpu-run --save`` with every bit."""
    import ml_dtypes

    from xtpu.dialects.tensor_spec import from_saved

    path = tmp_path / "bf16.mlir"
    path.write_text(BF16_RUN)
    bits = np.array([0x7FC1, 0xFF81, 0x8000, 0x0001, 0x3F80, 0x4049], np.uint16)
    np.save(tmp_path / "a.npy", bits.view(ml_dtypes.bfloat16))
    out = tmp_path / "out.npz"
    assert xtpu_run([str(path), "-i", str(tmp_path / "a.npy"), "--save", str(out)]) == 0
    capsys.readouterr()
    saved = np.load(out)
    got = [from_saved(saved[k]) for k in sorted(saved.files, key=lambda k: int("".join(filter(str.isdigit, k)) or 0))]
    np.testing.assert_array_equal(got[0].view(np.uint16), bits)
    np.testing.assert_array_equal(got[1].view(np.uint16), [0x7F80, 0xFF80, 0x7FC5, 0x8000, 0x0001, 0x3FC0])
    np.testing.assert_array_equal(got[2].view(np.uint32), bits.astype(np.uint32) << 16)
