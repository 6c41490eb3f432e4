"""Outside compilation at the level of TF's MLIR bridge (issue 11).

Each program is one of TF's lit cases (``mark_ops_for_outside_compilation.mlir``,
``extract_outside_compilation.mlir``,
``extract_head_tail_outside_compilation.mlir``) written as an xtpu program.
Values are checked against the eager run of the same function (replica by
replica) with 1, 2 and 8 replicas; the structure against TF's: which values
travel between device and host (counted from the lowered module's
``tpu.send_to_host`` / ``tpu.recv_from_host`` and, for loops, at run time),
that no string reaches the device program, and that a device program with
nothing to do is not run.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

import xtpu
from xtpu.dialects import tpu
from xtpu.dialects.tensor_spec import StringType
from xtpu.replication.program import lower
from xtpu.runtime.channels import ChannelTable

REPLICAS = (1, 2, 8)


def floats(n: int) -> list[list[np.float32]]:
    """One scalar input per replica, negative and positive when n > 1."""
    return [[np.float32(-2.5 + 1.75 * r)] for r in range(n)] if n > 1 else [[np.float32(1.5)]]


def strings(n: int) -> list[list[np.ndarray]]:
    return [[np.array(f"{0.5 + r}")] for r in range(n)]


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


def check_against_eager(f, inputs) -> None:
    """``xtpu.replicate(f, inputs)`` gives, replica by replica, what ``f``
    gives eagerly on that replica's inputs."""
    got = xtpu.replicate(f, inputs)
    assert len(got) == len(inputs)
    for r, (ins, g) in enumerate(zip(inputs, got, strict=True)):
        w = _leaves(f(*[xtpu.constant(x) for x in ins]))
        g = _leaves(g)
        assert len(w) == len(g), f"replica {r}"
        for a, b in zip(w, g, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.shape == b.shape and a.dtype == b.dtype, f"replica {r}: {a!r} vs {b!r}"
            if a.dtype.kind in "OUS":
                assert a.tolist() == b.tolist(), f"replica {r}"
            else:
                np.testing.assert_allclose(b, a, rtol=1e-6, err_msg=f"replica {r}")


def lowered(f, inputs):
    return lower(f, inputs).compile()


def device_replicates(module) -> list[tpu.ReplicateOp]:
    return [op for op in module.walk() if isinstance(op, tpu.ReplicateOp) and not op.on_host]


def transfers(module) -> dict[str, list[int]]:
    """Device <-> host transfers of the lowered program: per channel key, the
    number of values each ``tpu.send_to_host`` (device to host, ``_args``)
    and ``tpu.recv_from_host`` (host to device, ``_retvals``) carries."""
    out: dict[str, list[int]] = {}
    for op in module.walk():
        if isinstance(op, tpu.SendToHostOp):
            out.setdefault(op.key.data, []).append(len(op.inputs))
        elif isinstance(op, tpu.RecvFromHostOp):
            out.setdefault(op.key.data, []).append(len(op.results))
    return out


def no_string_on_the_device(module) -> None:
    for rep in device_replicates(module):
        for op in rep.body.walk():
            for v in (*op.operands, *op.results):
                assert not isinstance(getattr(v.type, "element_type", None), StringType), op
        for a in rep.body.block.args:
            assert not isinstance(getattr(a.type, "element_type", None), StringType)


# --------------------------------------------------------------------------
# 1. A string captured by a branch or a loop body (TF's
#    if_region_captured_string, while_region_captured_string)
# --------------------------------------------------------------------------


def if_captured_string(x):
    s = xtpu.strings.format("{}", x)
    return xtpu.cond(
        xtpu.math.greater(x, 0.0), lambda: xtpu.strings.to_number(s), lambda: xtpu.constant(np.float32(1.0))
    )


def if_captured_string_used_by_the_device(x):
    s = xtpu.strings.format("{}", x)
    y = xtpu.cond(xtpu.math.greater(x, 0.0), lambda: xtpu.strings.to_number(s), lambda: x)
    return y * 2.0


def while_captured_string(x):
    s = xtpu.strings.format("{}", x)

    def body(i, a):
        return i + 1, a + xtpu.strings.to_number(s)

    return xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x))


def if_captured_string_input(s, x):
    return xtpu.cond(xtpu.math.greater(x, 0.0), lambda: xtpu.strings.to_number(s), lambda: x)


