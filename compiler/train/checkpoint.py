"""``xtpu.train.Checkpoint`` and ``CheckpointManager``: TF 2's object-based
checkpoints (``tf.train.Checkpoint``), saved as one numpy ``.npz`` file.

The format: ``<prefix>.npz``, a zip of ``.npy`` arrays written by
``numpy.savez`` and read with ``allow_pickle=False`` (no pickled objects),
one array per variable, keyed by TF's object-graph paths:

* ``<path>/.ATTRIBUTES/VARIABLE_VALUE`` for a variable reachable as
  ``<path>`` from the checkpoint's keyword arguments (``model/w1``,
  ``optimizer/iter``, ``layers/0/kernel``...);
* ``<variable path>/.OPTIMIZER_SLOT/<optimizer path>/<slot>/.ATTRIBUTES/VARIABLE_VALUE``
  for an optimizer's slot of a tracked variable (TF's slot key);
* ``save_counter/.ATTRIBUTES/VARIABLE_VALUE``, the number of ``save`` calls.

A variable is saved once however many paths reach it (a mirrored variable is
one ``xtpu.Variable``: saved once, restored on every replica).  Objects are
tracked as TF's AutoTrackable tracks attributes: variables, optimizers,
checkpoints, lists / tuples / dicts of them, and plain objects through their
attributes (``vars(obj)``).

``restore`` assigns the saved values to the matching variables now (eagerly;
slots an optimizer has not created yet are created first, as TF's deferred
restoration does when they appear); its status object's
``assert_consumed()`` raises when a saved value or a tracked variable found
no match.  ``CheckpointManager`` numbers checkpoints ``<directory>/ckpt-N``,
keeps ``max_to_keep`` of them and records them in ``<directory>/checkpoint``
in TF's text format, which :func:`latest_checkpoint` reads.
"""

from __future__ import annotations

import functools
import os
import re
import types
from typing import Any

import numpy as np

from xtpu.core.eager import as_eager_tensor
from xtpu.core.tracing import current_trace
from xtpu.dialects.tensor_spec import from_saved
from xtpu.distribute.variables import Variable
from xtpu.train.optimizers import Optimizer

_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"


def _is_optimizer(x: Any) -> bool:
    return isinstance(x, Optimizer)


def _collect(roots: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]], dict[int, str]]:
    """Checkpoint key -> variable for everything reachable from ``roots``;
    the optimizers found (path, optimizer); variable id -> its path."""
    out: dict[str, Any] = {}
    paths: dict[int, str] = {}
    optimizers: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def visit(x: Any, path: str) -> None:
        if isinstance(x, Variable):
            if id(x) not in paths:
                paths[id(x)] = path
                out[f"{path}/{_VALUE}"] = x
            return
        if x is None or isinstance(
            x,
            (
                str,
                bytes,
                int,
                float,
                bool,
                np.ndarray,
                np.generic,
                type,
                types.ModuleType,
                types.FunctionType,
                types.MethodType,
                types.BuiltinFunctionType,
                functools.partial,
            ),
        ):
            return
        if id(x) in seen:
            return
        seen.add(id(x))
        if _is_optimizer(x):
            optimizers.append((path, x))
            if x._iterations is not None:
                visit(x._iterations, f"{path}/iter")
            return
        if isinstance(x, Checkpoint):
            for k, v in x._roots.items():
                visit(v, f"{path}/{k}")
            return
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                visit(x[k], f"{path}/{k}")
            return
        if isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                visit(v, f"{path}/{i}")
            return
        if type(x).__module__.split(".")[0] in ("xtpu", "numpy", "builtins"):
            return  # a strategy, dataset, function...: not state of the user's model
        attrs = getattr(x, "__dict__", None)
        if isinstance(attrs, dict):
            for k in sorted(attrs):
                if not k.startswith("__"):
                    visit(attrs[k], f"{path}/{k}")

    for name in sorted(roots):
        visit(roots[name], name)
    for opath, opt in optimizers:
        for slot, table in sorted(opt._slots.items()):
            for var, slot_var in table.items():
                vpath = paths.get(id(var), var.name)
                out[f"{vpath}/.OPTIMIZER_SLOT/{opath}/{slot}/{_VALUE}"] = slot_var
    return out, optimizers, paths


def _npz_path(prefix: str) -> str:
    return prefix if prefix.endswith(".npz") else prefix + ".npz"


class CheckpointLoadStatus:
    """What ``restore`` / ``read`` matched (TF's ``CheckpointLoadStatus``)."""

    def __init__(self, unused_keys: list[str], unmatched: list[str], path: str):
        self._unused = unused_keys
        self._unmatched = unmatched
        self._path = path

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Raises AssertionError naming what did not match, either way."""
        if self._unused or self._unmatched:
            raise AssertionError(
                f"checkpoint {self._path}: values with no object {self._unused}; objects with no value {self._unmatched}"
            )
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Raises AssertionError when a tracked variable had no saved value."""
        if self._unmatched:
            raise AssertionError(f"checkpoint {self._path}: objects with no value {self._unmatched}")
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        return self


