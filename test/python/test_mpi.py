"""The MPI backend (runtime/mpi.py, xtpu.distributed): the suite starts
``mpiexec -n 2`` and ``-n 4`` itself (ranks may outnumber cores).

Results under MPI are compared bit for bit with the same programs run here
on threads (mpi_cases.py), and mpi_cases.py also runs, on every rank, suite
tests that check themselves against numpy (the seed examples, the
logical-device end-to-end cases). Failures (mpi_failures.py): a host
function raising on one rank, a rank that never reaches a collective and a
rank killed mid-step end every rank within the timeout and ``mpiexec``
exits non-zero.
"""

import os
import pickle
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("mpi4py")

from xtpu.tools.launch import find_mpiexec  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found (pip install 'xtpu[mpi]')")

TIMEOUT = 5.0  # XTPU_TIMEOUT of the failure runs
LIMIT = 120  # a run that is not over by then hangs


def env(**extra):
    e = dict(os.environ, XTPU_BACKEND="mpi", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    e.pop("XTPU_MPI_OUTPUTS", None)
    e.update(extra)
    return e


def run(cmd, env, cwd=None):
    """``subprocess.run`` whose timeout ends the whole process group (the
    ranks too: killing mpiexec alone would leave their pipes open)."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True
    ) as p:
        try:
            out, err = p.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            pytest.fail(f"{cmd} did not end within {LIMIT} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def mpiexec(n, args, **extra):
    start = time.monotonic()
    proc = run([MPIEXEC, "-n", str(n), sys.executable, *args], env(**extra), HERE)
    return proc, time.monotonic() - start


def same(a, b):
    """Equal structure, dtypes, shapes and bits."""
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def threads_results():
    sys.path.insert(0, HERE)
    import mpi_cases

    return mpi_cases.run_cases()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_programs_on_ranks_equal_the_threads_run(n, tmp_path, threads_results):
    proc, _ = mpiexec(n, ["mpi_cases.py", str(tmp_path)], XTPU_TIMEOUT="30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for k in range(n):
        assert f"rank {k} of {n}: cases" in proc.stdout
        assert "suite functions 16" in proc.stdout
        with open(tmp_path / f"rank{k}.pkl", "rb") as f:
            got = pickle.load(f)
        assert sorted(got) == sorted(threads_results)
        for case, want in threads_results.items():
            assert same(got[case], want), (k, case)


def test_launcher_runs_an_unchanged_script_on_ranks(tmp_path, threads_results):
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys, pickle, numpy as np, xtpu\n"
        f"sys.path.insert(0, {HERE!r})\n"
        "import mpi_cases\n"
        "out = xtpu.replicate(mpi_cases.four_replicas, [[v] for v in mpi_cases._floats(4, (5,), 1)])\n"
        "i = xtpu.distributed.process_index()\n"
        f"pickle.dump((i, xtpu.distributed.process_count(), out), open({str(tmp_path)!r} + f'/out{{i}}.pkl', 'wb'))\n"
    )
    e = dict(os.environ)
    e.pop("XTPU_BACKEND", None)
    proc = run([sys.executable, "-m", "xtpu.launch", "-n", "2", str(script)], e)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for k in range(2):
        with open(tmp_path / f"out{k}.pkl", "rb") as f:
            i, size, out = pickle.load(f)
        assert (i, size) == (k, 2)
        assert same(out, threads_results["four_replicas"])


def test_xtpu_run_with_the_mpi_backend_prints_what_the_threads_run_prints(tmp_path):
    import xtpu

    xs = [np.array([r * r, 0.5 * r], np.float32) for r in range(4)]
    text = xtpu.lower(lambda x: xtpu.cross_replica_sum(x, [[0, 3], [1, 2]]) * 2.0, [[x] for x in xs]).as_text()
    (tmp_path / "m.mlir").write_text(text)
    ins = []
    for r, x in enumerate(xs):
        np.save(tmp_path / f"x{r}.npy", x)
        ins += ["-i", str(tmp_path / f"x{r}.npy")]
    argv = ["-m", "xtpu.tools.run", str(tmp_path / "m.mlir"), *ins]
    threads = run([sys.executable, *argv], dict(os.environ, XTPU_BACKEND="threads"))
    assert threads.returncode == 0, threads.stderr
    proc, _ = mpiexec(2, [*argv, "--backend", "mpi"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == threads.stdout  # rank 0 prints every replica, once
    # replicas 0 and 3 sum together, 1 and 2: 2 * ([0, 0] + [9, 1.5]), 2 * ([1, .5] + [4, 1])
    assert proc.stdout.count("replica 3:\n  output 0: float32[2] = [18.,  3.]") == 1, proc.stdout
    assert proc.stdout.count("replica 1:\n  output 0: float32[2] = [10.,  3.]") == 1, proc.stdout


def raised(out):
    """``{rank: its error line}`` from the ranks' ``rank R raised: ...``
    lines (ranks' lines may run together in mpiexec's output)."""
    return dict((int(m[0]), m[1]) for m in re.findall(r"rank (\d) raised: (.*?)(?=rank \d raised: |\n|$)", out))


def test_a_host_function_raising_on_one_rank_stops_every_rank():
    proc, elapsed = mpiexec(2, ["mpi_failures.py", "raise"], XTPU_TIMEOUT=str(TIMEOUT))
    out = proc.stdout
    assert proc.returncode != 0
    assert elapsed < LIMIT / 2
    assert "rank 0 ran a step" in out and "rank 1 ran a step" in out
    errors = raised(out)
    # The failing rank names the replica, the op, the cluster and itself ...
    assert errors[1].startswith("HostComputeError: replica 3, op hlo.string_to_number, cluster '0'"), out
    assert "(on rank 1 of 2)" in errors[1]
    # ... and the other rank raises the same error at once, not after the timeout.
    if 0 in errors:  # unless MPI_Abort ended it first
        assert errors[0].startswith("RemoteRankError"), out
        assert "rank 1 failed: replica 3, op hlo.string_to_number" in errors[0]


def test_operands_of_different_shapes_on_two_ranks_name_both_replicas_and_the_op():
    # The threads backend's "mismatched operands" error (test_communicator.py),
    # not an MPI truncation: each rank learns the other's operand from its header.
    proc, elapsed = mpiexec(2, ["mpi_failures.py", "mismatch"], XTPU_TIMEOUT=str(TIMEOUT))
    assert proc.returncode != 0
    assert elapsed < LIMIT / 2
    errors = raised(proc.stdout)
    assert errors, proc.stdout + proc.stderr
    expected = (
        "XtpuRuntimeError: mismatched operands in ccl.all_reduce of group [0, 1]: "
        "replica 0 (rank 0) has float32[3], replica 1 (rank 1) has float32[4]"
    )
    for rank, error in errors.items():
        assert error == expected, (rank, proc.stdout)
    assert "truncat" not in (proc.stdout + proc.stderr).lower()


def test_ranks_calling_different_programs_raise_instead_of_summing_them():
    # Same group, same operand shape: before, the two programs' operands
    # were summed together without a word.
    proc, elapsed = mpiexec(2, ["mpi_failures.py", "order"], XTPU_TIMEOUT=str(TIMEOUT))
    assert proc.returncode != 0 and elapsed < LIMIT / 2
    errors = raised(proc.stdout)
    assert errors, proc.stdout + proc.stderr
    for rank, error in errors.items():
        other = 1 - rank
        assert re.search(
            rf"ccl\.all_reduce of group \[0, 1, 2, 3\]: rank {other} sent the operands of call \d "
            rf"of program [0-9a-f]{{16}} while rank {rank} is in call \d of program [0-9a-f]{{16}}: "
            "under MPI every rank must call the same compiled programs in the same order",
            error,
        ), error


def test_a_rank_that_never_reaches_the_collective_times_out_the_others():
    proc, elapsed = mpiexec(2, ["mpi_failures.py", "late"], XTPU_TIMEOUT=str(TIMEOUT))
    assert proc.returncode != 0
    assert TIMEOUT <= elapsed < TIMEOUT + 30  # the sleeping rank does not hold the job
    errors = raised(proc.stdout)
    assert sorted(errors) == [0], proc.stdout
    assert errors[0].startswith("RuntimeTimeoutError") and "ccl.all_reduce" in errors[0]
    assert "rank 1 (replicas [2, 3]) never sent their operands" in errors[0]


def test_a_rank_killed_mid_step_ends_the_job():
    proc, elapsed = mpiexec(2, ["mpi_failures.py", "kill"], XTPU_TIMEOUT=str(TIMEOUT))
    assert proc.returncode != 0
    assert elapsed < TIMEOUT + 30
    assert "rank 0 ran a step" in proc.stdout


# -- the local pool (runtime/mpi_pool.py): plain `python script.py` ----------------------


def pool(n, args, **extra):
    """``python args...`` asking for a local pool of ``n`` processes."""
    start = time.monotonic()
    e = env(XTPU_NUM_PROCESSES=str(n), **extra)
    proc = run([sys.executable, *args], e, HERE)
    return proc, time.monotonic() - start


def workers_of(out):
    m = re.search(r"pool workers \[([\d, ]*)\]", out)
    assert m, out
    return [int(p) for p in m[1].split(",")]


def gone(pids, within=5.0):
    """True when none of ``pids`` is alive (zombies count as gone) within ``within`` s."""

    def alive(p):
        try:
            with open(f"/proc/{p}/stat") as f:
                return f.read().split(") ")[1][0] != "Z"
        except FileNotFoundError:
            return False

    end = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("n", [2])  # more ranks: test_programs_on_ranks_equal_the_threads_run
def test_local_pool_runs_a_plain_script_as_threads_do(n, tmp_path, threads_results):
    # Only rank 0 runs the script; the programs reach the workers as IR text.
    proc, _ = pool(n, ["mpi_cases.py", str(tmp_path)], XTPU_TIMEOUT="30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" of ") == 1 and f"rank 0 of {n}: cases" in proc.stdout
    assert "suite functions 16" in proc.stdout
    assert sorted(os.listdir(tmp_path)) == ["rank0.pkl"]
    with open(tmp_path / "rank0.pkl", "rb") as f:
        got = pickle.load(f)
    assert sorted(got) == sorted(threads_results)
    for case, want in threads_results.items():
        assert same(got[case], want), case
    workers = workers_of(proc.stdout)
    assert len(workers) == n - 1 and gone(workers)


def test_local_pool_host_function_raising_on_a_worker_raises_in_the_script():
    proc, elapsed = pool(2, ["mpi_failures.py", "raise"], XTPU_TIMEOUT=str(TIMEOUT))
    assert proc.returncode != 0 and elapsed < LIMIT / 2
    errors = raised(proc.stdout)
    assert sorted(errors) == [0], proc.stdout  # only the script's process prints
    assert errors[0].startswith("RemoteRankError: replica "), errors
    assert (
        "rank 1 failed: replica 3, op hlo.string_to_number, cluster '0': host computation raised ValueError"
    ) in errors[0]
    assert "(on rank 1 of 2)" in errors[0]
    assert "Traceback" in proc.stderr


def test_local_pool_workers_end_when_the_script_is_killed():
    proc, _ = pool(2, ["mpi_failures.py", "parent"])
    assert proc.returncode == -signal.SIGKILL
    assert gone(workers_of(proc.stdout), within=5.0)


def test_local_pool_a_killed_worker_ends_the_script():
    # MPICH's process manager ends the job, the script's process included:
    # non-zero, within the timeout, no worker left.
    proc, elapsed = pool(2, ["mpi_failures.py", "kill"], XTPU_TIMEOUT=str(TIMEOUT))
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and elapsed < TIMEOUT + 30, (proc.returncode, elapsed, said)
    assert "rank 0 ran a step" in proc.stdout, said
    assert gone(workers_of(proc.stdout), within=10.0), said


@pytest.fixture(scope="module")
def digits_threads(tmp_path_factory):
    pytest.importorskip("sklearn")
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_digits

    d = tmp_path_factory.mktemp("digits")
    path = d / "threads.npz"
    assert train_digits.main(DIGITS + ["--save-weights", str(path), "--logdir", str(d / "logs")]) == 0
    from test_summary import scalars

    with np.load(path) as w:
        return {k: w[k] for k in w.files}, scalars(str(d / "logs"))


DIGITS = ["--steps", "16", "--steps-per-run", "4", "--log-every", "8", "--min-accuracy", "0.5"]


@pytest.mark.parametrize("n", [2, "pool"])  # more ranks: test_programs_on_ranks_equal_the_threads_run
def test_train_digits_on_ranks_gives_the_threads_weights(n, tmp_path, digits_threads):
    out = tmp_path / "w.npz"
    argv = [
        os.path.join(ROOT, "examples", "train_digits.py"),
        *DIGITS,
        "--backend",
        "mpi",
        "--save-weights",
        str(out),
        "--logdir",
        str(tmp_path / "logs"),
    ]
    if n == "pool":  # plain `python train_digits.py` with a local pool of 2 processes
        n = 2
        proc, _ = pool(n, argv, XTPU_BACKEND="threads")
    else:
        proc, _ = mpiexec(n, argv, XTPU_BACKEND="threads")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("held-out accuracy") == 1  # rank 0 reports
    assert f"on {n} processes" in proc.stdout
    # Each replica's host prints its log line (8 replicas, steps 0, 8, 15).
    for r in range(8):
        assert proc.stdout.count(f"[replica {r}] step 8: local loss") == 1
    weights, logged = digits_threads
    with np.load(out) as w:
        assert sorted(w.files) == sorted(weights)
        for k in w.files:
            assert w[k].tobytes() == weights[k].tobytes(), k
    # Summaries are written once per step, by replica 0's host (rank 0), as on threads.
    from test_summary import scalars

    assert [step for _, _, step in logged] == [0, 8, 15]
    assert scalars(str(tmp_path / "logs")) == logged


@pytest.mark.parametrize("n", [2, 4])
def test_mpi_communicator_directly_and_as_an_executables_communicator(n):
    proc, _ = mpiexec(n, ["mpi_communicator_case.py"], XTPU_BACKEND="threads", XTPU_TIMEOUT="20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("MPICommunicator ok") == n


def test_xtpu_run_failing_on_one_rank_exits_non_zero_on_every_rank(tmp_path):
    from mpi_failures import step

    import xtpu

    (tmp_path / "m.mlir").write_text(xtpu.lower(step, [[np.float32(r)] for r in range(4)]).as_text())
    ins = []
    for r in range(4):
        np.save(tmp_path / f"x{r}.npy", np.float32(r + (0.5 if r == 3 else 0)))  # replica 3's host raises
        ins += ["-i", str(tmp_path / f"x{r}.npy")]
    proc, elapsed = mpiexec(
        2, ["-m", "xtpu.tools.run", str(tmp_path / "m.mlir"), *ins, "--backend", "mpi"], XTPU_TIMEOUT=str(TIMEOUT)
    )
    assert proc.returncode != 0 and elapsed < TIMEOUT + 30
    err = proc.stderr
    assert re.search(r"xtpu-run: replica 3, op hlo.string_to_number[^\n]*?\(on rank 1 of 2\)", err), err
    # rank 0's error, from the replica of its own that ran the exchange
    assert re.search(r"xtpu-run: replica [01], op ccl.all_reduce: rank 1 failed: replica 3", err), err


@pytest.mark.parametrize("P,R", [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8), (3, 6)])
def test_replica_owner_is_the_task_of_the_replicas_host_device(P, R):
    # TF: a topology of P tasks, each holding R/P consecutive cores of a
    # line; the default device assignment puts replica r's host on task t.
    import xtpu
    from xtpu.replication.device_assignment import device_assignment
    from xtpu.runtime.mpi import replica_owner

    per = R // P
    coords = [[[t * per + i, 0, 0, 0] for i in range(per)] for t in range(P)]
    da = device_assignment(xtpu.Topology(mesh_shape=[R, 1, 1, 1], device_coordinates=coords), num_replicas=R)
    tasks = [int(da.host_device(r).split("/task:")[1].split("/")[0]) for r in range(R)]
    assert tasks == [replica_owner(r, R, P) for r in range(R)]
    assert [da.lookup_replicas(t, 0) for t in range(P)] == [
        [r for r in range(R) if replica_owner(r, R, P) == t] for t in range(P)
    ]
