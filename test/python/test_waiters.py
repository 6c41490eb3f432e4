"""runtime/waiters.py's wake-up handles and the channel table's choice
between them."""

import gc
import os
import threading
import time

import pytest

from xtpu.runtime.channels import ChannelTable
from xtpu.runtime.waiters import EventWaiter, LockWaiter, waiter
from xtpu.runtime.workers import AbortSignal

SLACK = 1.5  # scheduling slack on a loaded 2-core machine (seconds), as test_fault_injection uses
KINDS = [LockWaiter] + ([EventWaiter] if hasattr(os, "eventfd") else [])


@pytest.fixture(autouse=True)
def eventfds_to_spare(monkeypatch):
    """Room for this file's eventfds whatever the suite holds already: the
    host workers of programs earlier tests compiled (kept by the compile
    cache) hold one each, up to MAX_EVENTFDS in the whole suite."""
    from xtpu.runtime import waiters

    monkeypatch.setattr(waiters, "MAX_EVENTFDS", waiters._live + 64)


@pytest.mark.parametrize("kind", KINDS)
def test_wake_before_wait_is_kept_and_consumed(kind):
    w = kind()
    w.wake()
    w.wake()  # two wakes before a wait: one pending wake-up
    t0 = time.monotonic()
    assert w.wait(5.0) is True
    assert time.monotonic() - t0 < SLACK  # not the 5 s timeout
    t0 = time.monotonic()
    assert w.wait(0.05) is False  # consumed: this one times out
    assert 0.04 < time.monotonic() - t0 < 0.05 + SLACK


@pytest.mark.parametrize("kind", KINDS)
def test_wake_from_another_thread_ends_the_wait(kind):
    w = kind()
    box = {}

    def sleeper():
        t0 = time.monotonic()
        box["woken"] = w.wait(10.0)
        box["returned"] = time.monotonic()
        box["elapsed"] = box["returned"] - t0

    t = threading.Thread(target=sleeper)
    t.start()
    time.sleep(0.05)
    woke_at = time.monotonic()
    w.wake()
    t.join(5)
    # The wait ended by the wake (after it, and long before the 10 s timeout);
    # a bound on how long the sleeper waited would depend on when its thread started.
    assert box["woken"] is True and box["returned"] >= woke_at and box["elapsed"] < 0.05 + SLACK


def test_each_thread_has_its_own_handles():
    mine = waiter(True), waiter(False)
    assert waiter(True) is mine[0] and waiter(False) is mine[1]
    assert isinstance(mine[1], LockWaiter)
    other = []
    t = threading.Thread(target=lambda: other.extend([waiter(True), waiter(False)]))
    t.start()
    t.join()
    assert other[0] is not mine[0] and other[1] is not mine[1]


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="eventfd is Linux's")
def test_eventfd_closed_when_its_thread_ends():
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    gc.collect()
    before = fds()
    opened = []

    def use_one():
        w = waiter(True)
        opened.append((type(w), fds()))  # its eventfd is open while the thread lives

    threads = [threading.Thread(target=use_one) for _ in range(20)]
    for t in threads:
        t.start()
        t.join()
    del threads
    gc.collect()
    # Each thread did open an eventfd (the check below would pass without any) ...
    assert [kind for kind, _ in opened] == [EventWaiter] * 20
    assert all(n > before for _, n in opened)
    # ... and closed it when it ended (<=: threads of earlier tests' programs
    # may close theirs meanwhile).
    assert fds() <= before


def test_without_eventfd_the_lock_serves(monkeypatch):
    def no_eventfd(*args):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "eventfd", no_eventfd, raising=False)
    got = []
    t = threading.Thread(target=lambda: got.append(waiter(True)))
    t.start()
    t.join()
    assert isinstance(got[0], LockWaiter)
    # and a channel on such a thread still hands messages over
    table = ChannelTable(AbortSignal(), timeout=5.0)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("msg", table.recv("k", 0)))
    t.start()
    time.sleep(0.05)
    table.send("k", 0, (7,))
    t.join(5)
    assert box["msg"] == (7,)


def test_channel_wakes_release_the_gil_only_while_replicas_fit_the_cores(monkeypatch):
    monkeypatch.setattr("xtpu.runtime.channels.cores", lambda: 2)
    table = ChannelTable(AbortSignal(), timeout=5.0)

    def handle_of_a_waiting_recv(r):
        """The handle a recv of replica r waits on, and what it received."""
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("msg", table.recv("k", r)))
        t.start()
        deadline = time.monotonic() + 5
        while not table._slots.get(("k", r)) or not table._slots[("k", r)].waiters:
            assert time.monotonic() < deadline, "the recv never waited"
            time.sleep(0.005)
        handle = table._slots[("k", r)].waiters[0]
        table.send("k", r, (r,))
        t.join(5)
        assert box["msg"] == (r,)
        return type(handle)

    # replicas 0 and 1 on 2 cores: eventfds (where there are any)
    assert [handle_of_a_waiting_recv(r) for r in (0, 1)] == [KINDS[-1]] * 2
    assert handle_of_a_waiting_recv(2) is LockWaiter  # a third replica: locks


@pytest.mark.skipif(not hasattr(os, "eventfd"), reason="eventfd is Linux's")
def test_past_max_eventfds_threads_wait_on_locks(monkeypatch):
    from xtpu.runtime import waiters

    monkeypatch.setattr(waiters, "MAX_EVENTFDS", waiters._live)  # none left
    got = []
    t = threading.Thread(target=lambda: got.append(waiter(True)))
    t.start()
    t.join()
    assert isinstance(got[0], LockWaiter)
    monkeypatch.setattr(waiters, "MAX_EVENTFDS", waiters._live + 1)
    t = threading.Thread(target=lambda: got.append(waiter(True)))
    t.start()
    t.join()
    assert isinstance(got[1], EventWaiter)
