"""What a plan search leaves undone: counts for plans it never simulates, collections of a step's
objects that refcounting frees anyway (issue 20)."""

import gc

import yaml

import scalesim.app.run as run_module
from scalesim.app.plans import check_points, cluster_for, search_points
from scalesim.app.sweep import evaluate_point
from scalesim.parallel import size
from scalesim.parallel.size import step_counts
from scalesim.app.setup import prepare
from scalesim.scenario import load_scenario

# GPT-2 1.5B on 24 GB RTX 4090s: the small micro-batches fit, the large ones do not
TIGHT = {"name": "tight search", "cluster": {"node": "rtx4090-pcie-8", "gpus": 2}, "model": "gpt2-1.5b",
         "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 64, "micro_batch": 4, "tokens": 1e8}}


def _load(tmp_path, data):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


def test_only_plans_that_fit_are_sized_for_simulation(tmp_path):
    base, file = _load(tmp_path, TIGHT)
    grown, _ = cluster_for(base, 2, file)
    points, _ = search_points(base, 2, file)
    tasks: dict = {}
    rows = check_points(points, base, file, {2: grown}, tasks=tasks)
    statuses = {r["status"] for r in rows}
    assert {"ok", "does_not_fit"} <= statuses, statuses
    assert set(tasks) == {p for p, r in zip(points, rows) if r["status"] == "ok"}
    assert all(t > 0 for t in tasks.values())


def test_a_plan_is_evaluated_whole_without_the_cyclic_collector(tmp_path, monkeypatch):
    """Building, playing and reading a step make tens of thousands of objects without cycles: a
    collection in between scans them all and finds nothing; after the plan, refcounting has freed them."""
    base, file = _load(tmp_path, TIGHT)
    grown, _ = cluster_for(base, 2, file)
    point = next(p for p in search_points(base, 2, file)[0] if p.pp == 2 and p.micro_batch == 1)
    read = run_module.columns
    seen = []
    monkeypatch.setattr(run_module, "columns", lambda timeline: seen.append(gc.isenabled()) or read(timeline))
    assert gc.isenabled()
    row = evaluate_point(point, base, file, grown)
    assert row["status"] == "ok" and seen == [False]      # the timeline read after the play, still without
    assert gc.isenabled()


def test_bucket_counts_read_parameter_tensors_only_where_they_bound_the_buckets(tmp_path, monkeypatch):
    base, file = _load(tmp_path, TIGHT)
    setup = prepare(base, file)
    expected = step_counts(setup.model, setup.plan, 2)

    def unread(layer):
        raise AssertionError("parameter tensors read for DDP buckets sized by bytes alone")

    monkeypatch.setattr(size, "param_tensors", unread)
    assert step_counts(setup.model, setup.plan, 2) == expected
