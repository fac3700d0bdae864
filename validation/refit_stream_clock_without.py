"""stream9's joint re-fit of the Lambda-fitted streaming rate and H100/H200 clock, on the 20 reference
cases of Megatron-LM 2020 (A100) and NeuSight H100: median |error| over a grid. It derives the two `without`
values in validation/fits.yaml (refit12, Dec 2026: 8.0 / 0.93 at 1.84%).

    python validation/refit_stream_clock_without.py 7.5,7.75,8.0,8.25 0.92,0.93,0.94,0.95,0.96 /tmp/grid.json
"""
import dataclasses, json, statistics, sys, time
from scalesim.app.validate import load_cases, evaluate_group, group_of
from scalesim.app.loso import source_key
from scalesim.hardware.user_catalog import load_catalog

base = load_catalog([])
def cat(s, c):
    gpus = [dataclasses.replace(g, stream_bytes_per_sm_cycle=s,
            **({"training_clock_fraction": c} if g.name in ("h100-sxm", "h200-sxm") else {}))
            for g in base.gpu_specs]
    return dataclasses.replace(base, gpu_specs=tuple(gpus))

cases = load_cases()
meg = [c for c in cases if c.id.startswith("megatron2020-")]
neu = [c for c in cases if c.id.startswith("neusight-h100")]
for c in meg + neu:
    assert group_of(c) == "reference", c.id
print(len(meg), len(neu), {source_key(c) for c in meg + neu}, flush=True)
S = [float(x) for x in sys.argv[1].split(",")]
C = [float(x) for x in sys.argv[2].split(",")]
out = {}
for s in S:
    t = time.time()
    a = {c.id: evaluate_group([c], cat(s, 0.94))[0].error for c in meg}   # A100: clock not fitted
    for cl in C:
        h = {c.id: evaluate_group([c], cat(s, cl))[0].error for c in neu}
        errs = {**a, **h}
        out[f"{s},{cl}"] = errs
        med = statistics.median(abs(e) for e in errs.values())
        print(f"s={s} c={cl} median={med*100:.2f}% megatron={statistics.median(abs(e) for e in a.values())*100:.2f}%"
              f" neusight={statistics.median(abs(e) for e in h.values())*100:.2f}%  ({time.time()-t:.0f}s)", flush=True)
json.dump(out, open(sys.argv[3], "w"), indent=1)
