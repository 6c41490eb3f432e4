"""Collectives among replicas spread over MPI ranks, threads within a rank.

:class:`HybridCommunicator` is a :class:`~xtpu.runtime.communicator.ThreadCommunicator`
whose groups may span ranks. The participants of a group that live on this
rank meet in the usual in-process rendezvous; the last of them to arrive
exchanges the rank's operands with the other ranks of the group (point to
point on the group's own sub-communicator, so groups used at the same time
never mix their messages), then every rank applies the same computation to
the whole group's operands that the threads backend applies. Reductions
therefore combine the operands in ascending participant id whatever the
number of ranks: float results equal the threads backend's bit for bit.

Sub-communicators (``MPI_Comm_idup`` of the job's communicator, one per
group that spans ranks, so concurrent groups never share one) are created by :meth:`HybridCommunicator.prepare`, which the executor
calls once per compiled program on every rank with the program's groups in
program order; a group first seen at run time is an error, since creating a
communicator then could deadlock ranks that reach it in different orders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from time import monotonic

import numpy as np

from .communicator import (
    REDUCTIONS,
    ThreadCommunicator,
    _fmt_group,
    _fmt_operand,
    _readonly,
    normalize_replica_groups,
    normalize_source_target_pairs,
    permute_components,
    reduce_in_order,
)
from .errors import Aborted, XtpuRuntimeError
from .mpi import World
from .workers import AbortSignal

__all__ = ["HybridCommunicator", "MPICommunicator"]

_TAG_DATA = 10
_TAG_HEADER = 11
# Each exchange sends with the operands (small ones: in the same message) a
# header naming their dtype and shape (``_fmt_operand``'s text, zero-padded,
# cut at _HEADER_BYTES), so that ranks whose replicas pass operands of
# different shapes or dtypes get the threads backend's "mismatched operands"
# error instead of a truncated or misread message.
_HEADER_BYTES = 64
# The header's last bytes: which program and which of its calls the operands
# belong to (:meth:`HybridCommunicator.set_call`), so that ranks calling
# different programs (or calls) meet in an error, not in a silent sum of
# unrelated operands.
_STAMP_AT, _STAMP_BYTES = 40, 16
# Operands up to this size (per rank and use) go through persistent requests.
_PERSISTENT_BYTES = 1 << 16
_SPIN_POLLS = 10  # Testall polls before the waiting loop (a message of another rank takes microseconds)


def _call_name(stamp: bytes) -> str:
    program, call = stamp[:8], int.from_bytes(stamp[8:16], "little")
    if not any(program):
        return "a collective outside any program"
    return f"call {call} of program {program.hex()}"


def _comm_key(key) -> tuple:
    return ("group",) + (key if isinstance(key, tuple) else (key,))


def _permute_groups(pairs, n: int) -> list[tuple[int, ...]]:
    return permute_components(normalize_source_target_pairs(pairs, n))


class _Span:
    """A group with members on several ranks, as seen from this rank.

    Looks like a ``_Rendezvous`` to the collectives (``group``,
    ``ascending``: the whole group's); ``local`` is the rendezvous of this
    rank's members."""

    __slots__ = ("group", "ascending", "local", "mine", "local_index", "peers", "comm", "buffers")

    def __init__(self, group, local, mine, peers, comm) -> None:
        self.group = group
        self.ascending = sorted(range(len(group)), key=group.__getitem__)
        self.local = local  # rendezvous of this rank's members
        self.mine = mine  # their positions in group
        self.local_index = {i: k for k, i in enumerate(mine)}
        self.peers = peers  # [(rank in comm, world rank, positions in group)]
        self.comm = comm
        # ((shape, dtype), send buffer, receive buffer per peer, the group's
        # operands as views of them), reused from one use of the group to the
        # next (no allocation per use); see HybridCommunicator._buffers.
        self.buffers = None


class HybridCommunicator(ThreadCommunicator):
    """Collectives among ``R x C`` participants of which this rank runs some.

    Args:
        world: the :class:`~xtpu.runtime.mpi.World` (rank and placement).
        num_participants: ``R x C`` (replicas times logical cores).
        abort_signal, timeout, cores_per_replica: as for
            :class:`ThreadCommunicator`.

    Participant ``p`` (replica ``p // C``) runs on rank
    ``world.owner(p // C, R)``. Same contract and errors as
    :class:`ThreadCommunicator`, plus:

    Raises:
        RemoteRankError: another rank's run failed while this one waited.
        RuntimeTimeoutError: a rank of the group never sent its operands
            within the timeout; the message names the ranks and their
            replicas.
        XtpuRuntimeError: a group spanning ranks that :meth:`prepare` did not
            see.
    """

    def __init__(
        self,
        world: World,
        num_participants: int,
        abort_signal: AbortSignal,
        timeout: float | None = None,
        *,
        cores_per_replica: int = 1,
    ) -> None:
        super().__init__(num_participants, abort_signal, timeout, cores_per_replica=cores_per_replica)
        self.world = world
        C = self.cores_per_replica
        R = self.num_participants // C
        self.owner = [world.owner(p // C, R) for p in range(self.num_participants)]
        self._spans: dict = {}
        self._lazy = False
        self._stamp = np.zeros(_STAMP_BYTES, np.uint8)

    def set_call(self, program: bytes, call: int) -> None:
        """Mark the operands exchanged from now on as those of call ``call``
        (counted from 1) of ``program`` (8 bytes of its fingerprint); a
        rank whose operands carry another mark raises an error naming both.
        The executor calls it before each run."""
        self._stamp[:8] = np.frombuffer(program[:8].ljust(8, b"\0"), np.uint8)
        self._stamp[8:] = np.frombuffer(int(call).to_bytes(8, "little"), np.uint8)

    # -- groups -------------------------------------------------------------------

    def prepare(
        self,
        replica_groups_list: Iterable[Sequence[Sequence[int]] | None],
        permute_pairs_list: Iterable[Sequence[Sequence[int]]] = (),
    ) -> None:
        """Create the communicators of the given collectives' groups that
        span ranks; call on every rank with the same lists (the executor does,
        once per compiled program). Collective over all ranks.

        Raises:
            ValueError: invalid ``replica_groups`` or pairs.
            RuntimeTimeoutError: a rank did not take part within the timeout.
        """
        n = self.num_participants
        groups: list[tuple] = []
        for rg in replica_groups_list:
            groups.extend((g, g) for g in normalize_replica_groups(rg, n))
        for pairs in permute_pairs_list:
            groups.extend((("permute",) + g, g) for g in _permute_groups(pairs, n) if len(g) > 1)
        groups.append((("barrier",), tuple(range(n))))
        keys = [_comm_key(k) for k, g in groups if len({self.owner[p] for p in g}) > 1]
        self.world.ensure_comms(keys, self.timeout, self.abort_signal)

    def _rv(self, key, group):
        span = self._spans.get(key)
        if span is not None:
            return span
        me = self.world.rank
        ranks = sorted({self.owner[p] for p in group})
        if len(ranks) == 1 or me not in ranks:
            return super()._rv(key, group)
        comm = self.world._groups.get(_comm_key(key))
        if comm is None and self._lazy and len(ranks) == self.world.size:
            # Safe when every rank calls the same collectives in the same
            # order from one thread (MPICommunicator's use).
            self.world.ensure_comms([_comm_key(key)], self.timeout, self.abort_signal)
            comm = self.world._groups[_comm_key(key)]
        if comm is None:
            raise XtpuRuntimeError(
                f"the group {_fmt_group(group)} spans ranks {ranks} but was not prepared: "
                "collectives between ranks need HybridCommunicator.prepare with the program's "
                "groups (the executor does it)"
            )
        mine = [i for i, p in enumerate(group) if self.owner[p] == me]
        local = super()._rv(("local",) + _comm_key(key), tuple(group[i] for i in mine))
        peers = [(q, q, [i for i, p in enumerate(group) if self.owner[p] == q]) for q in ranks if q != me]
        span = _Span(tuple(group), local, mine, peers, comm)
        with self._lock:
            return self._spans.setdefault(key, span)

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._spans = {}

    # -- the rendezvous across ranks ----------------------------------------------------

    def _run(self, rv, index, replica, value, meta, compute, op):
        if not isinstance(rv, _Span):
            return super()._run(rv, index, replica, value, meta, compute, op)
        span = rv
        if len(span.mine) == 1:
            return self._run_alone(span, replica, value, meta, compute, op)

        def across(values, metas):
            self._check_same(op, span.local.group, metas, values)
            full = self._exchange(span, values, op)
            results = compute(full, [metas[0]] * len(full))
            return [results[i] for i in span.mine]

        return super()._run(span.local, span.local_index[index], replica, value, meta, across, op)

    def _run_alone(self, span: _Span, replica, value, meta, compute, op):
        """The rank's only member of ``span``: no in-rank rendezvous, the
        exchange and the computation on this thread."""
        signal = self.abort_signal
        if signal._set:
            raise Aborted(signal.exception)
        try:
            full = self._exchange(span, (value,), op)
            return compute(full, [meta] * len(full))[span.mine[0]]
        except BaseException as exc:
            raise self._error(exc, op, replica) from None

    def _error(self, exc: BaseException, op: str, replica: int) -> BaseException:
        """``exc`` as ``ThreadCommunicator._run`` raises a computation's
        error: runtime errors with the op and replica, others wrapped."""
        if isinstance(exc, XtpuRuntimeError):
            return exc.add_context(op=op, **self._ctx(replica))
        if isinstance(exc, Aborted) or not isinstance(exc, Exception):
            return exc
        err = XtpuRuntimeError(f"{op} failed: {type(exc).__name__}: {exc}", op=op, **self._ctx(replica))
        err.__cause__ = exc
        return err

    def all_reduce(self, replica, value, replica_groups, reduction="add", channel_id=None):
        """As :meth:`ThreadCommunicator.all_reduce`; a replica alone on its
        rank in a group spanning ranks takes a shorter path (the operands
        exchanged and reduced in replica order on the calling thread)."""
        rv, _ = self._member(replica, replica_groups)
        if rv.__class__ is not _Span or len(rv.mine) != 1 or reduction not in REDUCTIONS:
            return super().all_reduce(replica, value, replica_groups, reduction, channel_id)
        op = "ccl.all_reduce"
        signal = self.abort_signal
        if signal._set:
            raise Aborted(signal.exception)
        try:
            full = self._exchange(rv, (np.asarray(value),), op)
            return _readonly(reduce_in_order([full[i] for i in rv.ascending], reduction))
        except BaseException as exc:
            raise self._error(exc, op, replica) from None

    def _exchange(self, span: _Span, values, op: str) -> list:
        """This rank's members' operands to the group's other ranks and
        theirs here; returns the whole group's operands in group order.

        Raises:
            XtpuRuntimeError: "mismatched operands" when a peer's header
                names another shape or dtype.
        """
        MPI = self.world.MPI
        first = values[0]
        if not isinstance(first, np.ndarray):
            first = np.asarray(first)
        shape, dtype = first.shape, first.dtype
        bufs = span.buffers
        if bufs is None or bufs[0] != (shape, dtype):
            if dtype.hasobject:
                raise XtpuRuntimeError(f"{op}: operands of dtype {dtype} cannot be sent between ranks")
            bufs = span.buffers = self._buffers(span, shape, dtype, len(values))
        _, mine, recvs, template, persistent, header, header_recvs, sent_header = bufs
        header[_STAMP_AT : _STAMP_AT + _STAMP_BYTES] = self._stamp
        if sent_header is not None:
            sent_header[_STAMP_AT : _STAMP_AT + _STAMP_BYTES] = self._stamp
        full = list(template)  # views of the receive buffers at the peers' positions
        testall = MPI.Request.Testall
        if persistent is not None:  # small: header and operands in one message (persistent requests)
            for j, v in enumerate(values):
                mine[j][...] = v
            requests = persistent
            MPI.Prequest.Startall(requests)
        else:  # large: the header first, in a message of its own
            comm = span.comm
            header_requests = []
            for (k, _, _), recv in zip(span.peers, header_recvs):
                header_requests.append(comm.Irecv([recv, MPI.BYTE], source=k, tag=_TAG_HEADER))
                header_requests.append(comm.Isend([header, MPI.BYTE], dest=k, tag=_TAG_HEADER))
            if len(values) == 1 and first.flags.c_contiguous:
                send = [first, MPI.BYTE]  # sent as it is: no copy
                full[span.mine[0]] = first
            else:
                for j, v in enumerate(values):
                    mine[j][...] = v
                send = [mine[0].base, MPI.BYTE]
                for j, i in enumerate(span.mine):
                    full[i] = mine[j]
            requests = []
            for (k, _, _), recv in zip(span.peers, recvs):
                requests.append(comm.Irecv(recv, source=k, tag=_TAG_DATA))
                requests.append(comm.Isend(send, dest=k, tag=_TAG_DATA))
            if not testall(header_requests):
                self._wait_peers(span, header_requests, op)
            self._check_headers(span, first, header, header_recvs, op)
        try:
            for _ in range(_SPIN_POLLS):
                if testall(requests):
                    break
            else:
                self._wait_peers(span, requests, op)
        except MPI.Exception:
            # A larger operand than ours truncated: its header (the message's
            # first bytes) still names it.
            self._check_headers(span, first, header, header_recvs, op)
            raise
        if persistent is not None:
            self._check_headers(span, first, header, header_recvs, op)
        return full  # views of the span's buffers: the collectives' computations copy

    def _check_headers(self, span: _Span, first: np.ndarray, header, header_recvs: list, op: str) -> None:
        expected = header.tobytes()
        for recv in header_recvs:
            if recv.tobytes() != expected:
                self._mismatch(span, first, header_recvs, op)

    def _mismatch(self, span: _Span, first: np.ndarray, header_recvs: list, op: str) -> None:
        """Raise the error for ranks in different calls (another program, or
        another call of it), else the threads backend's error for operands
        of different shapes or dtypes, naming each member's operand and rank."""
        me = self._stamp.tobytes()
        for (_, q, _), recv in zip(span.peers, header_recvs):
            theirs = bytes(recv[_STAMP_AT : _STAMP_AT + _STAMP_BYTES])
            if theirs != me:
                raise XtpuRuntimeError(
                    f"{op} of group {_fmt_group(span.group)}: rank {q} sent the operands of {_call_name(theirs)} "
                    f"while rank {self.world.rank} is in {_call_name(me)}: under MPI every rank must call the "
                    "same compiled programs in the same order"
                )
        described = {i: _fmt_operand(first) for i in span.mine}
        rank_of = {i: self.world.rank for i in span.mine}
        for (_, q, positions), recv in zip(span.peers, header_recvs):
            text = bytes(recv[:_STAMP_AT]).rstrip(b"\0").decode(errors="replace")
            for i in positions:
                described[i], rank_of[i] = text, q
        desc = ", ".join(
            f"{self._name(span.group[i])} (rank {rank_of[i]}) has {described[i]}" for i in range(len(span.group))
        )
        raise XtpuRuntimeError(f"mismatched operands in {op} of group {_fmt_group(span.group)}: {desc}")

    def _buffers(self, span: _Span, shape, dtype, count: int) -> tuple:
        """The buffers of ``span`` for ``count`` local operands of ``shape,
        dtype``, reused from one use of the group to the next: this rank's
        operands (``mine``, per operand a view), one receive buffer per peer
        rank, the group-ordered list of views of the received operands
        (and, for small operands, of ``mine``), for small operands
        persistent requests (``MPI_Recv_init`` / ``MPI_Send_init``, two per
        peer) that each use restarts, and the header (``_HEADER_BYTES``:
        ``dtype[shape]``) sent and one received per peer. Small operands
        travel after the header in one message; large ones on their own."""
        MPI = self.world.MPI
        header = np.zeros(_HEADER_BYTES, np.uint8)
        text = f"{dtype}{list(shape)}".encode()[:_STAMP_AT]  # as _fmt_operand
        header[: len(text)] = np.frombuffer(text, np.uint8)
        one = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        small = count * one <= _PERSISTENT_BYTES
        skip = _HEADER_BYTES if small else 0

        def buffer(n: int):
            raw = np.empty(skip + n * one, np.uint8)
            if small:
                raw[:_HEADER_BYTES] = header
            return raw, raw[skip:].view(dtype).reshape((n,) + shape)

        send_raw, send = buffer(count)
        mine = [send[j, ...] for j in range(count)]  # arrays, also when 0-d (send[j] would be a scalar)
        recvs, template, header_recvs = [], [None] * len(span.group), []
        for _, _, positions in span.peers:
            raw, buf = buffer(len(positions))
            recvs.append([raw, MPI.BYTE])
            header_recvs.append(raw[:_HEADER_BYTES] if small else np.empty(_HEADER_BYTES, np.uint8))
            for j, i in enumerate(positions):
                template[i] = buf[j, ...]
        persistent = None
        if small:
            for j, i in enumerate(span.mine):
                template[i] = mine[j]
            persistent = []
            for (k, _, _), recv in zip(span.peers, recvs):
                persistent.append(span.comm.Recv_init(recv, source=k, tag=_TAG_DATA))
                persistent.append(span.comm.Send_init([send_raw, MPI.BYTE], dest=k, tag=_TAG_DATA))
        sent_header = send_raw[:_HEADER_BYTES] if small else None
        return (shape, dtype), mine, recvs, template, persistent, header, header_recvs, sent_header

    def _wait_peers(self, span: _Span, requests: list, op: str) -> None:
        """Wait for the exchange's requests (two per peer, in peer order):
        within the timeout, and ending early when another rank fails or the
        run is aborted."""
        pending = {q: requests[2 * j : 2 * j + 2] for j, (_, q, _) in enumerate(span.peers)}
        C = self.cores_per_replica

        def describe(missing):
            who = {q: sorted({span.group[i] // C for i in pos}) for _, q, pos in span.peers}
            names = "; ".join(f"rank {q} (replicas {who[q]})" for q in missing)
            return (
                f"timed out after {self.timeout} s in {op} of group {_fmt_group(span.group)} "
                f"on rank {self.world.rank}: {names} never sent their operands"
            )

        try:
            self.world.wait(pending, monotonic() + self.timeout, self.abort_signal, describe)
        except XtpuRuntimeError as e:
            e.add_context(op=op)
            raise


class MPICommunicator(HybridCommunicator):
    """Collectives among MPI ranks, one participant per rank by default.

    Args:
        comm: an ``mpi4py`` communicator (default ``COMM_WORLD``; it is
            duplicated, so xtpu's messages never mix with the user's); participant ``p`` of
            ``num_participants`` (default: the number of ranks) runs on rank
            ``p * P // num_participants``.
        abort_signal: the run's abort signal (a fresh one by default).
        timeout: seconds a collective waits (None: ``$XTPU_TIMEOUT`` or 60).
        num_participants, cores_per_replica: as for :class:`HybridCommunicator`.

    Groups over every rank work at once; call :meth:`prepare` (on every
    rank, same lists) before using groups of fewer ranks. Pass it to an
    executable as ``Executable(module, communicator=lambda abort, timeout:
    MPICommunicator(abort_signal=abort, timeout=timeout, num_participants=R))``
    under ``mpiexec``: each rank then runs only its replicas, as with
    ``xtpu.distributed.initialize()``.

    Raises:
        ImportError: mpi4py or an MPI library is missing.
    """

    def __init__(
        self,
        comm=None,
        abort_signal: AbortSignal | None = None,
        timeout: float | None = None,
        *,
        num_participants: int | None = None,
        cores_per_replica: int = 1,
    ) -> None:
        world = World(comm)  # its own communicators and error channel
        super().__init__(
            world,
            world.size if num_participants is None else num_participants,
            abort_signal if abort_signal is not None else AbortSignal(),
            timeout,
            cores_per_replica=cores_per_replica,
        )
        self.rank = world.rank
        self._lazy = True
