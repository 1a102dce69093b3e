"""BLAS/OpenMP thread pools per worker process: one count for both runtimes.

OpenBLAS sums in a different order with another thread count, so the local runtime and the
cluster's workers must size their pools alike for bit-identical results (design notes).
"""

from __future__ import annotations

import os

__all__ = ["THREAD_VARS", "cores", "blas_threads", "thread_vars", "apply_thread_vars", "all_set"]

#: Thread-pool variables of the BLAS/OpenMP libraries numpy may use.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def blas_threads(sharing: int) -> int:
    """BLAS/OpenMP threads for each of ``sharing`` worker processes on this machine."""
    return max(1, cores() // max(1, sharing))


def thread_vars(sharing: int) -> dict[str, str]:
    """The thread variables of a local worker: the user's where set, else ``blas_threads(sharing)``."""
    threads = str(blas_threads(sharing))
    return {var: os.environ.get(var, threads) for var in THREAD_VARS}


def all_set() -> bool:
    """Whether every thread variable is in this process's environment already (by the user, or
    by the launcher that started or forked this worker): its pools were sized by them."""
    return all(var in os.environ for var in THREAD_VARS)


#: The variable each threadpoolctl internal API reads its thread count from.
_VAR_OF = {"openblas": "OPENBLAS_NUM_THREADS", "mkl": "MKL_NUM_THREADS", "blis": "BLIS_NUM_THREADS",
           "openmp": "OMP_NUM_THREADS"}


def apply_thread_vars(values: dict[str, str]) -> None:
    """Thread pools as a fresh process with ``values`` in its environment sizes them. The libraries
    read their variable once, at load: those loaded already (numpy's BLAS) are resized through
    threadpoolctl, those loaded later read the environment."""
    os.environ.update(values)
    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().lib_controllers:
        value = values.get(_VAR_OF.get(lib.internal_api, "OMP_NUM_THREADS"), "")
        if value.isdigit() and int(value) > 0:
            lib.set_num_threads(int(value))
