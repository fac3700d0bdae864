import sys, time
from scalesim.app.validate import load_cases, evaluate_group
ids = open(sys.argv[1]).read().split()
cs = {c.id: c for c in load_cases()}
for i in ids:
    c = cs.get(i)
    if c is None: print(f"{i} MISSING", flush=True); continue
    t = time.time()
    try:
        for o in evaluate_group([c]):
            print(f"{o.case.id} {o.predicted:.6g} {o.case.measured:.6g} {o.error*100:+.2f} {time.time()-t:.0f}s", flush=True)
    except Exception as e:
        print(f"{i} ERROR {e!r}", flush=True)
