"""Which GradientTapes record on this thread.

The tracer (:mod:`xtpu.core.tracing`) hands every eager result to the
recording tapes and eager values (:mod:`xtpu.core.eager`) ask whether a tape
tracks them; the tapes themselves (:mod:`xtpu.autodiff.tape`) push and pop
themselves here.
"""

from __future__ import annotations

import threading
from typing import Any

tape_state = threading.local()
"""``tape_state.recording``: this thread's recording tapes, innermost last."""


def recording_tapes() -> list[Any]:
    """The GradientTapes recording on this thread, innermost last (a tape
    that is paused by ``stop_recording`` is not in the list)."""
    st = getattr(tape_state, "recording", None)
    if st is None:
        st = tape_state.recording = []
    return st


__all__ = ["recording_tapes", "tape_state"]
