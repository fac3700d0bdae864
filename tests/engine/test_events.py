"""engine/events: simpy's loop, timeouts and triggers without its layers, in exactly simpy's order;
and the shortcuts built on them leave every timeline as it was (stretch tries, lone bundles)."""

import random
from pathlib import Path

import pytest
import simpy

import scalesim.engine.simulator as simulator
from scalesim.app.setup import prepare
from scalesim.engine import events, simulate
from scalesim.engine.closed_form import inline_call_chains
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def _script(env: simpy.Environment, fast: bool, seed: int) -> list:
    """A random mix of timeouts, triggers at the same instants and processes; the order things ran in."""
    rng = random.Random(seed)
    ran: list = []
    pending = [env.event() for _ in range(20)]

    def walk(name: int):
        for step in range(15):
            if rng.random() < 0.3 and pending:
                event = pending.pop(rng.randrange(len(pending)))
                events.succeed(event) if fast else event.succeed()
            delay = rng.choice((0.0, 0.5, 1.0, 0.1 + 0.2))
            yield events.timeout(env, delay) if fast else env.timeout(delay)
            ran.append((name, step, env.now))

    for name in range(6):
        env.process(walk(name))
    for k, event in enumerate(pending[:]):
        event.callbacks.append(lambda _e, k=k: ran.append(("event", k, env.now)))
    events.run(env) if fast else env.run()
    return ran


@pytest.mark.parametrize("seed", range(5))
def test_the_loop_timeouts_and_triggers_run_everything_in_simpys_order(seed):
    assert _script(simpy.Environment(), True, seed) == _script(simpy.Environment(), False, seed)


def _waits(env: simpy.Environment, fast: bool, seed: int) -> list:
    """Walks that wait for all of several events at once, triggered at the same instants as others
    resume; the order things ran in (with what the queue numbered them)."""
    rng = random.Random(seed)
    ran: list = []
    triggers = [env.event() for _ in range(12)]

    def trigger(k: int):
        for _ in range(k % 3 + 1):
            delay = rng.choice((0.0, 0.5, 1.0))
            yield events.timeout(env, delay) if fast else env.timeout(delay)
        events.succeed(triggers[k]) if fast else triggers[k].succeed()
        ran.append(("trigger", k, env.now, next(env._eid)))

    def waiter(name: int):
        for step in range(5):
            wanted = [e for e in rng.sample(triggers, rng.randrange(1, 5)) if e.callbacks is not None]
            if wanted:
                yield events.all_of(env, wanted) if fast else env.all_of(wanted)
            ran.append((name, step, env.now, next(env._eid)))
            delay = rng.choice((0.0, 0.5))
            yield events.timeout(env, delay) if fast else env.timeout(delay)

    for k in range(len(triggers)):
        env.process(trigger(k))
        if k % 2:
            env.process(waiter(k))
    events.run(env) if fast else env.run()
    return ran


@pytest.mark.parametrize("seed", range(8))
def test_waiting_for_all_of_several_events_runs_as_simpys_condition_does(seed):
    assert _waits(simpy.Environment(), True, seed) == _waits(simpy.Environment(), False, seed)


def test_a_walk_that_raises_stops_the_loop_with_its_error_and_a_negative_delay_is_refused():
    env = simpy.Environment()

    def walk():
        yield events.timeout(env, 1.0)
        raise RuntimeError("deadlock")

    env.process(walk())
    with pytest.raises(RuntimeError, match="deadlock"):
        events.run(env)
    with pytest.raises(ValueError):
        events.timeout(env, -1.0)
    done = env.event()
    events.succeed(done)
    with pytest.raises(RuntimeError):
        events.succeed(done)


def _program(name: str, changes: dict | None = None):
    scenario, file = load_scenario(ROOT / name)
    return prepare(scenario.with_changes(**changes) if changes else scenario, file).step.program


SHIPPED = [("scenarios/8x4090-ddp.yaml", {}),
           ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 16}}),
           ("scenarios/2x4090-llama2-70b-qlora.yaml", {})]


@pytest.mark.parametrize("name, changes", SHIPPED)
def test_awaited_events_are_the_tasks_other_walks_wait_for(name, changes):
    program = _program(name, changes)
    env = simpy.Environment()
    for rank, tasks in program.tasks.items():
        streams: dict = {}
        for index, task in enumerate(tasks):
            streams.setdefault(task.stream, []).append(index)
        walks, order_deps = inline_call_chains(tasks, streams, {})
        walk_of = {index: name for name, order in walks.items() for index in order}
        awaited = {d for i, task in enumerate(tasks) for d in task.deps if walk_of[d] != walk_of[i]}
        awaited |= set(order_deps.values()) | {i for i, task in enumerate(tasks) if task.host_sync}
        made, crossing = events.awaited_events(env, tasks, walks, order_deps, True)
        assert {i for i, event in enumerate(made) if event is not None} == awaited
        for i, task in enumerate(tasks):
            deps = task.deps + ((order_deps[i],) if i in order_deps else ())
            assert crossing[i] == tuple(d for d in deps if d in awaited)


@pytest.mark.parametrize("name, changes", SHIPPED)
def test_trying_a_stretch_at_every_task_gives_the_same_timeline(name, changes, monkeypatch):
    program = _program(name, changes)
    skipping = simulate(program, exact=True)
    monkeypatch.setattr(simulator, "stretch_starts", lambda tasks, indices, *_: [True] * len(indices))
    trying = simulate(program, exact=True)
    assert trying.intervals == skipping.intervals
    assert (trying.end_s, trying.bytes_sent, trying.bytes_delivered, trying.compute_slowdown_s) == (
        skipping.end_s, skipping.bytes_sent, skipping.bytes_delivered, skipping.compute_slowdown_s)
