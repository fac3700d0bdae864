"""Work done in a forked copy of this process while this one goes on (a second core's worth of time).

`run` plays its scaling curve's points (the 1-GPU baseline, the smaller clusters) in a child
while it plays the step itself: the two are independent and deterministic, so the child's
numbers are the ones this process would compute, and on two cores the command answers in
about the time of the longer of the two. The child's answer comes back pickled through a pipe.
`Fed` is a child that gets its inputs later, through another pipe: `run`'s plots are drawn by
one forked before the step, which imports matplotlib while the step is played.

`spare_cpu` says whether forking is worth it now (a busy machine has no second core to give).
Where `os.fork` is missing (Windows), or the child dies or its answer cannot be read back,
the work runs here when its result is asked for (`here`, when this process must do it another
way): the same answer, later.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Forked(Generic[T]):
    """`work()` running in a forked child; `result()` waits for it (re-raising what it raised),
    `close()` stops a child whose result nobody will ask for. Use it as a context manager.
    `here`: what gives the same answer in this process when the child cannot [`work`]."""

    def __init__(self, work: Callable[[], T], here: Callable[[], T] | None = None, fork: bool = True):
        self._work = here or work
        self._pid: int | None = None
        self._read: int | None = None
        if not (fork and hasattr(os, "fork")):    # not asked to, or cannot: `here` when the result is asked for
            return
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:                     # no process left to fork: do the work here later
            os.close(read)
            os.close(write)
            return
        if pid == 0:
            _child(work, read, write)       # never returns
        os.close(write)
        self._pid, self._read = pid, read

    def result(self) -> T:
        if self._pid is None:
            return self._work()
        try:
            with os.fdopen(self._read, "rb") as answer:
                self._read = None
                data = answer.read()
        except BaseException:               # interrupted while waiting: stop the child, then go on up
            self.close()
            raise
        self._reap()
        try:
            ok, value = pickle.loads(data)
        except Exception:                   # died, or its answer does not unpickle: do it here
            return self._work()
        if ok:
            return value
        raise value

    def close(self) -> None:
        if self._pid is None:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._read is not None:
            os.close(self._read)
            self._read = None
        self._reap()

    def _reap(self) -> None:
        pid, self._pid = self._pid, None
        if pid is not None:
            os.waitpid(pid, 0)

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


class Fed(Forked[T]):
    """`work(receive)` in a child forked now, which can get ready (`prepare()`, e.g. its imports)
    while this process computes what it needs: `receive()` returns, in turn, what `send` is given
    here, pickled through a pipe (the child waits for it). Where there is no child (not asked to
    fork, it could not, or it died), `work` runs here when the result is asked for, receiving the
    same messages: the same answer."""

    def __init__(self, work: Callable[[Callable[[], object]], T], fork: bool = True,
                 prepare: Callable[[], object] | None = None):
        self._sent: list = []
        self._feed: int | None = None
        inbox = None
        if fork and hasattr(os, "fork"):
            inbox, self._feed = os.pipe()

        def in_child() -> T:
            os.close(self._feed)
            if prepare is not None:
                prepare()
            with os.fdopen(inbox, "rb") as messages:
                return work(lambda: _received(messages))

        super().__init__(in_child, here=lambda: work(iter(self._sent).__next__), fork=inbox is not None)
        if inbox is not None:
            os.close(inbox)
            if self._pid is None:           # the fork failed: all here
                self._close_feed()

    def send(self, message: object) -> None:
        self._sent.append(message)
        if self._feed is None:
            return
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            view = memoryview(len(data).to_bytes(8, "little") + data)
            while view:
                view = view[os.write(self._feed, view):]
        except OSError:                     # the child is gone: result() does the work here
            self._close_feed()

    def close(self) -> None:
        self._close_feed()
        super().close()

    def result(self) -> T:
        self._close_feed()                  # nothing more to send: the child's receive() then fails
        return super().result()

    def _close_feed(self) -> None:
        if self._feed is not None:
            os.close(self._feed)
            self._feed = None


def _received(messages) -> object:
    size = int.from_bytes(messages.read(8), "little")
    return pickle.loads(messages.read(size))


def spare_cpu() -> bool:
    """Whether a forked process would find a CPU of its own: more CPUs this process may use than the
    1-minute load average (on a busy machine the two would share one, and the fork's copies of
    written pages only add work). Where the load is unknown, whether there is a second CPU."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                   # not on Linux
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return cpus > 1 and load < cpus


def _child(work: Callable, read: int, write: int) -> None:
    """In the child: do the work, send (True, result) or (False, exception) pickled, and leave
    without running the parent's exit handlers or flushing its buffers (os._exit)."""
    try:
        os.close(read)
        try:
            answer = (True, work())
        except BaseException as exc:         # noqa: BLE001 -- the parent re-raises it
            answer = (False, exc)
        try:
            data = pickle.dumps(answer)
        except Exception:                    # an exception that does not pickle: the parent redoes the work
            data = b""
        with os.fdopen(write, "wb") as out:
            out.write(data)
    finally:
        os._exit(0)
