"""One self-contained HTML page for a comparison: table, plots, assumptions and sources.

No external files or scripts: plots are embedded as base64 PNG, styles
inline, so the page can be mailed or attached to a purchase request as is.
It reads the `scalesim compare --json` object and the plot files.
"""

from __future__ import annotations

import base64
import datetime as _dt
from html import escape
from pathlib import Path

from scalesim.outputs import HTML_GENERATOR
from scalesim.report.comparison import ABOVE_LINEAR, summary_rows
from scalesim.report.formatting import MFU_MEANS, NO_FIT, bold_flags, plan_notation, unpriced_notes

CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
img { box-sizing: border-box; max-width: 100%; height: auto; border: 1px solid #eee; margin: 0.5em 0; }
.no { color: #b00; font-weight: bold; } .note { color: #555; font-size: 0.9em; }
.scroll { overflow-x: auto; max-width: 100%; } figure { margin: 0; }
td.src, th.src { text-align: left; min-width: 16em; }
@media (max-width: 600px) { body { margin: 0.5em auto; padding: 0 0.4em; } table { font-size: 0.72em; }
  th, td { padding: 2px 4px; } h1 { font-size: 1.25em; }
  .plot img { max-width: none; width: auto; height: 330px; } }
"""

PLOT_CAPTIONS = {
    "scaling": "Scaling efficiency: per-GPU throughput at each GPU count against one GPU, same per-GPU batch.",
    "time_cost": "Time and cost to train the scenario's budget; failures, restarts and checkpoints included.",
    "pareto": "Cost against time to train, rented (cloud) and owned (on-premises). Outlined points are on the "
              "Pareto front: no other option is both faster and cheaper.",
    "breakdown": "One optimizer step of the slowest GPU: compute, communication not hidden behind compute, "
                 "idle time (pipeline bubble, waiting for peers) and the optimizer.",
}


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{escape(Path(path).stem)}" src="data:image/png;base64,{data}">'


def _table(headers: list[str], rows: list[list[str]], left: int = 1, text_last: bool = False) -> str:
    """`left` leading columns left-aligned; `text_last`: the last column is prose (left-aligned, wide)."""
    def cls(i: int) -> str:
        return "l" if i < left else "src" if text_last and i == len(headers) - 1 else ""
    head = "".join(f'<th class="{cls(i)}">{escape(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{cls(i)}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _value(v) -> str:
    """
    >>> _value(15000.0), _value(1.58), _value(1.97e-05)
    ('15,000', '1.58', '1.97e-05')
    """
    if isinstance(v, float):
        if v == 0 or abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}" if abs(v) >= 0.01 else f"{v:.3g}"
    return escape(str(v))


def _summary(rows: list[dict], unc: dict | None) -> str:
    """Designs side by side, one column each, one metric per row; the best of a row among the designs
    that fit in bold, a design that does not fit marked so and never bold."""
    table = []
    for name, values, best, lowest in summary_rows(rows, unc):
        cells = [_cell(v, b) for v, b in zip(values, bold_flags(best, lowest, len(values)))]
        table.append([escape(name)] + cells)
    return _table(["metric"] + [r["scenario"] for r in rows], table)


def _cell(value: str, bold: bool) -> str:
    text = escape(value).replace(f"({NO_FIT})", f'<span class="no">({NO_FIT})</span>')
    text = text.replace(NO_FIT, f'<span class="no">{NO_FIT}</span>') if text == escape(NO_FIT) else text
    return f"<b>{text}</b>" if bold else text


def _assumptions(designs: list[dict]) -> str:
    """One table: an input per row, its value for each design side by side, and its source(s)."""
    inputs: dict[str, dict] = {}
    for k, design in enumerate(designs):
        rel = design.get("reliability") or {}
        rows = [(a["input"], a["value"], str(a["source"])) for a in design.get("assumptions", [])] + [
            ("checkpoint write (s)", rel.get("checkpoint_write_s"), "size / storage bandwidth"),
            ("checkpoint interval (s)", rel.get("checkpoint_interval_s"),
             "Young 1974: sqrt(2 x write x MTBF), capped at the run"),
            ("goodput", rel.get("goodput"), "Daly 2006, exponential failures")]
        for name, value, source in rows:
            entry = inputs.setdefault(name, {"values": [None] * len(designs), "sources": []})
            entry["values"][k] = value
            if source not in entry["sources"]:
                entry["sources"].append(source)
    table = [[escape(name)] + ["–" if v is None else _value(v) for v in e["values"]]
             + [escape("; ".join(e["sources"]))] for name, e in inputs.items()]
    headers = ["input"] + [d["scenario"] for d in designs] + ["source"]
    return _table(headers, table, text_last=True)


def _how_to_read(rows: list[dict]) -> str:
    """What the summary's words and costs mean: under the table, where they are read."""
    return ("<h2>How to read this</h2><ul>"
            "<li>Cloud cost = GPUs x wall-clock hours (failures, restarts and checkpoint writes included) "
            "x the GPU-hour price.</li>"
            "<li>On-premises cost = the purchase (GPUs, servers, network) spread evenly over the "
            "amortisation period and charged for the run's wall time, plus electricity for GPUs and "
            "hosts times PUE.</li>"
            "<li>Energy = GPUs at TDP while their kernels run and at idle power otherwise (from the "
            "simulated timeline), plus host draw; before PUE.</li>"
            "<li>Scaling efficiency compares per-GPU throughput with the same plan on one GPU, a reference "
            "not checked for memory (a model that fits only sharded would not fit that one GPU). "
            f"{ABOVE_LINEAR}.</li>"
            f"<li>{escape(MFU_MEANS)}.</li>"
            "<li>Goodput: the share of the wall time that trains; the rest is checkpoint writes, restarts "
            "after failures and the work lost since the last checkpoint.</li>"
            + (f"<li>{escape(words)}.</li>" if (words := plan_notation([r.get('plan') for r in rows])) else "")
            + "".join(f"<li>n/a ({k}): {escape(v)}.</li>" for k, v in unpriced_notes(rows).items())
            + "</ul>")


def compare_html(data: dict, plots: dict[str, Path], *, title: str = "scalesim comparison") -> str:
    """The page for a comparison (`data` = `scalesim compare --json`)."""
    rows = data["table"]
    unc = data.get("uncertainty")
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{HTML_GENERATOR}"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{escape(title)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>",
             f"<p class='note'>Generated by scalesim on {_dt.date.today().isoformat()} from "
             f"{', '.join(escape(r['file']) for r in rows)}. Every number below is a simulation of one "
             "training step scaled to the scenario's budget; the assumptions and their sources are listed "
             "at the end.</p>",
             "<h2>Summary</h2>", _summary(rows, unc)]
    front = data.get("pareto_front") or []
    if front:
        parts.append("<p>On the cost–time Pareto front (nothing else is both faster and cheaper): "
                     + "; ".join(f"{escape(p['scenario'])} ({p['kind'].replace('_', '-')})" for p in front)
                     + ".</p>")
    if unc:
        parts.append(f"<p class='note'>Uncertainty: {unc['samples']} Monte-Carlo samples (seed {unc['seed']}) "
                     "over achieved efficiency, failure rate and prices; the step is simulated once and its "
                     "time scaled by each sample's efficiency factor. 'Wins' is the share of samples in "
                     "which the design is fastest / cheapest.</p>")
    parts.append(_how_to_read(rows))
    parts.append("<h2>Plots</h2>")
    for name, path in plots.items():
        parts.append(f"<figure><div class='scroll plot'>{_img(path)}</div><figcaption class='note'>{escape(PLOT_CAPTIONS.get(name, ''))}"
                     "</figcaption></figure>")
    parts.append("<h2>Assumptions and sources</h2>")
    parts.append(_assumptions(data["designs"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_compare_html(data: dict, plots: dict[str, Path], path: Path, *, title: str = "scalesim comparison") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(compare_html(data, plots, title=title), encoding="utf-8")
    return path
