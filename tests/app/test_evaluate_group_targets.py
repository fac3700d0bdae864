"""evaluate_group on cases of different targets (the helpers' "filter by id prefix" measurements): each case
gets its own simulation, not the first case's figure."""

from scalesim.app.validate import evaluate_group, groups_of, load_cases


def test_cases_of_different_targets_each_get_their_own_prediction():
    cases = [c for c in load_cases() if c.id in ("megatron-sc21-gpt-1.7B", "megatron-sc21-gpt-3.6B")]
    assert len(cases) == 2 and len(groups_of(cases)) == 2
    together = evaluate_group(cases)
    alone = [evaluate_group([c])[0] for c in cases]
    assert [o.case.id for o in together] == [c.id for c in cases]
    assert [o.predicted for o in together] == [o.predicted for o in alone]
    assert together[0].predicted != together[1].predicted        # two models, two step times
