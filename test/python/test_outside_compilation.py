"""Outside compilation end to end: real programs through ``xtpu.replicate``
with 1, 2 and 8 replicas, compared with the eager run of the same function
(eagerly ``outside_compilation`` just calls the function and ``xtpu.cond`` /
``xtpu.while_loop`` are Python control flow).

Host work is counted by what it prints: each test prints to a ``file://``
stream once eagerly (replica by replica) and once compiled, and the two files
must hold the same lines (replicas' lines interleave, so as multisets; within
one replica in the same order).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import xtpu
from xtpu.replication.program import lower

REPLICAS = (1, 2, 8)


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


def _lines(path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def compare(make, inputs, tmp_path):
    """Run ``make(stream)`` eagerly per replica and compiled on all replicas;
    assert equal results and equal host output; return the compiled output
    lines."""
    eager, compiled = tmp_path / "eager.txt", tmp_path / "compiled.txt"
    for p in (eager, compiled):
        if p.exists():
            p.unlink()
    want = [make(f"file://{eager}")(*ins) for ins in inputs]
    got = xtpu.replicate(make(f"file://{compiled}"), inputs)
    assert len(got) == len(inputs)
    for r, (w, g) in enumerate(zip(want, got, strict=True)):
        w, g = _leaves(w), _leaves(g)
        assert len(w) == len(g), f"replica {r}"
        for a, b in zip(w, g, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, f"replica {r}: {a!r} vs {b!r}"
            if a.dtype == object:
                assert a.tolist() == b.tolist()
            else:
                np.testing.assert_allclose(b, a, rtol=1e-6, err_msg=f"replica {r}")
    assert collections.Counter(_lines(compiled)) == collections.Counter(_lines(eager))
    return _lines(compiled)


def scalars(values, dtype=np.float32):
    return [[dtype(v)] for v in values]


def replica_values(n, start=-3.0):
    """``n`` different values, negative and positive when n > 1."""
    return [start + 1.7 * r for r in range(n)] if n > 1 else [2.5]


# --------------------------------------------------------------------------
# Clusters inside control flow
# --------------------------------------------------------------------------


def make_cond(stream):
    def f(x):
        def yes():
            def host(v):
                xtpu.print("yes", v, output_stream=stream)
                return v * 2.0

            return xtpu.outside_compilation(host, x) + 1.0

        def no():
            xtpu.outside_compilation(lambda v: xtpu.print("no", v, output_stream=stream), x)
            return x - 1.0

        return xtpu.cond(x > 0.0, yes, no)

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_cluster_in_cond_runs_when_the_branch_runs(n, tmp_path):
    values = replica_values(n)
    lines = compare(make_cond, scalars(values), tmp_path)
    assert sum(line.startswith("yes") for line in lines) == sum(v > 0 for v in values)
    assert sum(line.startswith("no") for line in lines) == sum(v <= 0 for v in values)


def test_cluster_in_a_branch_not_taken_never_runs(tmp_path):
    lines = compare(make_cond, scalars([1.0, 2.0, 3.0]), tmp_path)
    assert len(lines) == 3 and not any(line.startswith("no") for line in lines)


def make_while(stream):
    def f(x, k):
        def body(i, a):
            def host(i, a):
                xtpu.print("iteration", i, a, output_stream=stream)
                return a * 1.5

            return i + 1, xtpu.outside_compilation(host, i, a)

        return xtpu.while_loop(lambda i, a: i < k, body, (np.int32(0), x))[1]

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_cluster_in_while_runs_once_per_iteration(n, tmp_path):
    counts = [r % 4 for r in range(n)] if n > 1 else [3]  # replica 0 of several: no iteration
    inputs = [[np.float32(1.0 + r), np.int32(c)] for r, c in enumerate(counts)]
    lines = compare(make_while, inputs, tmp_path)
    assert len(lines) == sum(counts)


def make_nested(stream):
    def f(x, k):
        # hlo.if in hlo.while: the host runs on odd iterations only.
        def body(i, a, odd):
            def on_odd():
                def host(v, j):
                    xtpu.print("odd", j, output_stream=stream)
                    return v + 1.0

                return xtpu.outside_compilation(host, a, i)

            return i + 1, xtpu.cond(odd, on_odd, lambda: a * 2.0), ~odd

        a = xtpu.while_loop(lambda i, a, odd: i < k, body, (np.int32(0), x, np.bool_(False)))[1]

        # hlo.while in hlo.if: the host runs twice, when the branch runs.
        def loop():
            def step(j, b):
                xtpu.outside_compilation(lambda u: xtpu.print("inner", u, output_stream=stream), j)
                return j + 1, b - 1.0

            return xtpu.while_loop(lambda j, b: j < 2, step, (np.int32(0), a))[1]

        return xtpu.cond(a > 10.0, loop, lambda: a)

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_if_in_while_and_while_in_if(n, tmp_path):
    counts = [1 + r % 5 for r in range(n)] if n > 1 else [5]
    inputs = [[np.float32(1.0), np.int32(c)] for c in counts]
    lines = compare(make_nested, inputs, tmp_path)
    assert sum(line.startswith("odd") for line in lines) == sum(c // 2 for c in counts)


# --------------------------------------------------------------------------
# Host control flow, several clusters, inputs and outputs
# --------------------------------------------------------------------------


def make_host_control_flow(stream):
    def f(x):
        def host(v):
            # Collatz steps of int(v): a while loop and a cond on the host.
            n0 = xtpu.cast(v, xtpu.int32)

            def step(n, c):
                half = xtpu.cast(n / 2, xtpu.int32)
                nxt = xtpu.cond(half * 2 == n, lambda: half, lambda: 3 * n + 1)
                return nxt, c + 1

            _, steps = xtpu.while_loop(lambda n, c: n > 1, step, (n0, np.int32(0)))
            xtpu.print("collatz", n0, steps, output_stream=stream)
            return steps

        return xtpu.outside_compilation(host, x + 1.0) * 2  # needs the device: no head

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_host_control_flow_inside_a_cluster(n, tmp_path):
    lines = compare(make_host_control_flow, scalars([5 + 3 * r for r in range(n)]), tmp_path)
    assert len(lines) == n
    # The control flow ran on the host: the device program has none.
    text = lower(make_host_control_flow("stdout"), scalars([6])).compile().as_text()
    device = text[text.index("tpu.replicate") : text.index("func.func @host_")]
    assert "hlo.while" not in device and "hlo.while" in text[text.index("func.func @host_") :]


def make_many(stream):
    def f(x, m):
        three = xtpu.outside_compilation(lambda: xtpu.constant(3.0))  # no inputs
        xtpu.outside_compilation(lambda: xtpu.print("hello", output_stream=stream))  # neither
        y = x * three
        xtpu.outside_compilation(lambda v: xtpu.print("y", v, output_stream=stream), y)  # no outputs

        def host(v, w, k):  # several inputs and outputs, shapes and dtypes
            total = xtpu.cast(xtpu.math.reduce_sum(v), xtpu.float64)
            return total, w * k, xtpu.math.greater(v, 1.0)

        total, w2, big = xtpu.outside_compilation(host, y, m, np.int32(2))
        z = xtpu.cast(total, xtpu.float32) + xtpu.math.reduce_sum(xtpu.cast(w2, xtpu.float32))
        return z, w2, big, y

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_several_clusters_inputs_and_outputs(n, tmp_path):
    inputs = [
        [np.arange(3, dtype=np.float32) + r, np.arange(4, dtype=np.int32).reshape(2, 2) * (r + 1)] for r in range(n)
    ]
    lines = compare(make_many, inputs, tmp_path)
    assert sum(line == "hello" for line in lines) == n


# --------------------------------------------------------------------------
# Host-to-host values
# --------------------------------------------------------------------------


def make_host_to_host(stream):
    def f(x):
        s = xtpu.outside_compilation(lambda v: xtpu.strings.format("x={}", v), x)
        y = x * 3.0

        def host(t, v):
            xtpu.print(t, v, output_stream=stream)
            return xtpu.strings.to_number(xtpu.strings.format("{}", v)) + 1.0

        return xtpu.outside_compilation(host, s, y) - y

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_string_from_one_cluster_to_a_later_one(n, tmp_path):
    lines = compare(make_host_to_host, scalars(replica_values(n)), tmp_path)
    assert len(lines) == n and all(line.startswith("x=") for line in lines)
    compiled = lower(make_host_to_host("stdout"), scalars([1.0])).compile()
    text = compiled.as_text()
    # Cluster 0 needs only the input: a head cluster on the host, whose
    # string cluster 1 reads on the host (a replica input of the device
    # program that the device never receives).
    assert 'tpu.recv_at_host "host_compute_channel_replica_inputs" {tpu.held} : tensor<!hlo.string>' in text
    device = text[text.index("tpu.replicate([%arg0] as %input0_1") : text.index("func.func @host_")]
    assert "!hlo.string" not in device


def test_host_to_host_value_in_a_loop(tmp_path):
    # Both clusters in the loop body: the value goes host to host on every
    # iteration, in step with it.
    def make(stream):
        def f(x):
            def body(i, a):
                s = xtpu.outside_compilation(lambda v, j: xtpu.strings.format("{}:{}", [j, v]), a, i)
                xtpu.outside_compilation(lambda t: xtpu.print(t, output_stream=stream), s)
                return i + 1, a + 1.0

            return xtpu.while_loop(lambda i, a: i < 4, body, (np.int32(0), x))[1]

        return f

    lines = compare(make, scalars([0.5, 7.0]), tmp_path)
    assert len(lines) == 8


# --------------------------------------------------------------------------
# Head and tail clusters
# --------------------------------------------------------------------------


def make_head_tail(stream):
    def f(x):
        scale = xtpu.outside_compilation(
            lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v)) + 1.0, x
        )  # head: needs only the input
        tag = xtpu.outside_compilation(lambda v: xtpu.strings.format("in={}", v), x)  # head, host only
        y = xtpu.cross_replica_sum(x * scale)
        xtpu.outside_compilation(lambda t, v: xtpu.print(t, v, output_stream=stream), tag, y)  # tail
        return y

    return f


@pytest.mark.parametrize("n", REPLICAS)
def test_head_and_tail_clusters_run_on_the_host_before_and_after(n, tmp_path):
    values = [1.0 + r for r in range(n)]
    inputs = scalars(values)
    compiled = lower(make_head_tail(f"file://{tmp_path / 'out.txt'}"), inputs).compile()
    after = compiled.stages["tpu-extract-head-tail-outside-compilation"]
    assert after.count('placement = "host"') == 2
    assert 'tpu.outside_compilation_cluster = "0,1"' in after
    assert 'tpu.outside_compilation_cluster = "2"' in after
    text = compiled.as_text()
    assert "func.func @host_" not in text and "send_to_host" not in text
    out = compiled(inputs)
    total = sum(v * (v + 1.0) for v in values)
    assert [float(o[0]) for o in out] == pytest.approx([total] * n)
    lines = _lines(tmp_path / "out.txt")
    assert sorted(lines) == sorted(f"in={v:g} {total:g}" for v in values)


def test_error_in_a_head_cluster_names_the_cluster():
    def f(x):
        bad = xtpu.outside_compilation(lambda: xtpu.strings.to_number(xtpu.constant("oops")))
        return x + bad

    compiled = lower(f, scalars([1.0])).compile()
    assert 'placement = "host"' in compiled.as_text()
    with pytest.raises(xtpu.runtime.errors.HostComputeError) as info:
        compiled(scalars([1.0]))
    assert info.value.cluster == "0"
    assert "oops" in str(info.value)


# --------------------------------------------------------------------------
# The runtime's host-to-host channels
# --------------------------------------------------------------------------


def test_host_to_host_message_of_an_earlier_run_is_dropped(tmp_path):
    compiled = lower(make_host_to_host(f"file://{tmp_path / 'out.txt'}"), scalars([1.0, 2.0])).compile()
    ex = compiled.executable
    # Left behind by an aborted run (generation 0 < the next run's).
    for r in range(2):
        ex.channels.send("host_compute_channel_0_to_1", r, (ex.state.generation[0], np.array("stale", dtype=object)))
    out = compiled(scalars([1.0, 2.0]))
    assert [float(o[0]) for o in out] == pytest.approx([1.0, 1.0])
    assert sorted(_lines(tmp_path / "out.txt")) == ["x=1 3", "x=2 6"]


def test_failed_run_leaves_nothing_behind_on_host_to_host_channels():
    # Replica 0's first cluster fails before it sends its string; replica 1's
    # may have sent it when the run stops. The next run is not confused.
    def f(x):
        def first(v):
            s = xtpu.cond(v > 0.0, lambda: xtpu.strings.format("{}", v), lambda: xtpu.constant("oops"))
            return s, xtpu.strings.to_number(s)

        s, n = xtpu.outside_compilation(first, x)
        y = x + n
        return xtpu.outside_compilation(lambda t, v: xtpu.strings.to_number(t) + v, s, y)

    compiled = lower(f, scalars([1.0, 2.0])).compile(timeout=5)
    assert [float(o[0]) for o in compiled(scalars([1.0, 2.0]))] == [3.0, 6.0]
    with pytest.raises(xtpu.runtime.errors.HostComputeError) as info:
        compiled(scalars([-1.0, 2.0]))
    assert info.value.cluster == "0" and info.value.replica == 0
    assert [float(o[0]) for o in compiled(scalars([3.0, 4.0]))] == [9.0, 12.0]