def while_captured_string_input(s, x):
    return xtpu.while_loop(
        lambda i, a: i < 2, lambda i, a: (i + 1, a * xtpu.strings.to_number(s)), (xtpu.constant(np.int32(0)), x)
    )


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize("f", [if_captured_string, if_captured_string_used_by_the_device, while_captured_string])
def test_captured_string_made_in_the_body(f, n):
    check_against_eager(f, floats(n))
    no_string_on_the_device(lowered(f, floats(n)).module)


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize("f", [if_captured_string_input, while_captured_string_input])
def test_captured_string_replica_input(f, n):
    inputs = [s + x for s, x in zip(strings(n), floats(n))]
    check_against_eager(f, inputs)
    no_string_on_the_device(lowered(f, inputs).module)


def test_control_flow_capturing_a_string_moves_to_the_host_whole():
    """TF marks the hlo.if itself (not a cluster inside its branch)."""
    text = lowered(if_captured_string_used_by_the_device, floats(2)).stages["tpu-mark-outside-compilation"]
    cluster = text.index('tpu.outside_compilation "auto1"')
    assert text.index("hlo.if", cluster) < text.index("hlo.string_to_number", cluster)
    assert text.count("tpu.outside_compilation") == 2  # the format and the hlo.if


def test_without_soft_placement_the_error_names_the_captured_string():
    with pytest.raises(
        ValueError, match=r"'hlo.if' op cannot run on the device .*its regions use a string value defined outside it"
    ):
        xtpu.replicate(
            if_captured_string_input,
            [s + x for s, x in zip(strings(1), floats(1))],
            xla_options=xtpu.XLAOptions(allow_soft_placement=False),
        )


# --------------------------------------------------------------------------
# 2. Host values across regions (TF's
#    outside_compiled_ops_with_multiple_region_single_cluster)
# --------------------------------------------------------------------------


def host_value_into_a_loop(x):
    b = xtpu.outside_compilation(lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v)), x * 2.0)

    def body(i, a):
        return i + 1, a + xtpu.outside_compilation(lambda v: v + 1.0, b)

    return xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x))


def host_value_into_a_loop_the_device_uses_too(x):
    b = xtpu.outside_compilation(lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v)), x * 2.0)

    def body(i, a):
        return i + 1, a + b + xtpu.outside_compilation(lambda v: v + 1.0, b)

    return xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x))


def host_string_into_a_branch_in_a_loop(x):
    s = xtpu.outside_compilation(lambda v: xtpu.strings.format("{}", v), x * 3.0)

    def body(i, a):
        def yes():
            return xtpu.outside_compilation(lambda t, u: xtpu.strings.to_number(t) + u, s, a)

        return i + 1, xtpu.cond(xtpu.math.greater(a, 0.0), yes, lambda: a - 1.0)

    return xtpu.while_loop(lambda i, a: i < 4, body, (xtpu.constant(np.int32(0)), x))


def host_string_into_a_tail_cluster(x):
    # A cluster that stays (the device uses its number) makes a string that a
    # tail cluster reads: kept on the host, returned after the device program.
    num, s = xtpu.outside_compilation(lambda v: (v + 1.0, xtpu.strings.format("{}", v)), x * 2.0)
    return xtpu.outside_compilation(lambda a, u: xtpu.strings.to_number(a) + u, s, num * 3.0)


def string_of_a_loop_cluster_into_a_branch(x):
    def body(i, a):
        s = xtpu.outside_compilation(lambda v: xtpu.strings.format("{}", v), a)

        def yes():
            return xtpu.outside_compilation(lambda t: xtpu.strings.to_number(t) * 0.5, s)

        return i + 1, xtpu.cond(xtpu.math.greater(a, 0.0), yes, lambda: a + 2.0)

    return xtpu.while_loop(lambda i, a: i < 5, body, (xtpu.constant(np.int32(0)), x))


def inputs_and_host_values_in_a_branch_in_a_loop(x):
    b = xtpu.outside_compilation(lambda v: v * 10.0, x * 2.0)  # a device value (x * 1.0 is x)

    def body(i, a):
        def yes():
            return xtpu.outside_compilation(lambda u, v, w: u + v + w, x, b, a)

        return i + 1, xtpu.cond(xtpu.math.greater(a, 0.0), yes, lambda: a + 1.0)

    r = xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x))
    return r, b, x


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize(
    "f",
    [
        host_value_into_a_loop,
        host_value_into_a_loop_the_device_uses_too,
        host_string_into_a_branch_in_a_loop,
        host_string_into_a_tail_cluster,
        string_of_a_loop_cluster_into_a_branch,
        inputs_and_host_values_in_a_branch_in_a_loop,
    ],
)
def test_host_values_across_regions(f, n):
    check_against_eager(f, floats(n))
    no_string_on_the_device(lowered(f, floats(n)).module)