class Checkpoint:
    """Groups trackable objects to save and restore them together
    (``tf.train.Checkpoint(**kwargs)``).

    Args:
      root: an object tracked at the top level (its attributes' paths have
        no prefix).
      **kwargs: named trackable objects (variables, optimizers, models as
        plain objects, lists / dicts of them).

    Raises:
      AttributeError: a keyword is ``save_counter`` (TF sets each keyword
        as an attribute, and ``save_counter`` is a read-only property).
      ValueError: ``root`` has an attribute of a keyword's name holding
        another object (TF's message).
    """

    def __init__(self, root: Any = None, **kwargs: Any):
        if "save_counter" in kwargs:
            raise AttributeError(
                "property 'save_counter' of 'Checkpoint' object has no setter (the checkpoint counts "
                "its saves itself; give the object another name)"
            )
        self._roots = dict(kwargs)
        if root is not None:
            attrs = getattr(root, "__dict__", {})
            for k, v in attrs.items():
                if k.startswith("__"):
                    continue
                if k in kwargs and kwargs[k] is not v:
                    raise ValueError(
                        f"Cannot create a Checkpoint with keyword argument {k} if root.{k} already exists."
                    )
                self._roots.setdefault(k, v)
        self._save_counter = 0

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._roots[name] = value

    def __getattr__(self, name: str) -> Any:
        roots = self.__dict__.get("_roots", {})
        if name in roots:
            return roots[name]
        raise AttributeError(name)

    @property
    def save_counter(self) -> Any:
        """How many times ``save`` was called (an int64 tensor)."""
        return as_eager_tensor(np.asarray(self._save_counter, np.int64))

    # -- writing ------------------------------------------------------------
    def write(self, file_prefix: str, options: Any = None) -> str:
        """Save every tracked variable to ``file_prefix + ".npz"``, without
        numbering; returns the path prefix (what ``read`` takes).

        Raises:
          RuntimeError: called inside a replicated computation or xtpu.function.
        """
        if current_trace() is not None:
            raise RuntimeError("Checkpoint.write/save runs eagerly, not inside a replicated computation")
        variables, _, _ = _collect(self._roots)
        arrays = {k: np.asarray(v._value) for k, v in variables.items()}
        arrays[f"save_counter/{_VALUE}"] = np.asarray(self._save_counter, np.int64)
        directory = os.path.dirname(os.path.abspath(file_prefix))
        os.makedirs(directory, exist_ok=True)
        prefix = file_prefix[:-4] if file_prefix.endswith(".npz") else file_prefix
        tmp = prefix + ".tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, prefix + ".npz")
        return prefix

    def save(self, file_prefix: str, options: Any = None) -> str:
        """Increment ``save_counter`` and write ``<file_prefix>-<save_counter>.npz``;
        returns ``<file_prefix>-<save_counter>`` (TF's numbering)."""
        self._save_counter += 1
        return self.write(f"{file_prefix}-{self._save_counter}", options)

    # -- reading ------------------------------------------------------------
    def read(self, save_path: str, options: Any = None) -> CheckpointLoadStatus:
        """Assign the saved values to the tracked variables (``restore``
        without ``save_counter``'s bookkeeping differences; both restore it).

        Raises:
          FileNotFoundError: no checkpoint at ``save_path``.
          ValueError: a saved value's shape or dtype differs from its
            variable's (naming the key).
        """
        if current_trace() is not None:
            raise RuntimeError("Checkpoint.read/restore runs eagerly, not inside a replicated computation")
        path = _npz_path(save_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no checkpoint at {save_path!r} (expected the file {path})")
        with np.load(path, allow_pickle=False) as data:
            saved = {k: from_saved(data[k]) for k in data.files}
        self._make_missing_state(saved)
        variables, _, _ = _collect(self._roots)
        for key, var in variables.items():
            if key not in saved:
                continue
            value = saved[key]
            if value.shape != var._value.shape or value.dtype != var._value.dtype:
                raise ValueError(
                    f"checkpoint {save_path}: '{key}' holds {value.dtype}{list(value.shape)} but its variable "
                    f"'{var.name}' is {var._value.dtype}{list(var._value.shape)}"
                )
            var._value = np.array(value)
        counter = saved.get(f"save_counter/{_VALUE}")
        if counter is not None:
            self._save_counter = int(counter)
        unused = sorted(k for k in saved if k not in variables and not k.startswith("save_counter/"))
        unmatched = sorted(k for k in variables if k not in saved)
        return CheckpointLoadStatus(unused, unmatched, save_path)

    def restore(self, save_path: str | None, options: Any = None) -> CheckpointLoadStatus:
        """``read(save_path)``; None restores nothing (TF: the initializers run)."""
        if save_path is None:
            return CheckpointLoadStatus([], [], "None")
        return self.read(save_path, options)

    def _make_missing_state(self, saved: dict[str, np.ndarray]) -> None:
        """Create the optimizer state a checkpoint has and the objects lack
        yet (``iterations``, slots), so it can be restored into them."""
        variables, optimizers, _ = _collect(self._roots)

        var_of_path: dict[str, Any] = {}
        for key, var in variables.items():
            if isinstance(var, Variable) and "/.OPTIMIZER_SLOT/" not in key:
                var_of_path[key[: -len(_VALUE) - 1]] = var
        for opath, opt in optimizers:
            if f"{opath}/iter/{_VALUE}" in saved and opt._iterations is None:
                opt.iterations  # noqa: B018 - creates the variable
            pattern = re.compile(rf"^(.*)/\.OPTIMIZER_SLOT/{re.escape(opath)}/([^/]+)/{re.escape(_VALUE)}$")
            for key in saved:
                m = pattern.match(key)
                if m and m.group(1) in var_of_path:
                    var = var_of_path[m.group(1)]
                    if var not in opt._slots.get(m.group(2), {}):
                        opt.add_slot(var, m.group(2))


class CheckpointManager:
    """Numbered checkpoints in a directory, keeping the newest
    ``max_to_keep`` (``tf.train.CheckpointManager``).

    Args:
      checkpoint: the :class:`Checkpoint` to save.
      directory: where ``ckpt-N.npz`` and the ``checkpoint`` state file go.
      max_to_keep: how many to keep (None: all).
      checkpoint_name: the file name prefix (default ``"ckpt"``).
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: Any = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: Any = None,
        init_fn: Any = None,
    ):
        self._checkpoint = checkpoint
        self._directory = str(directory)
        self._max_to_keep = max_to_keep
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._checkpoints: list[str] = _read_state(self._directory)[1]

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints, oldest first."""
        return list(self._checkpoints)

    @property
    def latest_checkpoint(self) -> str | None:
        return self._checkpoints[-1] if self._checkpoints else None

    def save(self, checkpoint_number: Any = None, check_interval: bool = True, options: Any = None) -> str:
        """Write ``<directory>/<name>-<N>`` (N: ``checkpoint_number``, else the
        checkpoint's incremented ``save_counter``), drop the oldest beyond
        ``max_to_keep`` and update the state file; returns the new path."""
        ck = self._checkpoint
        ck._save_counter += 1
        n = int(np.asarray(checkpoint_number)) if checkpoint_number is not None else ck._save_counter
        path = ck.write(f"{self._prefix}-{n}", options)
        if path in self._checkpoints:
            self._checkpoints.remove(path)
        self._checkpoints.append(path)
        if self._max_to_keep is not None:
            while len(self._checkpoints) > self._max_to_keep:
                old = self._checkpoints.pop(0)
                try:
                    os.remove(_npz_path(old))
                except FileNotFoundError:
                    pass
        _write_state(self._directory, self._checkpoints)
        return path

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint if there is one; returns its path or None."""
        if self.latest_checkpoint is None:
            return None
        self._checkpoint.restore(self.latest_checkpoint)
        return self.latest_checkpoint


def _state_file(directory: str) -> str:
    return os.path.join(directory, "checkpoint")


def _write_state(directory: str, paths: list[str]) -> None:
    """TF's ``CheckpointState`` text format, with paths relative to ``directory``."""
    rel = [os.path.relpath(p, directory) for p in paths]
    lines = [f'model_checkpoint_path: "{rel[-1]}"'] if rel else []
    lines += [f'all_model_checkpoint_paths: "{r}"' for r in rel]
    tmp = _state_file(directory) + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, _state_file(directory))


def _read_state(directory: str) -> tuple[str | None, list[str]]:
    path = _state_file(directory)
    if not os.path.exists(path):
        return None, []
    latest, all_paths = None, []
    with open(path) as f:
        for line in f:
            m = re.match(r'\s*(model_checkpoint_path|all_model_checkpoint_paths):\s*"(.*)"', line)
            if not m:
                continue
            p = m.group(2) if os.path.isabs(m.group(2)) else os.path.join(directory, m.group(2))
            if m.group(1) == "model_checkpoint_path":
                latest = p
            else:
                all_paths.append(p)
    return latest, all_paths


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The newest checkpoint recorded in ``checkpoint_dir`` (tf.train.latest_checkpoint), or None."""
    latest, _ = _read_state(checkpoint_dir)
    if latest is not None and os.path.exists(_npz_path(latest)):
        return latest
    return None


__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "latest_checkpoint"]
