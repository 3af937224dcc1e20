"""The evaluation report: one self-contained HTML file (no scripts, no network, inline SVG).

It has to open from a laptop's file browser or a CI artifact store, so everything is inline:
the gate decision, a metrics table with thresholds and baseline, bars per slice, the confusion
matrix and the training curves from the model's history.json.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;
text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}.pass{color:#1a7f37}
.fail{color:#cf222e;font-weight:600}h1 span{font-size:.7em;padding:.1em .5em;border-radius:.3em}
.ok{background:#dafbe1}.no{background:#ffebe9}svg text{font:11px sans-serif}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: Any) -> str:
    if x is None:
        return "&ndash;"
    if isinstance(x, float):
        return f"{x:.4g}" if math.isfinite(x) else str(x)
    return _e(x)


def render(
    *, title: str, blessing: Mapping[str, Any], overall: Mapping[str, float],
    by_slice: Mapping[str, Mapping[str, Mapping[str, float]]], confusion: Sequence[Sequence[int]],
    classes: Sequence[str], history: Mapping[str, Sequence[float]] | None,
    calibration: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None,
) -> str:
    verdict = ('<span class="ok">BLESSED</span>' if blessing["blessed"]
               else '<span class="no">NOT BLESSED</span>')
    parts = [f"<!doctype html><meta charset=utf-8><title>{_e(title)}</title><style>{STYLE}</style>",
             f"<h1>{_e(title)} {verdict}</h1>"]
    if baseline:
        parts.append(f"<p>Baseline: run <code>{_e(baseline.get('run_id'))}</code> "
                     f"(last blessed model of this pipeline).</p>")
    else:
        parts.append("<p>No baseline: no earlier blessed model in this pipeline.</p>")
    parts.append(_checks(blessing["checks"]))
    parts.append(_metrics(overall, (baseline or {}).get("metrics", {})))
    for feature, values in by_slice.items():
        parts.append(_slice_bars(feature, values))
    if confusion:
        parts.append(_confusion(confusion, classes))
    if calibration and calibration.get("bins"):
        parts.append(_calibration(calibration))
    if history:
        parts.append(_curves(history))
    return "\n".join(parts) + "\n"


def _checks(checks: Sequence[Mapping[str, Any]]) -> str:
    rows = ["<h2>Gate</h2><table><tr><th class=l>check</th><th class=l>metric</th>"
            "<th class=l>slice</th><th>value</th><th>threshold</th><th>baseline</th>"
            "<th class=l>result</th></tr>"]
    if not checks:
        rows.append("<tr><td class=l colspan=7>no checks configured: every model is blessed"
                    "</td></tr>")
    for c in checks:
        th = c["threshold"]
        if c["kind"] == "finite":
            th = "finite"
        elif isinstance(th, Mapping):
            th = " ".join(f"{k} {v}" for k, v in (("&ge;", th.get("min")), ("&le;", th.get("max")))
                          if v is not None)
        else:
            th = f"worsening &le; {th}"
        ok = c["passed"]
        rows.append(
            f"<tr><td class=l>{_e(c['kind'])}</td><td class=l>{_e(c['metric'])}</td>"
            f"<td class=l>{_e(c.get('slice') or 'all')}</td><td>{_num(c.get('value'))}</td>"
            f"<td>{th}</td><td>{_num(c.get('baseline'))}</td>"
            f"<td class='l {'pass' if ok else 'fail'}'>{'pass' if ok else 'FAIL'} "
            f"{_e(c.get('note', ''))}</td></tr>")
    return "".join(rows) + "</table>"


def _metrics(overall: Mapping[str, float], base: Mapping[str, Any]) -> str:
    rows = ["<h2>Metrics (eval split)</h2><table><tr><th class=l>metric</th><th>value</th>"
            "<th>baseline</th></tr>"]
    for k in sorted(overall):
        rows.append(f"<tr><td class=l>{_e(k)}</td><td>{_num(overall[k])}</td>"
                    f"<td>{_num(base.get(k))}</td></tr>")
    return "".join(rows) + "</table>"


def _slice_bars(feature: str, values: Mapping[str, Mapping[str, float]]) -> str:
    metric = "accuracy" if any("accuracy" in m for m in values.values()) else "mae"
    width, row = 420, 22
    items = sorted(values.items())
    top = max([m.get(metric, 0.0) for _, m in items] + [1e-9])
    scale = 1.0 if metric == "accuracy" else top
    svg = [f"<svg width={width + 260} height={row * len(items) + 10}>"]
    for i, (value, m) in enumerate(items):
        v = m.get(metric, 0.0)
        w = int(width * (v / scale if scale else 0))
        y = i * row + 4
        svg.append(f"<text x=0 y={y + 14}>{_e(value)[:22]}</text>"
                   f"<rect x=150 y={y} width={w} height={row - 6} fill=#4c8bf5></rect>"
                   f"<text x={155 + w} y={y + 14}>{v:.3f} (n={int(m.get('example_count', 0))})"
                   f"</text>")
    svg.append("</svg>")
    return f"<h2>{_e(metric)} by {_e(feature)}</h2>" + "".join(svg)


def _confusion(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> str:
    top = max([max(r) for r in matrix if r] + [1])
    rows = ["<h2>Confusion matrix</h2><table><tr><th class=l>true \\ predicted</th>"]
    rows += [f"<th>{_e(c)}</th>" for c in classes] + ["</tr>"]
    for name, r in zip(classes, matrix, strict=False):
        rows.append(f"<tr><th class=l>{_e(name)}</th>")
        for v in r:
            shade = 255 - int(150 * v / top)
            rows.append(f"<td style='background:rgb({shade},{shade},255)'>{v}</td>")
        rows.append("</tr>")
    return "".join(rows) + "</table>"


def _calibration(cal: Mapping[str, Any]) -> str:
    rows = [f"<h2>Calibration (ECE {cal['ece']:.4f})</h2><table><tr><th>confidence bin</th>"
            "<th>rows</th><th>mean confidence</th><th>accuracy</th></tr>"]
    for b in cal["bins"]:
        lo, hi = b["bin"]
        rows.append(f"<tr><td>{lo:.1f}&ndash;{hi:.1f}</td><td>{b['count']}</td>"
                    f"<td>{b['confidence']:.3f}</td><td>{b['accuracy']:.3f}</td></tr>")
    return "".join(rows) + "</table>"


def _curves(history: Mapping[str, Sequence[float]]) -> str:
    out = ["<h2>Training curves</h2>"]
    w, h = 320, 140
    for name, ys in sorted(history.items()):
        ys = [float(y) for y in ys if isinstance(y, int | float) and math.isfinite(float(y))]
        if len(ys) < 2:
            continue
        lo, hi = min(ys), max(ys)
        span = (hi - lo) or 1.0
        pts = " ".join(f"{10 + i * (w - 20) / (len(ys) - 1):.1f},{h - 20 - (y - lo) / span * (h - 40):.1f}"
                       for i, y in enumerate(ys))
        out.append(f"<svg width={w} height={h} style='border:1px solid #eee;margin:4px'>"
                   f"<text x=10 y=14>{_e(name)}: {ys[0]:.3g} &rarr; {ys[-1]:.3g} "
                   f"({len(ys)} epochs)</text><polyline fill=none stroke=#4c8bf5 "
                   f"stroke-width=2 points='{pts}'/></svg>")
    return "".join(out)
