"""Collectives between device workers: the ``Communicator`` interface.

A communicator connects ``num_participants`` participants, numbered
``0 .. num_participants - 1`` (the flattened ids of the device workers, one
per ``(replica, logical core)``; the methods call this id ``replica``). The
collectives follow the StableHLO spec sections of the same name
(https://github.com/openxla/stablehlo/blob/main/docs/spec.md): ``all_reduce``,
``all_gather``, ``reduce_scatter``, ``all_to_all``, ``collective_permute``,
with ``replica_groups`` given directly in participant ids.

Two implementations:

- :class:`ThreadCommunicator`: participants are threads of this process (the
  embedded default).
- :class:`~xtpu.runtime.mpi_communicator.HybridCommunicator`: participants
  spread over MPI ranks (threads within a rank), the MPI backend's
  (runtime/mpi.py); ``MPICommunicator`` is its one-participant-per-rank form
  (``mpiexec -n R python ...``), importable from here.

Contract common to both:

- Every participant of a group calls the same collectives on that group in
  the same order, with operands of one shape and dtype.
- ``all_reduce`` and ``reduce_scatter`` combine the contributions once, in
  ascending participant id: ``((v[a] + v[b]) + v[c]) + ...`` for the group's
  ids sorted ``a < b < c ...`` (whatever order the group lists them in), so
  results are bitwise reproducible and identical on every member. A large
  reduction (:data:`PARALLEL_REDUCE_OPS`) splits its elements over the
  cores, each element still combined in that order (the same bits).
- ``all_gather``, ``reduce_scatter`` and ``all_to_all`` order their pieces
  by position in the group as listed (StableHLO).
- Results are read-only numpy arrays (members of a group may share one
  result object); a group of one gets a read-only view of its own operand
  (StableHLO's result equals it: no copy), larger groups new arrays that
  alias no operand. Copy before writing.
- Waits end with :class:`~xtpu.runtime.errors.RuntimeTimeoutError` after
  ``timeout`` seconds or :class:`~xtpu.runtime.errors.Aborted` as soon as the
  run's abort signal is set.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from time import monotonic

import numpy as np

from xtpu.dialects import bfloat16 as B16
from xtpu.dialects.tensor_spec import np_kind

from .blas_budget import budget
from .errors import Aborted, RuntimeTimeoutError, XtpuRuntimeError
from .workers import MAX_WAIT, AbortSignal, resolve_timeout, run_workers, will_block

__all__ = [
    "Communicator",
    "ThreadCommunicator",
    "REDUCTIONS",
    "normalize_replica_groups",
    "normalize_source_target_pairs",
    "reduce_in_order",
]

REDUCTIONS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    # StableHLO's and/or: bitwise on integers, logical on booleans (the ccl
    # verifier refuses them on floats).
    "and": np.bitwise_and,
    "or": np.bitwise_or,
}
"""Reduction names accepted by ``all_reduce`` / ``reduce_scatter`` (every
kind ``hlo.reduction`` parses)."""


# ---------------------------------------------------------------------------
# Validation and numpy semantics shared by the implementations.


def _fmt_group(group: Sequence[int]) -> str:
    g = list(group)
    if len(g) > 16:
        return "[" + ", ".join(map(str, g[:8])) + ", ..., " + ", ".join(map(str, g[-2:])) + "]"
    return str(g)


def _fmt_operand(value: np.ndarray) -> str:
    return f"{value.dtype}{list(value.shape)}"


def normalize_replica_groups(
    replica_groups: Sequence[Sequence[int]] | None, num_participants: int
) -> tuple[tuple[int, ...], ...]:
    """Check that ``replica_groups`` partitions ``0 .. num_participants-1``.

    ``None`` or ``[]`` means one group of all participants (StableHLO's
    empty ``replica_groups``).

    Returns:
        The groups as a tuple of int tuples.

    Raises:
        ValueError: a group is empty, an id is out of range or appears twice,
            or some participant is in no group; the message repeats the
            groups and names the offending ids.
    """
    n = num_participants
    if replica_groups is None or len(replica_groups) == 0:
        return (tuple(range(n)),)
    groups = tuple(tuple(int(x) for x in g) for g in replica_groups)
    shown = [list(g) for g in groups]
    problems = []
    seen: dict[int, int] = {}
    for gi, g in enumerate(groups):
        if not g:
            problems.append(f"group {gi} is empty")
        bad = [x for x in g if not 0 <= x < n]
        if bad:
            problems.append(f"group {list(g)} has ids {bad} out of range [0, {n})")
        for x in g:
            if x in seen:
                where = (
                    "twice in group " + str(list(g))
                    if seen[x] == gi
                    else (f"in groups {list(groups[seen[x]])} and {list(g)}")
                )
                problems.append(f"participant {x} appears {where}")
            seen.setdefault(x, gi)
    missing = [x for x in range(n) if x not in seen]
    if missing:
        problems.append(f"participants {missing} are in no group")
    if problems:
        raise ValueError(
            f"replica_groups {shown} must partition the {n} participants "
            f"0..{n - 1} (each id exactly once): " + "; ".join(problems)
        )
    return groups


def normalize_source_target_pairs(
    source_target_pairs: Sequence[Sequence[int]], num_participants: int
) -> tuple[tuple[int, int], ...]:
    """Check ``collective_permute`` pairs (StableHLO C1-C4).

    Each pair is ``[source, target]`` with ids in range; no source and no
    target appears twice.

    Raises:
        ValueError: naming the offending pairs.
    """
    n = num_participants
    pairs = []
    for p in source_target_pairs:
        p = tuple(int(x) for x in p)
        if len(p) != 2:
            raise ValueError(f"source_target_pairs entries must be [source, target], got {list(p)}")
        pairs.append(p)
    bad = [list(p) for p in pairs if not all(0 <= x < n for x in p)]
    if bad:
        raise ValueError(f"source_target_pairs {bad} have ids out of range [0, {n})")
    for side, name in ((0, "source"), (1, "target")):
        ids = [p[side] for p in pairs]
        dups = sorted({x for x in ids if ids.count(x) > 1})
        if dups:
            raise ValueError(f"source_target_pairs {[list(p) for p in pairs]}: {name}s {dups} appear more than once")
    return tuple(pairs)


def permute_components(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, ...]]:
    """The participants of ``collective_permute`` pairs grouped by the pairs
    that connect them (each sorted): data flows only along pairs, so each
    group meets apart. The pairs that halo exchanges give the logical cores
    of every replica are one group per replica: a replica that takes
    another branch of a conditional than the others must not hold them up."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s, t in pairs:
        parent[find(s)] = find(t)
    groups: dict[int, list[int]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(x)
    return sorted(tuple(sorted(g)) for g in groups.values())


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def reduce_in_order(values: Sequence[np.ndarray], reduction: str) -> np.ndarray:
    """Reduce ``values`` left to right: ``((v0 op v1) op v2) op ...``.

    Returns a new array of the operands' shape and dtype (numpy's
    elementwise semantics: integer ``add`` wraps, ``max``/``min`` propagate
    NaN as StableHLO's maximum/minimum do).

    Raises:
        ValueError: unknown ``reduction``.
    """
    try:
        fn = REDUCTIONS[reduction]
    except KeyError:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {sorted(REDUCTIONS)}") from None
    out = np.empty_like(values[0])
    chunks = _reduce_chunks(values)
    if chunks > 1:
        # Every element is still reduced left to right (the same bits);
        # contiguous parts of the elements on ``chunks`` threads at once
        # (numpy releases the GIL in large ufunc loops).
        flat = [v.reshape(-1) for v in values]
        dest = out.reshape(-1)
        bounds = [len(dest) * i // chunks for i in range(chunks + 1)]
        run_workers(
            [
                (
                    f"{reduction} of elements {lo}:{hi}",
                    lambda lo=lo, hi=hi: _fold(fn, [f[lo:hi] for f in flat], dest[lo:hi]),
                )
                for lo, hi in zip(bounds, bounds[1:])
            ],
            AbortSignal(),
        )
        return out
    _fold(fn, values, out)
    return out


def _fold(fn, values: Sequence[np.ndarray], out: np.ndarray) -> None:
    """``out = ((v0 fn v1) fn v2) ...`` in place (bfloat16 sums and products
    one compiled pass each, ml_dtypes' bits: :func:`xtpu.dialects.bfloat16.binary`)."""
    if len(values) == 1:
        out[...] = values[0]
        return
    if out.dtype == B16.BF16 and fn in B16.BINARY_UFUNCS:
        fn = lambda a, b, out, f=fn: B16.binary(f, a, b, out=out)  # noqa: E731
    fn(values[0], values[1], out=out)
    for v in values[2:]:
        fn(out, v, out=out)


#: Element operations (operand size x (operands - 1)) from which a
#: reduction is split over threads, and the fewest elements a thread
#: gets: below them the hand-off to another thread (~25 us on this 2-core
#: machine) costs more than it saves (benchmarks/run.py's
#: cross_replica_sum of 1e6 float32: R=8 0.82 -> 0.47 ms, R=4 0.27 -> 0.25 ms;
#: R=2, one add: 0.12 -> 0.17 ms, so not split).
PARALLEL_REDUCE_OPS = 1 << 21
PARALLEL_REDUCE_MIN_CHUNK = 1 << 18


def _reduce_chunks(values: Sequence[np.ndarray]) -> int:
    """How many threads reduce ``values`` (1: this one alone): the cores
    xtpu may use (TF's intra-op parallelism threads when set, else the
    process's cores), when the work is large enough and every operand is
    one C-contiguous block of numbers."""
    size = values[0].size
    if len(values) < 2 or size * (len(values) - 1) < PARALLEL_REDUCE_OPS:
        return 1
    if np_kind(values[0].dtype) not in "biufc" or not all(v.flags.c_contiguous for v in values):
        return 1
    return max(1, min(budget(), size // PARALLEL_REDUCE_MIN_CHUNK))


def _check_dim(op: str, name: str, dim: int, value: np.ndarray, parts: int | None) -> int:
    dim = int(dim)
    if not 0 <= dim < value.ndim:
        raise ValueError(
            f"{op}: {name} {dim} is out of range for an operand of rank {value.ndim} ({_fmt_operand(value)})"
        )
    if parts is not None and value.shape[dim] % parts:
        raise ValueError(
            f"{op}: dimension {dim} of size {value.shape[dim]} ({_fmt_operand(value)}) "
            f"does not divide evenly into {parts} parts (the group size)"
        )
    return dim


class Communicator(ABC):
    """Collectives among ``num_participants`` participants (see module doc).

    Every method is called by each participant of the collective with its
    own id as ``replica`` and its own operand; every call blocks until all
    participants of its group have arrived.

    Common errors of every method:
        ValueError: invalid ``replica_groups`` / pairs / dimensions / reduction
            (raised before waiting).
        XtpuRuntimeError: the group's operands differ in shape or dtype, or
            the participants called different collectives.
        RuntimeTimeoutError: the group did not complete within the timeout;
            names the participants that never arrived.
        Aborted: the run's abort signal was set.
    """

    num_participants: int

    @abstractmethod
    def all_reduce(
        self,
        replica: int,
        value: np.ndarray,
        replica_groups: Sequence[Sequence[int]] | None,
        reduction: str = "add",
        channel_id: int | None = None,
    ) -> np.ndarray:
        """StableHLO ``all_reduce``: the reduction of the operands of the
        caller's group, combined in ascending participant id; same shape and
        dtype as ``value``. ``reduction`` is one of ``add, mul, max, min``."""

    @abstractmethod
    def all_gather(
        self,
        replica: int,
        value: np.ndarray,
        replica_groups: Sequence[Sequence[int]] | None,
        dim: int,
        channel_id: int | None = None,
    ) -> np.ndarray:
        """StableHLO ``all_gather``: the group's operands concatenated along
        ``dim`` in group order; shape ``value.shape`` with ``dim`` multiplied
        by the group size."""

    @abstractmethod
    def reduce_scatter(
        self,
        replica: int,
        value: np.ndarray,
        replica_groups: Sequence[Sequence[int]] | None,
        dim: int,
        reduction: str = "add",
        channel_id: int | None = None,
    ) -> np.ndarray:
        """StableHLO ``reduce_scatter``: the group's reduction (as in
        ``all_reduce``) split along ``dim`` into group-size parts; the member
        at position ``i`` of its group gets part ``i``. ``value.shape[dim]``
        must divide by the group size."""

    @abstractmethod
    def all_to_all(
        self,
        replica: int,
        value: np.ndarray,
        replica_groups: Sequence[Sequence[int]] | None,
        split_dimension: int,
        concat_dimension: int,
        channel_id: int | None = None,
    ) -> np.ndarray:
        """StableHLO ``all_to_all`` (``split_count`` = group size): each
        member splits its operand along ``split_dimension`` into group-size
        parts; member ``j`` receives part ``j`` of every member, concatenated
        along ``concat_dimension`` in group order."""

    @abstractmethod
    def collective_permute(
        self,
        replica: int,
        value: np.ndarray,
        source_target_pairs: Sequence[Sequence[int]],
        channel_id: int | None = None,
    ) -> np.ndarray:
        """StableHLO ``collective_permute``: for each ``[source, target]``
        pair, the target receives the source's operand; a participant that is
        no target gets zeros of its operand's shape and dtype. Participants
        in no pair return at once without waiting."""

    @abstractmethod
    def barrier(self, replica: int) -> None:
        """Wait until all ``num_participants`` participants called it."""

    def reset(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Forget in-flight collectives after a failed or aborted run; call
        only while no participant is inside a collective. No-op by default."""


# The results of each collective from its group's operands, in group order:
# one definition for the threads' rendezvous (the last member to arrive
# computes them) and for the sequential mode (runtime/sequential.py), which
# has every replica's operand at once.


def all_reduce_results(values: Sequence[np.ndarray], order: Sequence[int], reduction: str) -> list:
    """StableHLO ``all_reduce`` of one group: ``order`` lists the positions
    by ascending participant id (the reduction order); every member gets the
    same read-only result."""
    out = _readonly(reduce_in_order([values[i] for i in order], reduction))
    return [out] * len(values)


def all_gather_results(values: Sequence[np.ndarray], dim: int) -> list:
    """StableHLO ``all_gather`` of one group: the operands concatenated
    along ``dim`` in group order, one read-only result for every member."""
    out = _readonly(np.concatenate(values, axis=dim))
    return [out] * len(values)


def reduce_scatter_results(values: Sequence[np.ndarray], order: Sequence[int], reduction: str, dim: int) -> list:
    """StableHLO ``reduce_scatter`` of one group: the reduction (as
    :func:`all_reduce_results`) split along ``dim``, part ``i`` to the
    member at position ``i``."""
    total = _readonly(reduce_in_order([values[i] for i in order], reduction))
    return np.split(total, len(values), axis=dim)


def all_to_all_results(values: Sequence[np.ndarray], split_dimension: int, concat_dimension: int) -> list:
    """StableHLO ``all_to_all`` of one group: member ``j`` gets part ``j``
    of every member's operand, concatenated in group order."""
    n = len(values)
    parts = [np.split(v, n, axis=split_dimension) for v in values]
    return [_readonly(np.concatenate([p[j] for p in parts], axis=concat_dimension)) for j in range(n)]


def permute_results(values: Sequence[np.ndarray], sources: Sequence[int | None]) -> list:
    """StableHLO ``collective_permute`` within one connected group:
    ``sources[i]`` is the position whose operand member ``i`` gets (None:
    zeros of its own operand's shape)."""
    return [_readonly(np.zeros_like(values[i]) if s is None else values[s].copy()) for i, s in enumerate(sources)]


def permute_plan(pairs: Sequence[tuple[int, int]]) -> list[tuple[tuple[int, ...], list[int | None]]]:
    """The connected groups of ``pairs`` (normalized), each with the
    ``sources`` of :func:`permute_results`; the participants its pairs
    connect meet apart."""
    out = []
    for group in permute_components(pairs):
        pos = {p: i for i, p in enumerate(group)}
        sources: list[int | None] = [None] * len(group)
        for s, t in pairs:
            if t in pos:
                sources[pos[t]] = pos[s]
        out.append((group, sources))
    return out


# ---------------------------------------------------------------------------
# In-process implementation.


_MISSING = object()


class _Record:
    """One use (generation) of a group's rendezvous."""

    __slots__ = ("values", "metas", "arrived", "waiters", "done", "results", "error")

    def __init__(self, n: int) -> None:
        self.values: list = [_MISSING] * n
        self.metas: list = [None] * n
        self.arrived = 0
        self.waiters: list[threading.Lock] = []
        self.done = False
        self.results: list | None = None
        self.error: tuple | None = None  # (cls, message)


class _Rendezvous:
    __slots__ = ("group", "lock", "current", "ascending")

    def __init__(self, group: tuple[int, ...]) -> None:
        self.group = group
        # group positions sorted by participant id (the reduction order)
        self.ascending = sorted(range(len(group)), key=group.__getitem__)
        self.lock = threading.Lock()
        self.current = _Record(len(group))


class ThreadCommunicator(Communicator):
    """Collectives among threads of this process, one per participant.

    Args:
        num_participants: number of participants (device workers), >= 1.
        abort_signal: the run's :class:`~xtpu.runtime.workers.AbortSignal`;
            aborting wakes every waiting participant with ``Aborted``.
        timeout: seconds a participant waits for its group; None means
            ``$XTPU_TIMEOUT`` or 60.0. Settable through ``.timeout``.
        cores_per_replica: logical cores per replica ``C`` (default 1); only
            names participants in errors: participant ``p`` is replica
            ``p // C``, logical core ``p % C`` (docs/logical-devices.md).

    The last participant to arrive computes every member's result (so one
    computation per group and call, and no member reads another's operand
    after it returned); the others wait on their own lock, so a wake-up costs
    one lock hand-off. Groups are independent and the same group can be used
    any number of times in a row. After a failed or aborted run, call
    :meth:`reset` before reusing the communicator.
    """

    def __init__(
        self,
        num_participants: int,
        abort_signal: AbortSignal,
        timeout: float | None = None,
        *,
        cores_per_replica: int = 1,
    ) -> None:
        if int(num_participants) < 1:
            raise ValueError(f"num_participants must be >= 1, got {num_participants}")
        if int(cores_per_replica) < 1 or int(num_participants) % int(cores_per_replica):
            raise ValueError(
                f"cores_per_replica must be >= 1 and divide num_participants ({num_participants}), "
                f"got {cores_per_replica}"
            )
        self.num_participants = int(num_participants)
        self.cores_per_replica = int(cores_per_replica)
        self.abort_signal = abort_signal
        self.timeout = resolve_timeout(timeout)
        self._lock = threading.Lock()
        self._rendezvous: dict[tuple[int, ...], _Rendezvous] = {}
        self._plans: dict = {}
        self._pair_plans: dict = {}
        abort_signal.add_waker(self._wake_all)

    # -- naming participants in errors ------------------------------------------

    def _ctx(self, p: int) -> dict:
        """Error context of participant ``p``: its replica (and logical core
        when replicas have several)."""
        c = self.cores_per_replica
        if c == 1:
            return {"replica": p}
        return {"replica": p // c, "logical_core": p % c}

    def _who(self, ids: Sequence[int]) -> str:
        """``replicas [5, 7]``, or with several cores per replica
        ``participants [3] ((replica, core) = (1, 1))``."""
        c = self.cores_per_replica
        ids = list(ids)
        if c == 1:
            return f"replicas {ids}"
        return f"participants {ids} ((replica, core) = " + ", ".join(f"({p // c}, {p % c})" for p in ids) + ")"

    def _name(self, p: int) -> str:
        return f"replica {p}" if self.cores_per_replica == 1 else f"participant {p}"

    # -- bookkeeping ----------------------------------------------------------

    def _rv(self, key, group: tuple[int, ...]) -> _Rendezvous:
        rv = self._rendezvous.get(key)
        if rv is None:
            with self._lock:
                rv = self._rendezvous.get(key)
                if rv is None:
                    rv = self._rendezvous[key] = _Rendezvous(group)
        return rv

    def _plan(self, replica_groups):
        """participant id -> (rendezvous, index in group), cached per groups."""
        try:
            raw = tuple(map(tuple, replica_groups)) if replica_groups is not None else ()
            plan = self._plans.get(raw)
        except TypeError:
            raw, plan = None, None
        if plan is None:
            groups = normalize_replica_groups(replica_groups, self.num_participants)
            plan = [None] * self.num_participants
            for g in groups:
                rv = self._rv(g, g)
                for i, p in enumerate(g):
                    plan[p] = (rv, i)
            if raw is not None:
                self._plans[raw] = plan
        return plan

    def _member(self, replica, replica_groups):
        if not 0 <= replica < self.num_participants:
            raise ValueError(f"replica {replica} is out of range for {self.num_participants} participants")
        return self._plan(replica_groups)[replica]

    def _wake_all(self) -> None:
        with self._lock:
            rvs = list(self._rendezvous.values())
        for rv in rvs:
            with rv.lock:
                rec = rv.current
                waiters, rec.waiters = rec.waiters, []
            for w in waiters:
                w.release()

    def reset(self) -> None:
        """Forget all in-flight collectives (after a failed/aborted run).
        Call only while no participant is inside a collective."""
        with self._lock:
            self._rendezvous = {}
            self._plans = {}
            self._pair_plans = {}

    # -- the rendezvous ---------------------------------------------------------

    def _run(self, rv: _Rendezvous, index: int, replica: int, value, meta, compute, op: str):
        """Deposit ``value``; the last arrival runs ``compute(values, metas)``
        -> per-member results. Returns this member's result."""
        signal = self.abort_signal
        if signal._set:
            raise Aborted(signal.exception)
        with rv.lock:
            rec = rv.current
            if rec.error is not None:
                cls, msg = rec.error
                raise cls(msg, op=op, **self._ctx(replica))
            if rec.values[index] is not _MISSING:
                raise XtpuRuntimeError(
                    f"{op}: participant {replica} arrived twice at the same collective of group {_fmt_group(rv.group)}",
                    op=op,
                    **self._ctx(replica),
                )
            if signal._set:
                raise Aborted(signal.exception)
            rec.values[index] = value
            rec.metas[index] = meta
            rec.arrived += 1
            last = rec.arrived == len(rv.group)
            if last:
                rv.current = _Record(len(rv.group))
            else:
                waiter = threading.Lock()
                waiter.acquire()
                rec.waiters.append(waiter)
        if last:
            try:
                rec.results = compute(rec.values, rec.metas)
            except XtpuRuntimeError as exc:
                rec.error = (type(exc), exc.message)
            except BaseException as exc:  # noqa: BLE001 - must not strand the waiters
                rec.error = (XtpuRuntimeError, f"{op} failed: {type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    raise
            finally:
                rec.values = None  # drop references to the operands
                rec.done = True
                for w in rec.waiters:
                    w.release()
            return self._result(rec, index, replica, op)
        return self._wait(rv, rec, waiter, index, replica, op)

    def _wait(self, rv, rec, waiter, index, replica, op):
        signal = self.abort_signal
        deadline = monotonic() + self.timeout
        will_block()  # let tasks not started yet run (they may be the missing ones)
        while True:
            remaining = deadline - monotonic()
            if remaining <= 0:
                break
            if waiter.acquire(True, min(remaining, MAX_WAIT)):
                # Released by the completer (done is set first) or by an abort.
                if rec.done:
                    return self._result(rec, index, replica, op)
                raise Aborted(signal.exception)
        # The deadline passed.
        with rv.lock:
            if rv.current is rec and not rec.done:
                if waiter in rec.waiters:
                    rec.waiters.remove(waiter)
                if signal._set:
                    raise Aborted(signal.exception)
                missing = [p for p, v in zip(rv.group, rec.values) if v is _MISSING]
                msg = (
                    f"timed out after {self.timeout} s in {op}: {self._who(missing)} "
                    f"of group {_fmt_group(rv.group)} never arrived"
                )
                rec.error = (RuntimeTimeoutError, msg)
                raise RuntimeTimeoutError(msg, op=op, **self._ctx(replica))
        # The group completed just now. Unless an abort already released our
        # lock, the completer releases it once the results are in.
        if signal._set and not rec.done:
            raise Aborted(signal.exception)
        waiter.acquire()
        return self._result(rec, index, replica, op)

    def _result(self, rec, index, replica, op):
        if rec.error is not None:
            cls, msg = rec.error
            raise cls(msg, op=op, **self._ctx(replica))
        return rec.results[index]

    def meet(self, member: int, key: tuple, size: int, value, compute, op: str):
        """A rendezvous of ``size`` members ``0 .. size-1`` under ``key``
        (apart from the collectives' groups): each deposits ``value``; the
        last to arrive runs ``compute(values, metas)`` (values in member
        order) -> one result per member; returns ``member``'s.  Under the
        communicator's timeout and abort signal, like a collective (the
        threads of runtime/sequential.py's groups of replicas meet here)."""
        rv = self._rv(key, tuple(range(size)))
        return self._run(rv, member, member, value, None, compute, op)

    # -- collectives -------------------------------------------------------------

    def _check_same(self, op, group, metas, values):
        """Raise if the members called different collectives or passed
        operands of different shapes/dtypes."""
        m0 = metas[0]
        if all(m == m0 for m in metas):
            return
        calls = [m[0] for m in metas]
        if any(c != calls[0] for c in calls):
            desc = "; ".join(f"{self._name(p)}: {c[0]}{list(c[1:])}" for p, c in zip(group, calls))
            raise XtpuRuntimeError(f"participants of group {_fmt_group(group)} called different collectives: {desc}")
        desc = ", ".join(f"{self._name(p)} has {_fmt_operand(v)}" for p, v in zip(group, values))
        raise XtpuRuntimeError(f"mismatched operands in {op} of group {_fmt_group(group)}: {desc}")

    def all_reduce(self, replica, value, replica_groups, reduction="add", channel_id=None):
        op = "ccl.all_reduce"
        value = np.asarray(value)
        if reduction not in REDUCTIONS:
            raise ValueError(f"{op}: unknown reduction {reduction!r}; expected one of {sorted(REDUCTIONS)}")
        rv, index = self._member(replica, replica_groups)
        if len(rv.group) == 1:
            return _readonly(value.view())  # a group of one: its operand, no copy
        group, order = rv.group, rv.ascending

        def compute(values, metas):
            self._check_same(op, group, metas, values)
            return all_reduce_results(values, order, reduction)

        meta = ((op, reduction, channel_id), value.shape, value.dtype)
        return self._run(rv, index, replica, value, meta, compute, op)

    def all_gather(self, replica, value, replica_groups, dim, channel_id=None):
        op = "ccl.all_gather"
        value = np.asarray(value)
        dim = _check_dim(op, "dim", dim, value, None)
        rv, index = self._member(replica, replica_groups)
        if len(rv.group) == 1:
            return _readonly(value.view())  # a group of one: its operand, no copy
        group = rv.group

        def compute(values, metas):
            self._check_same(op, group, metas, values)
            return all_gather_results(values, dim)

        meta = ((op, dim, channel_id), value.shape, value.dtype)
        return self._run(rv, index, replica, value, meta, compute, op)

    def reduce_scatter(self, replica, value, replica_groups, dim, reduction="add", channel_id=None):
        op = "ccl.reduce_scatter"
        value = np.asarray(value)
        if reduction not in REDUCTIONS:
            raise ValueError(f"{op}: unknown reduction {reduction!r}; expected one of {sorted(REDUCTIONS)}")
        rv, index = self._member(replica, replica_groups)
        n = len(rv.group)
        dim = _check_dim(op, "dim", dim, value, n)
        if n == 1:
            return _readonly(value.view())  # a group of one: its operand, no copy
        group, order = rv.group, rv.ascending

        def compute(values, metas):
            self._check_same(op, group, metas, values)
            return reduce_scatter_results(values, order, reduction, dim)

        meta = ((op, dim, reduction, channel_id), value.shape, value.dtype)
        return self._run(rv, index, replica, value, meta, compute, op)

    def all_to_all(self, replica, value, replica_groups, split_dimension, concat_dimension, channel_id=None):
        op = "ccl.all_to_all"
        value = np.asarray(value)
        rv, index = self._member(replica, replica_groups)
        n = len(rv.group)
        split_dimension = _check_dim(op, "split_dimension", split_dimension, value, n)
        concat_dimension = _check_dim(op, "concat_dimension", concat_dimension, value, None)
        if n == 1:
            return _readonly(value.view())  # a group of one: its operand, no copy
        group = rv.group

        def compute(values, metas):
            self._check_same(op, group, metas, values)
            return all_to_all_results(values, split_dimension, concat_dimension)

        meta = ((op, split_dimension, concat_dimension, channel_id), value.shape, value.dtype)
        return self._run(rv, index, replica, value, meta, compute, op)

    def collective_permute(self, replica, value, source_target_pairs, channel_id=None):
        op = "ccl.collective_permute"
        value = np.asarray(value)
        if not 0 <= replica < self.num_participants:
            raise ValueError(f"replica {replica} is out of range for {self.num_participants} participants")
        try:
            raw = tuple(map(tuple, source_target_pairs))
            plan = self._pair_plans.get(raw)
        except TypeError:
            raw, plan = None, None
        if plan is None:
            pairs = normalize_source_target_pairs(source_target_pairs, self.num_participants)
            members: dict = {}
            for group, sources in permute_plan(pairs):  # each meets apart
                rv = self._rv(("permute",) + group, group) if len(group) > 1 else None
                for i, p in enumerate(group):
                    members[p] = (rv, i, sources, group)
            plan = (members, pairs)
            if raw is not None:
                self._pair_plans[raw] = plan
        members, pairs = plan
        entry = members.get(replica)
        if entry is None:
            return _readonly(np.zeros_like(value))
        rv, index, sources, group = entry
        if len(group) == 1:  # a single [x, x] pair
            return _readonly(value.view())  # a group of one: its operand, no copy

        def compute(values, metas):
            self._check_same(op, group, metas, values)
            return permute_results(values, sources)

        meta = ((op, pairs, channel_id), value.shape, value.dtype)
        return self._run(rv, index, replica, value, meta, compute, op)

    def barrier(self, replica):
        op = "barrier"
        if not 0 <= replica < self.num_participants:
            raise ValueError(f"replica {replica} is out of range for {self.num_participants} participants")
        if self.num_participants == 1:
            return None
        rv = self._rv(("barrier",), tuple(range(self.num_participants)))
        return self._run(rv, replica, replica, True, (op,), lambda values, metas: [None] * len(values), op)


# ---------------------------------------------------------------------------
# MPI implementation: runtime/mpi_communicator.py (imported lazily: mpi4py is
# optional).
