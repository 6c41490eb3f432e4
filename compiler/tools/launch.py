"""``python -m xtpu.launch -n P script.py [args...]``: a local pool of processes.

Starts ``mpiexec -n P python script.py args...`` with ``XTPU_BACKEND=mpi``,
so an unchanged script that calls ``xtpu.replicate`` runs its replicas on
``P`` processes of this machine instead of threads of one (each rank traces
and compiles the program itself: nothing user-defined is pickled). Exits
with mpiexec's status. ``mpiexec`` is looked up next to this Python first
(the ``mpich`` wheel installs it there), then on ``PATH``. Ranks may
outnumber cores (MPICH oversubscribes; ``MPIR_CVAR_CH4_..`` settings are
left as they are).

Raises SystemExit(2) for a bad command line or a missing ``mpiexec``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def find_mpiexec() -> str | None:
    """The ``mpiexec`` next to ``sys.executable``, else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def command(nprocs: int, argv: list[str], module: bool = False) -> list[str]:
    """The mpiexec command line for ``argv`` (a script and its arguments,
    or with ``module`` a module name and its arguments)."""
    exe = find_mpiexec()
    if exe is None:
        raise FileNotFoundError("mpiexec not found: `pip install 'xtpu[mpi]'` installs MPICH's")
    return [exe, "-n", str(nprocs), sys.executable] + (["-m"] if module else []) + argv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m xtpu.launch",
        description="Run a script's replicas on P local processes (MPI ranks) instead of threads.",
    )
    ap.add_argument("-n", "--nprocs", type=int, required=True, help="number of processes (ranks)")
    ap.add_argument("-m", dest="module", action="store_true", help="run a module (python -m) instead of a script")
    ap.add_argument("script", help="the script (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = ap.parse_args(argv)
    if args.nprocs < 1:
        ap.error(f"-n must be >= 1, got {args.nprocs}")
    try:
        cmd = command(args.nprocs, [args.script] + args.args, args.module)
    except FileNotFoundError as e:
        print(f"xtpu.launch: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ, XTPU_BACKEND="mpi")
    sys.stdout.flush()
    os.execve(cmd[0], cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