def test_the_loop_cluster_reads_the_host_value_on_every_iteration():
    """Run time: the loop's cluster runs 3 times per replica and gets the
    value from the host each time; the device sends it nothing."""
    c = lowered(host_value_into_a_loop_the_device_uses_too, floats(2))
    sent: list[tuple[str, int]] = []
    orig = ChannelTable.send

    def counting(self, key, index, msg):
        sent.append((key, len(msg) - 1))  # msg[0] is the run number
        return orig(self, key, index, msg)

    ChannelTable.send = counting
    try:
        c(floats(2))
    finally:
        ChannelTable.send = orig
    to_host = [(k, m) for k, m in sent if k.endswith("_args")]
    loop_key = [k for k, _ in to_host if k != "host_compute_channel_0_args"]
    assert sorted(set(loop_key)) == ["host_compute_channel_1_args"]
    assert sorted(to_host) == sorted(
        [("host_compute_channel_0_args", 1)] * 2 + [("host_compute_channel_1_args", 0)] * 6
    )


# --------------------------------------------------------------------------
# 3. Replica inputs reach host clusters on the host (TF's
#    mixed_input_single_outside_compilation)
# --------------------------------------------------------------------------


def mixed_input(x):
    return xtpu.outside_compilation(lambda u, v: u + v, x, x * 2.0) * 3.0


def mixed_input_in_a_loop(x):
    def body(i, a):
        return i + 1, xtpu.outside_compilation(lambda u, v: u * 0.5 + v, x, a)

    return xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x))[1]


def mixed_string_input(s, x):
    return xtpu.outside_compilation(lambda t, v: xtpu.strings.to_number(t) + v, s, x * 2.0) * 3.0


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize("f", [mixed_input, mixed_input_in_a_loop])
def test_replica_inputs_of_host_clusters(f, n):
    check_against_eager(f, floats(n))


@pytest.mark.parametrize("n", REPLICAS)
def test_string_replica_input_of_a_host_cluster(n):
    inputs = [s + x for s, x in zip(strings(n), floats(n))]
    check_against_eager(mixed_string_input, inputs)
    no_string_on_the_device(lowered(mixed_string_input, inputs).module)


# --------------------------------------------------------------------------
# 4. Outputs that are replica inputs or host values (TF's tail_aliased_output)
# --------------------------------------------------------------------------


def tail_aliased_output(x):
    return (x, xtpu.outside_compilation(lambda u: u + 1.0, x * 5.0))


def host_value_output(x):
    s = xtpu.strings.format("{}", x * 2.0)
    return s, xtpu.strings.to_number(s) * 2.0


def host_value_output_of_a_cluster_the_device_needs(x):
    a, b = xtpu.outside_compilation(lambda v: (v + 1.0, v * 4.0), x * 3.0)
    return a, b * 2.0


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize("f", [tail_aliased_output, host_value_output, host_value_output_of_a_cluster_the_device_needs])
def test_outputs_that_the_device_does_not_compute(f, n):
    check_against_eager(f, floats(n))


