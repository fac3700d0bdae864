"""Are two `scalesim validate --json` outputs the same to the last digit?

    python validation/compare_validate.py before.json after.json

Compares every case (predicted, loso_predicted, status, reason, ...) by id, then the summaries;
prints each difference and exits 1 if there is any, 0 when the two are identical. For checking
that a change meant to make validate faster changed no prediction.
"""

from __future__ import annotations

import json
import sys


def case_differences(a: list[dict], b: list[dict]) -> list[str]:
    left, right = {c["id"]: c for c in a}, {c["id"]: c for c in b}
    out = [f"{i}: only in the first" for i in left if i not in right]
    out += [f"{i}: only in the second" for i in right if i not in left]
    for i in left.keys() & right.keys():
        for key in sorted(left[i].keys() | right[i].keys()):
            if left[i].get(key) != right[i].get(key):
                out.append(f"{i}: {key} {left[i].get(key)!r} -> {right[i].get(key)!r}")
    if not out and [c["id"] for c in a] != [c["id"] for c in b]:
        out.append("the same cases in another order")
    return sorted(out)


def differences(a: dict, b: dict) -> list[str]:
    out = case_differences(a.get("cases", []), b.get("cases", []))
    for key in sorted((a.keys() | b.keys()) - {"cases"}):
        if a.get(key) != b.get(key):
            out.append(f"{key}: {json.dumps(a.get(key))} -> {json.dumps(b.get(key))}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().split("\n")[2].strip(), file=sys.stderr)
        return 2
    with open(argv[0]) as fa, open(argv[1]) as fb:
        a, b = json.load(fa), json.load(fb)
    found = differences(a, b)
    for line in found:
        print(line)
    print(f"{len(a.get('cases', []))} cases: " + (f"{len(found)} differences" if found else "identical"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
