"""Which distribution contexts the current thread is in: a strategy's
``scope()``, a ``colocate_vars_with`` block, a traced ``strategy.run``.

Thread-local stacks that :mod:`xtpu.distribute` pushes and pops; the ops
(``cond`` and ``while_loop`` inside ``strategy.run``) and the variables read
them here, below the strategy that owns them.
"""

from __future__ import annotations

import threading

_state = threading.local()


def _stack(name: str) -> list:
    st = getattr(_state, name, None)
    if st is None:
        st = []
        setattr(_state, name, st)
    return st


def current_scope_strategy():
    """The ``TPUStrategy`` whose ``scope()`` this thread is in, or None."""
    st = _stack("scopes")
    return st[-1] if st else None


def current_colocation():
    """The innermost ``colocate_vars_with`` target of this thread, or None."""
    st = _stack("colocate")
    return st[-1] if st else None


def current_run_state():
    """The state of the ``strategy.run`` being traced on this thread, or None."""
    st = _stack("runs")
    return st[-1] if st else None


__all__ = ["current_colocation", "current_run_state", "current_scope_strategy"]
