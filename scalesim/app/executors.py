"""Where a sweep's simulations run: this process, a local process pool, or a Dask cluster.

Each choice is a `concurrent.futures.Executor`, so the sweep maps its point ->
row function the same way on all of them and orders the rows itself (by point,
never by completion): the executor changes how fast a sweep runs, not what it
finds. Dask is an optional extra (`pip install 'scalesim[dask]'`), imported
only when asked for.

    local              a process pool on this machine (--workers processes;
                       1 runs in this process, for debuggers and tests)
    dask-local         a distributed.LocalCluster started for the run
                       (--workers single-threaded worker processes, loopback)
    dask://HOST:PORT   an existing Dask scheduler; its workers need scalesim
                       installed and the files the scenario names
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat

from scalesim.engine.fast_forward import exact_requested, exact_simulation

from scalesim.errors import InputError
from scalesim.limits import check_workers

ALLOWED = "local, dask-local, dask://HOST:PORT"
DASK_INSTALL = "pip install 'scalesim[dask]'"
CONNECT_TIMEOUT_S = 5
TASKS_PER_WORKER = 2        # a pool keeps this many tasks per worker in flight: busy, yet quick to stop
_ADDRESS = re.compile(r"^dask://(?P<host>[^\s:/]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """Which executor, with how many workers (None: the remote cluster's own)."""

    kind: str                   # "local" | "dask-local" | "dask"
    workers: int | None = None
    address: str | None = None  # tcp://HOST:PORT for "dask"


def parse_executor(text: str, workers: int | None = None) -> ExecutorSpec:
    """'local' | 'dask-local' | 'dask://HOST:PORT' -> ExecutorSpec; checks Dask is installed when asked for.

    `workers` (local and dask-local) defaults to the CPU count.
    """
    if workers is not None and workers < 1:
        raise InputError(f"{workers} workers: give at least 1", key="--workers")
    check_workers(workers)
    local_workers = workers or os.cpu_count() or 1
    if text == "local":
        return ExecutorSpec("local", local_workers)
    if text == "dask-local":
        _require_dask(text)
        return ExecutorSpec("dask-local", local_workers)
    match = _ADDRESS.match(text)
    if match and 0 < int(match["port"]) < 65536:
        _require_dask(text)
        return ExecutorSpec("dask", None, f"tcp://{match['host']}:{match['port']}")
    raise InputError(f"unknown executor '{text}'; allowed: {ALLOWED}", key="--executor")


def _require_dask(text: str):
    try:
        import distributed
    except ImportError:
        raise InputError(f"'{text}' runs on Dask, which is not installed here: {DASK_INSTALL} "
                         "(or use --executor local)", key="--executor") from None
    return distributed


class InProcessExecutor(cf.Executor):
    """Runs each call when it is submitted, in this process: `--workers 1` (debuggers, profilers, tests)."""

    def submit(self, fn, /, *args, **kwargs) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:       # noqa: BLE001 - the caller reads it from the future, as with a pool
            future.set_exception(exc)
        return future


@dataclass(slots=True)
class Pool:
    """An open executor and how many tasks to keep in flight on it (None: all at once)."""

    executor: cf.Executor
    in_flight: int | None


@contextlib.contextmanager
def open_pool(spec: ExecutorSpec) -> Iterator[Pool]:
    """The executor of `spec`, shut down on leaving (at once, cancelling queued tasks, on an error
    or Ctrl-C)."""
    if spec.kind == "local" and spec.workers == 1:
        yield Pool(InProcessExecutor(), 1)
    elif spec.kind == "local":
        executor = cf.ProcessPoolExecutor(max_workers=spec.workers, mp_context=_process_context(),
                                          initializer=_start_worker)
        try:
            yield Pool(executor, TASKS_PER_WORKER * spec.workers)
        except BaseException:
            _stop_now(executor)
            raise
        if getattr(executor, "_broken", False):
            # A worker died and the pool broke. CPython (3.11-3.13) can be starting a replacement
            # worker from submit() while its manager thread terminates the old ones; the new one is
            # never told to stop, the manager thread joins it forever and so would shutdown(wait=True).
            _stop_now(executor)
        else:
            executor.shutdown(wait=True)
    else:
        with _dask_client(spec) as client:
            executor = client.get_executor(pure=False)
            try:
                yield Pool(executor, None)
            finally:
                executor.shutdown(wait=False)


def _process_context():
    """forkserver where there is one (safe with the progress bar's thread; workers start from a
    process that already imported the sweep), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        from multiprocessing import forkserver

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["scalesim.app.sweep"])
        with _started_ignoring_interrupts():    # Ctrl-C during its preload: no traceback from it
            forkserver.ensure_running()
        return context
    return multiprocessing.get_context("spawn")


def _start_worker() -> None:
    """Ctrl-C reaches the whole process group: let the main process alone decide to stop. And a
    worker whose sweep was killed exits instead of waiting for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        def exit_with_parent() -> None:
            multiprocessing.connection.wait([parent.sentinel])
            os._exit(1)
        threading.Thread(target=exit_with_parent, daemon=True, name="exit-with-sweep").start()


def _stop_now(executor: cf.ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the running tasks now, not after their simulations."""
    terminate = getattr(executor, "terminate_workers", None)        # Python 3.14+
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(executor, "_processes", None) or {}).values())   # shutdown forgets them
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


@contextlib.contextmanager
def _dask_client(spec: ExecutorSpec):
    distributed = _require_dask(spec.kind if spec.kind == "dask-local" else spec.address)
    if spec.kind == "dask-local":
        with _started_ignoring_interrupts():
            cluster = distributed.LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                               silence_logs=logging.ERROR)
        with cluster, distributed.Client(cluster) as client:
            yield client
        return
    try:
        client = distributed.Client(spec.address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot reach a Dask scheduler at {spec.address} within {CONNECT_TIMEOUT_S} s "
                         f"({exc.__class__.__name__}); start one with `dask scheduler` and workers with "
                         f"`dask worker {spec.address}`", key="--executor") from None
    with client:
        yield client


@contextlib.contextmanager
def _started_ignoring_interrupts():
    """Processes started in here inherit an ignored SIGINT, so Ctrl-C stops the sweep (which then
    closes them) without a traceback from each Dask worker."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def exactly(fn: Callable, *args):
    """fn(*args) with every step played whole (`--exact`), in whatever process runs it."""
    with exact_simulation():
        return fn(*args)


def completed(pool: Pool, fn: Callable, payloads: Iterable[tuple]) -> Iterator[tuple[int, object]]:
    """(index, fn(*payload)) for every payload, in the order they finish; an exception raised
    on the way (a worker that died, a lost connection) comes back as the result, so one bad task
    never loses the others."""
    waiting = enumerate(payloads)
    running: dict[cf.Future, int] = {}
    if exact_requested():                  # --exact reaches the workers (another process, or a Dask host)
        waiting = ((i, (task, *args)) for task, (i, args) in zip(repeat(fn), waiting))
        fn = exactly

    def fill() -> None:
        while pool.in_flight is None or len(running) < pool.in_flight:
            item = next(waiting, None)
            if item is None:
                return
            try:
                future = pool.executor.submit(fn, *item[1])
            except Exception as exc:       # noqa: BLE001 - e.g. a pool broken by a worker that died
                future = cf.Future()
                future.set_exception(exc)
            running[future] = item[0]

    fill()
    while running:
        done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
        for future in done:
            index = running.pop(future)
            try:
                result = future.result()
            except Exception as exc:       # noqa: BLE001 - reported as the task's result, see above
                result = exc
            yield index, result
        fill()
