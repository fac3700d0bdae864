"""`program.no_collection` across threads: Python's collector is one switch for the whole process.

A Dask cluster of threads (tests/app/test_sweep_executors.py) plays plans on two threads at once,
each inside `no_collection`. Once, a block that read the collector "off" (the other thread held it)
and switched it off only after the other had switched it on again as it left, left it off for the
rest of the pytest run: the next test asserting it on failed at its first line (gcflake)."""

import threading

import scalesim.program as program
from scalesim.cli.wiring import collector_paused
from scalesim.program import no_collection

WAIT_S = 10.0      # only reached if a thread is stuck: the interleaving below is forced by events


class Switch:
    """Stands for the `gc` module: an on/off switch that holds the thread named "late" between
    reading it and acting on it until the "early" one has left its block."""

    def __init__(self, read: threading.Event, early_out: threading.Event):
        self.on, self._read, self._early_out = True, read, early_out

    def isenabled(self) -> bool:
        was = self.on
        if threading.current_thread().name == "late":
            self._read.set()
            self._early_out.wait(WAIT_S)
        return was

    def disable(self) -> None:
        self.on = False

    def enable(self) -> None:
        self.on = True


def test_the_collector_is_on_again_after_blocks_that_overlap_on_two_threads(monkeypatch):
    early_in, late_read, early_out = threading.Event(), threading.Event(), threading.Event()
    switch = Switch(late_read, early_out)
    monkeypatch.setattr(program, "gc", switch)

    def early():
        with no_collection():
            early_in.set()
            late_read.wait(WAIT_S)      # the late thread has read the switch (or has left its block)
        early_out.set()

    def late():
        early_in.wait(WAIT_S)
        with no_collection():
            pass
        late_read.set()

    threads = [threading.Thread(target=early, name="early"), threading.Thread(target=late, name="late")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * WAIT_S)
    assert early_in.is_set() and early_out.is_set()
    assert switch.on


def test_nested_blocks_on_one_thread_leave_the_collector_as_they_found_it(monkeypatch):
    switch = Switch(threading.Event(), threading.Event())
    monkeypatch.setattr(program, "gc", switch)
    with no_collection():
        with no_collection():
            assert not switch.on
        assert not switch.on
    assert switch.on
    switch.on = False
    with no_collection():
        pass
    assert not switch.on            # off before: not turned on by the block


def test_a_command_holds_the_collector_off_while_a_block_on_another_thread_opens_and_closes(monkeypatch):
    """`run` and `compare` pause the collector (cli/wiring.collector_paused) with the same holders as
    the library's blocks: one closing on another thread does not turn it on under the command."""
    switch = Switch(threading.Event(), threading.Event())
    monkeypatch.setattr(program, "gc", switch)

    def block():
        with no_collection():
            pass

    with collector_paused():
        thread = threading.Thread(target=block)
        thread.start()
        thread.join(WAIT_S)
        assert not switch.on
    assert switch.on
