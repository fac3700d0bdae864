"""Progress on a pipe: a line at least every interval while work runs, nothing for short work."""

import io
import time

from scalesim.app.heartbeat import heartbeat, lines


def test_long_work_says_what_and_how_far_at_every_interval():
    out = io.StringIO()
    for _ in lines(range(3), "simulating plans", 3, stream=out, interval=0.02):
        time.sleep(0.07)
    said = out.getvalue().splitlines()
    assert len(said) >= 3 and all(s.startswith("simulating plans: ") and " of 3 " in s for s in said)


def test_work_shorter_than_the_interval_prints_nothing():
    out = io.StringIO()
    with heartbeat("simulating", stream=out, interval=10.0):
        pass
    assert out.getvalue() == ""
