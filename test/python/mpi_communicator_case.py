"""``MPICommunicator`` under ``mpiexec -n P`` (run by test_mpi.py): used
directly, one participant per rank, every collective against numpy; and
passed to an ``Executable`` as its communicator, where each rank then runs
only its replica. Exits non-zero (an assertion) on a wrong result."""

import numpy as np

import xtpu
from xtpu.runtime.executor import Executable
from xtpu.runtime.mpi_communicator import MPICommunicator


def main() -> None:
    comm = MPICommunicator(timeout=20.0)
    r, n = comm.rank, comm.num_participants
    xs = [np.arange(2 * n, dtype=np.float32).reshape(n, 2) * (p + 1) + p for p in range(n)]
    x = xs[r]
    np.testing.assert_array_equal(comm.all_reduce(r, x, None, "add"), sum(xs))
    np.testing.assert_array_equal(comm.all_reduce(r, x, None, "max"), np.maximum.reduce(xs))
    np.testing.assert_array_equal(comm.all_gather(r, x, None, 1), np.concatenate(xs, axis=1))
    np.testing.assert_array_equal(comm.reduce_scatter(r, x, None, 0), np.split(sum(xs), n)[r])
    np.testing.assert_array_equal(
        comm.all_to_all(r, x, None, 0, 1), np.concatenate([np.split(v, n)[r] for v in xs], axis=1)
    )
    pairs = [[p, (p + 1) % n] for p in range(n)]
    got = comm.collective_permute(r, np.float64(r), pairs)
    assert got.shape == () and float(got) == (r - 1) % n
    comm.barrier(r)

    def fn(v):
        return xtpu.cross_replica_sum(v), xtpu.cross_replica_sum(
            v, [[p for p in range(n) if p % 2 == k] for k in (0, 1)]
        )

    ins = [[np.float32(p + 1)] for p in range(n)]
    module = xtpu.lower(fn, ins).compile().module
    exe = Executable(
        module,
        communicator=lambda abort, timeout: MPICommunicator(abort_signal=abort, timeout=timeout, num_participants=n),
    )
    outs = exe.run([i[0] for i in ins])
    assert [float(o) for o in outs[:n]] == [n * (n + 1) / 2] * n
    assert [float(o) for o in outs[n:]] == [sum(p + 1 for p in range(n) if p % 2 == q % 2) for q in range(n)]
    print(f"rank {r}: MPICommunicator ok", flush=True)


if __name__ == "__main__":
    main()
