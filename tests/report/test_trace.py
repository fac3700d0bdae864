"""The step as a Chrome trace: valid trace-event JSON, one track per GPU and stream."""

import json

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.report.trace import chrome_trace
from scalesim.app.run import run
from scalesim.scenario import load_scenario

TINY = {"name": "tiny 4x A100", "cluster": {"node": "dgx-a100", "gpus": 4}, "model": "gpt2-124m",
        "training": {"precision": "bf16", "seq_len": 256, "global_batch": 16, "micro_batch": 2, "tokens": 1e8}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def test_trace_has_one_track_per_gpu_and_stream_and_spans_the_step(tiny):
    result = run(*load_scenario(tiny), baseline=False)
    trace = json.loads(json.dumps(chrome_trace(result.timeline)))       # survives a JSON round trip
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in complete)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes) == list(range(4)) == sorted({e["pid"] for e in complete})
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    streams = {iv.stream for iv in result.timeline.intervals}
    assert {name for name in threads.values()} == streams
    assert {(e["pid"], e["tid"]) for e in complete} <= set(threads)
    # Microseconds: the last event ends at the simulated step time.
    end = max(e["ts"] + e["dur"] for e in complete)
    assert end == pytest.approx(result.step_time_s * 1e6)
    assert len(complete) == len(result.timeline.intervals)


def test_tasks_on_one_stream_do_not_overlap(tiny):
    result = run(*load_scenario(tiny), baseline=False)
    events = [e for e in chrome_trace(result.timeline)["traceEvents"] if e["ph"] == "X"]
    for track in {(e["pid"], e["tid"]) for e in events}:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if (e["pid"], e["tid"]) == track)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))


def test_run_writes_the_trace_file(tiny, tmp_path):
    path = tmp_path / "step.json"
    out = CliRunner().invoke(main, ["run", str(tiny), "--no-plots", "--json", "--trace", str(path)])
    assert out.exit_code == 0, out.output
    data = json.loads(path.read_text())
    assert "traceEvents" in data and data["otherData"]["gpus"] == 4
