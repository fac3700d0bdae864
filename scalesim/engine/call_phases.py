"""How a call's phases are played: by formula where nothing can touch their links, else on the network.

Mixed into the simulator's run state (`simulator._Run`): a call of an isolated plan takes its
closed-form time (engine/closed_form.py); otherwise each phase waits for its latency, then
its flows: those on private links by formula, the rest through the fluid network, or, where
their links are free, reserved there and timed by formula until another flow touches them
(engine/reservations.py).
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan
from scalesim.engine.events import timeout
from scalesim.engine.stretches import timer_at


class CallPhases:
    """The run state's side of playing a call's phases (it holds env, net, isolated, private,
    sent, flow_triples and reserve)."""

    def alone_s(self, plan: CollectivePlan) -> float:
        """A call timed by formula: count its bytes (all of them arrive) and return its time."""
        sent = self.sent.get(id(plan))
        if sent is None:
            sent = self.sent[id(plan)] = plan.bytes_sent
        self.net.bytes_sent += sent
        self.net.bytes_delivered += sent
        return self.isolated[id(plan)]

    def triples(self, flows: tuple) -> list:
        """The network's view of a phase's flows, built once per flow tuple for the run (the
        same list each time, so the network keeps what it derives from it)."""
        known = self.flow_triples.get(id(flows))
        if known is None or known[0] is not flows:
            known = self.flow_triples[id(flows)] = (flows, [(f.links, f.size_bytes, f.rate_cap_bytes_per_s)
                                                            for f in flows])
        return known[1]

    def _reserved_phase(self, phase, split: tuple | None) -> tuple | None:
        """The events that end a phase whose flows the network runs by formula (engine/reservations.py):
        its (exposed) flows', then, if its private flows (`private_splits`) may end later, theirs;
        None when the network must play it."""
        env = self.env
        exposed, private_s, private_bytes = (phase.flows, 0.0, 0.0) if split is None else split
        flows_s = env._now + phase.latency_s if phase.latency_s > 0 else env._now
        end_s = flows_s + private_s if private_s > 0 else flows_s     # of the private flows
        reserved = self.net.reserve(self.triples(exposed), phase.latency_s) if exposed else None
        if exposed and reserved is None:
            return None
        self.net.bytes_sent += private_bytes
        self.net.bytes_delivered += private_bytes
        if reserved is None:
            return (timer_at(env, end_s),)
        # More contention can only delay the exposed flows: if they end after the private ones
        # alone, they end the phase.
        return (reserved.timer,) if reserved.end_s >= end_s else (reserved.timer, timer_at(env, end_s))

    def _phases(self, plan: CollectivePlan):
        if id(plan) in self.isolated:
            # No other call can touch these links while this one runs: its time is the closed form.
            yield timeout(self.env, self.alone_s(plan))
            return
        split = self.private.get(id(plan))
        for index, phase in enumerate(plan.phases):
            if phase.flows and self.reserve:
                ends = self._reserved_phase(phase, None if split is None else split[index])
                if ends is not None:
                    for end in ends:
                        yield end
                    continue
            if phase.latency_s > 0:
                yield timeout(self.env, phase.latency_s)
            if not phase.flows:
                continue
            if split is None:
                yield self.net.start(self.triples(phase.flows))
                continue
            exposed, private_s, private_bytes = split[index]
            shared = self.net.start(self.triples(exposed)) if exposed else None
            private = timeout(self.env, private_s) if private_s > 0 else None
            self.net.bytes_sent += private_bytes
            self.net.bytes_delivered += private_bytes
            # Both parts end the phase: wait for each in turn (no condition event to schedule).
            if shared is not None:
                yield shared
            if private is not None and private.callbacks is not None:
                yield private