def test_aliased_output_is_the_input():
    c = lowered(tail_aliased_output, floats(2))
    main = next(op for op in c.module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")
    ret = main.body.block.last_op
    assert list(ret.operands[:2]) == list(main.body.block.args)
    (rep,) = device_replicates(c.module)
    assert len(rep.body.block.last_op.operands) == 1  # only x * 5.0


def test_host_value_output_is_returned_by_the_host():
    c = lowered(host_value_output_of_a_cluster_the_device_needs, floats(2))
    (rep,) = device_replicates(c.module)
    assert len(rep.body.block.last_op.operands) == 1  # b * 2.0; a stays on the host
    assert 'tpu.recv_at_host "host_compute_channel_0_held" {tpu.held}' in c.as_text()


# --------------------------------------------------------------------------
# 5. The device program keeps only what it uses (TF's op_string_operand,
#    op_string_operand_string_result)
# --------------------------------------------------------------------------


def op_string_operand(s):
    return xtpu.strings.to_number(s)


def op_string_operand_and_device_work(s, x):
    n = xtpu.strings.to_number(s)
    return n, x * 2.0


def op_string_operand_string_result(s, x):
    t = xtpu.strings.format("[{}]", s)
    return t, x + 1.0


@pytest.mark.parametrize("n", REPLICAS)
def test_string_inputs_only_host_code_uses(n):
    check_against_eager(op_string_operand, strings(n))
    inputs = [s + x for s, x in zip(strings(n), floats(n))]
    check_against_eager(op_string_operand_and_device_work, inputs)
    check_against_eager(op_string_operand_string_result, inputs)


def test_a_device_program_with_nothing_left_is_not_run():
    c = lowered(op_string_operand, strings(2))
    assert device_replicates(c.module) == []
    assert c.executable.replicate is None


@pytest.mark.parametrize("f", [op_string_operand_and_device_work, op_string_operand_string_result])
def test_the_device_program_loses_the_string_input(f):
    inputs = [s + x for s, x in zip(strings(2), floats(2))]
    c = lowered(f, inputs)
    (rep,) = device_replicates(c.module)
    assert [str(a.type) for a in rep.body.block.args] == ["tensor<f32>"]
    assert len(rep.body.block.last_op.operands) == 1
    no_string_on_the_device(c.module)


# --------------------------------------------------------------------------
# Transfers: TF's count, no value the host already has
# --------------------------------------------------------------------------

# Per program: channel key -> values carried by each send_to_host (_args) and
# recv_from_host (_retvals) in the lowered module; TF's structure for the same
# program in its lit tests (the values XlaHostCompute sends and receives).
TF_TRANSFERS = {
    # The branch needs the device's predicate: a tail cluster, the predicate
    # is a device output, no channel.
    if_captured_string: {},
    # The branch's result goes back to the device: the predicate goes to the
    # host, the number comes back; the string never moves.
    if_captured_string_used_by_the_device: {
        "host_compute_channel_auto1_args": [1],
        "host_compute_channel_auto1_retvals": [1],
    },
    # Only the input: all on the host before the device runs.
    while_captured_string: {},
    # x * 2.0 to the host, b back (the device uses it in the loop); the loop's
    # cluster gets b on the host: nothing sent, its result back.
    host_value_into_a_loop_the_device_uses_too: {
        "host_compute_channel_0_args": [1],
        "host_compute_channel_0_retvals": [1],
        "host_compute_channel_1_args": [0],
        "host_compute_channel_1_retvals": [1],
    },
    host_value_into_a_loop: {
        "host_compute_channel_0_args": [1],
        "host_compute_channel_0_retvals": [0],
        "host_compute_channel_1_args": [0],
        "host_compute_channel_1_retvals": [1],
    },
    # Each iteration sends the loop value and gets the branch's number back;
    # the string goes to the branch's cluster on the host.
    string_of_a_loop_cluster_into_a_branch: {
        "host_compute_channel_0_args": [1],
        "host_compute_channel_0_retvals": [0],
        "host_compute_channel_1_args": [0],
        "host_compute_channel_1_retvals": [1],
    },
    # b (an output too) stays on the host; the branch's cluster gets only the
    # loop value, x and b are on the host.
    inputs_and_host_values_in_a_branch_in_a_loop: {
        "host_compute_channel_0_args": [1],
        "host_compute_channel_0_retvals": [0],
        "host_compute_channel_1_args": [1],
        "host_compute_channel_1_retvals": [1],
    },
    # Only x * 2.0 is sent; the host has x.
    mixed_input: {"host_compute_channel_0_args": [1], "host_compute_channel_0_retvals": [1]},
    # Only the loop value; the host has x on every iteration.
    mixed_input_in_a_loop: {"host_compute_channel_0_args": [1], "host_compute_channel_0_retvals": [1]},
    # A tail cluster: x * 5.0 is a device output, x the input itself.
    tail_aliased_output: {},
    # The string stays on the host, the number comes back.
    host_value_output: {"host_compute_channel_auto0_args": [1], "host_compute_channel_auto0_retvals": [1]},
}


@pytest.mark.parametrize("f", list(TF_TRANSFERS), ids=lambda f: f.__name__)
def test_transfers_are_tfs(f):
    c = lowered(f, floats(2))
    assert transfers(c.module) == TF_TRANSFERS[f]


def _string_inputs(f):
    if f is op_string_operand:
        return strings(2)
    return [s + x for s, x in zip(strings(2), floats(2))]


@pytest.mark.parametrize(
    "f, want",
    [
        # The branch needs the device's predicate (a device output to the
        # tail cluster); the string input never moves.
        (if_captured_string_input, {}),
        (mixed_string_input, {"host_compute_channel_0_args": [1], "host_compute_channel_0_retvals": [1]}),
        # No device program at all.
        (op_string_operand, {}),
        (op_string_operand_and_device_work, {}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_transfers_with_string_inputs_are_tfs(f, want):
    assert transfers(lowered(f, _string_inputs(f)).module) == want


@pytest.mark.parametrize("n", REPLICAS)
def test_an_empty_device_program_starts_no_worker(n, monkeypatch):
    """``lambda x: (x, x)``: the outputs are the input; the device program
    (the only replicate, kept for its replica count) has nothing to compute
    and no device worker starts."""
    import xtpu.runtime.executor as executor

    c = lowered(lambda x: (x, x), floats(n))
    (rep,) = device_replicates(c.module)
    assert not rep.body.block.args and not rep.outputs
    started = []
    real = executor.run_workers
    monkeypatch.setattr(
        executor, "run_workers", lambda tasks, *a, **k: started.append(len(tasks)) or real(tasks, *a, **k)
    )
    got = c(floats(n))
    assert started == []
    assert [[float(v) for v in out] for out in got] == [[float(x), float(x)] for (x,) in floats(n)]


def test_a_held_value_read_before_it_was_kept_is_an_error():
    """The runtime's check behind the passes' ordering (RunState.held_values)."""
    from xtpu.runtime.errors import XtpuRuntimeError
    from xtpu.runtime.host import RunState
    from xtpu.runtime.workers import AbortSignal

    state = RunState(AbortSignal())
    state.next_run()
    with pytest.raises(XtpuRuntimeError, match="host value 'k' was read before it was kept in this run"):
        state.held_values(0, "k", 1)
    state.hold(0, "k", state.generation[0], (np.float32(2.0),))
    assert state.held_values(0, "k", 1) == 2.0
    state.hold(0, "k", state.generation[0] - 1, (np.float32(3.0),))  # a finished run's worker: ignored
    assert state.held_values(0, "k", 1) == 2.0
    state.next_run()  # a new run starts with nothing kept
    with pytest.raises(XtpuRuntimeError):
        state.held_values(0, "k", 1)


def test_held_values_survive_the_text_form():
    """The lowered module printed and read back (what xtpu-run takes) runs to
    the same values: ``{tpu.held}`` is part of the text."""
    from xtpu.core.pipeline import parse_module
    from xtpu.runtime.executor import Executable

    c = lowered(inputs_and_host_values_in_a_branch_in_a_loop, floats(2))
    text = c.as_text()
    assert text.count("{tpu.held}") >= 4
    again = Executable(parse_module(text))
    try:
        args = [x for (x,) in floats(2)]
        got = again.run(args)
        want = c.executable.run(args)
        assert [np.asarray(v).tolist() for v in got] == [np.asarray(v).tolist() for v in want]
    finally:
        again.close()


# --------------------------------------------------------------------------
# The issue's own reproducers, word for word
# --------------------------------------------------------------------------


def issue_1_cond(x):
    # The issue's else branch is ``lambda: 1.0``; np.float32 here because the
    # eager xtpu.cond returns a Python float branch as float64 (TF: float32).
    s = xtpu.strings.format("{}", x)
    return xtpu.cond(xtpu.math.greater(x, 0.0), lambda: xtpu.strings.to_number(s), lambda: np.float32(1.0))


def issue_1_while(x):
    s = xtpu.strings.format("{}", x)
    return xtpu.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + xtpu.strings.to_number(s)), (0, x))


def issue_2(x):
    b = xtpu.outside_compilation(lambda: xtpu.strings.to_number(xtpu.strings.format("{}", x)))

    def body(i, acc):
        return i + 1, acc + xtpu.outside_compilation(lambda v: v + 1.0, b)

    return xtpu.while_loop(lambda i, acc: i < 3, body, (0, x))


def issue_2_device_uses_b(x):
    b = xtpu.outside_compilation(lambda: xtpu.strings.to_number(xtpu.strings.format("{}", x)))

    def body(i, acc):
        return i + 1, acc + b + xtpu.outside_compilation(lambda v: v + 1.0, b)

    return xtpu.while_loop(lambda i, acc: i < 3, body, (0, x))


def issue_3(x):
    return xtpu.outside_compilation(lambda u, v: u + v, x, x * 2.0)


def issue_4(x):
    return (x, xtpu.outside_compilation(lambda u: u + 1.0, x * 5.0))


@pytest.mark.parametrize("n", REPLICAS)
@pytest.mark.parametrize("f", [issue_1_cond, issue_1_while, issue_2, issue_2_device_uses_b, issue_3, issue_4])
def test_the_issues_reproducers(f, n):
    check_against_eager(f, floats(n))


@pytest.mark.parametrize("n", REPLICAS)
def test_the_issues_reproducer_5(n):
    check_against_eager(lambda s: xtpu.strings.to_number(s), strings(n))
    c = lowered(lambda s: xtpu.strings.to_number(s), strings(n))
    assert device_replicates(c.module) == []


# --------------------------------------------------------------------------
# Clusters inside host code: an explicit cluster in control flow that moves
# to the host whole (it uses a string made outside it) runs there in place,
# whether the control flow then runs before, after or inside the device
# program (TF: an outside-compiled op in host-placed code is on the host
# already; nested outside compilation is flattened).  Found by the
# differential fuzzer (seed 12, programs 1261, 6450, ...).
# --------------------------------------------------------------------------


def cluster_in_a_branch_after_the_device(x):
    s = xtpu.strings.format("{}", x)

    def branch():
        return xtpu.outside_compilation(lambda v: v * 3.0, x) + xtpu.strings.to_number(s)

    return xtpu.cond(xtpu.math.greater(x, 0.0), branch, lambda: x - 1.0)


def cluster_in_a_branch_the_device_uses(x):
    return cluster_in_a_branch_after_the_device(x) * 2.0


def cluster_in_a_loop_the_device_uses(x):
    s = xtpu.strings.format("{}", x)

    def body(i, a):
        e = xtpu.outside_compilation(lambda v, w: v * 0.5 + w, a, x)
        return i + 1, e + xtpu.strings.to_number(s)

    _, a = xtpu.while_loop(lambda i, a: i < 3, body, (xtpu.constant(np.int32(0)), x * 2.0))
    return a - 1.0


def cluster_returning_a_string_in_nested_branches(x):
    """The fuzzer's program 1261 (seed 12), reduced: a cluster in a branch
    yields a string made outside it, an inner branch prints that string."""
    s = xtpu.outside_compilation(lambda v: xtpu.strings.format("{}", v), x)
    p = xtpu.math.greater(x, 0.0)

    def outer():
        t = xtpu.outside_compilation(lambda v: s, x)
        q = xtpu.math.less(x, 3.0)

        def printing():
            xtpu.print("p", t, q, output_stream="file:///dev/null")
            return x + 1.0

        return xtpu.cond(q, lambda: x * 2.0, printing) + xtpu.strings.to_number(t)

    return xtpu.cond(p, outer, lambda: x), x + 1.0


HOST_CODE_CLUSTERS = [
    cluster_in_a_branch_after_the_device,
    cluster_in_a_branch_the_device_uses,
    cluster_in_a_loop_the_device_uses,
    cluster_returning_a_string_in_nested_branches,
]


@pytest.mark.parametrize("n", (1, 2))
@pytest.mark.parametrize("f", HOST_CODE_CLUSTERS, ids=lambda f: f.__name__)
def test_a_cluster_in_control_flow_moved_to_the_host_runs_there(f, n):
    inputs = floats(n) if n > 1 else [[np.float32(4.5)]]
    check_against_eager(f, inputs)
    no_string_on_the_device(lowered(f, inputs).module)


@pytest.mark.parametrize("f", HOST_CODE_CLUSTERS, ids=lambda f: f.__name__)
def test_the_user_cluster_is_dissolved_into_the_host_control_flow(f):
    """After soft placement the user's clusters in the moved control flow are
    gone (their ops sit in the branch or loop body the host runs); no host
    function or channel carries their names."""
    from xtpu.passes._common import enclosing

    low = lower(f, floats(2))
    inner = [
        op.cluster.data
        for op in low.module.walk()
        if isinstance(op, tpu.OutsideCompilationOp) and op.parent_op() is not enclosing(op, tpu.ReplicateOp)
    ]
    assert inner  # the program has a cluster inside a branch or loop body
    c = low.compile()
    text = c.stages["tpu-mark-outside-compilation"]
    for name in inner:
        assert f'tpu.outside_compilation "{name}"' not in text
        assert f"host_compute_channel_{name}_" not in str(c.module)
        assert f"@host_{name}" not in str(c.module)
