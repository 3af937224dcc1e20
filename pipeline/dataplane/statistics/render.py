"""Statistics for people: a fixed-width table (`baton inspect`) and an HTML page with histograms.

Pure Python (no TensorFlow, no Beam), so `baton inspect` can import it cheaply:

    from baton.pipeline.dataplane.statistics.render import statistics_table, html_path
    print(statistics_table(run_dir / "statistics" / "statistics"))
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

HTML_FILE = "index.html"


def _load(statistics: str | Path | dict[str, Any]) -> dict[str, Any]:
    if isinstance(statistics, dict):
        return statistics
    p = Path(statistics)
    return json.loads((p / "statistics.json" if p.is_dir() else p).read_text())


def html_path(statistics_dir: str | Path) -> Path:
    """The HTML page of a statistics artifact directory."""
    return Path(statistics_dir) / HTML_FILE


def _num(x: Any, width: int = 10) -> str:
    if x is None:
        return "-".rjust(width)
    if isinstance(x, float):
        text = f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3e}"
    else:
        text = str(x)
    return text.rjust(width)


def statistics_table(statistics: str | Path | dict[str, Any]) -> str:
    """A readable table per split: one row per feature (numeric and string sections)."""
    data = _load(statistics)
    out: list[str] = []
    for split, s in data["splits"].items():
        feats = s["features"]
        out.append(f"split {split}: {s['rows']} rows")
        numeric = {n: f for n, f in feats.items() if f["type"] == "float32"}
        strings = {n: f for n, f in feats.items() if f["type"] != "float32"}
        w = max([len(n) for n in feats] + [7])
        if numeric:
            head = ["count", "missing", "mean", "std", "min", "median", "max"]
            out.append("  " + "numeric".ljust(w) + "".join(h.rjust(10) for h in head))
            for n, f in numeric.items():
                med = f["quantiles"].get("0.50")
                cells = [f["count"], _miss(f), f["mean"], f["std"], f["min"], med, f["max"]]
                flag = "  inf!" if f.get("inf") else ""
                if f.get("shape"):  # a tensor: rows above, its values' distribution
                    flag += f"  tensor {f['shape']}, over {f.get('values', 0)} values"
                out.append("  " + n.ljust(w) + "".join(_num(c) for c in cells) + flag)
        if strings:
            out.append("  " + "string".ljust(w) + "count".rjust(10) + "missing".rjust(10)
                       + "distinct".rjust(10) + "  top values")
            for n, f in strings.items():
                top = ", ".join(f"{v} ({c})" for v, c in f["top"][:4])
                out.append("  " + n.ljust(w) + _num(f["count"]) + _num(_miss(f))
                           + _num(f["distinct"]) + "  " + top[:60])
        out.append("")
    return "\n".join(out).rstrip()


def _miss(f: dict[str, Any]) -> str:
    rows = max(f.get("rows", 0), 1)
    return f"{100 * f['missing'] / rows:.1f}%"


def _svg_histogram(edges: list[float], counts: list[float], width: int = 260,
                   height: int = 70) -> str:
    if not counts:
        return "<em>no finite values</em>"
    top = max(counts) or 1.0
    bw = width / len(counts)
    bars = "".join(
        f'<rect x="{i * bw:.1f}" y="{height - c / top * height:.1f}" width="{bw - 1:.1f}" '
        f'height="{c / top * height:.1f}"><title>[{edges[i]:.4g}, {edges[i + 1]:.4g}): '
        f'{c:.0f}</title></rect>'
        for i, c in enumerate(counts))
    return (f'<svg width="{width}" height="{height + 14}" class="hist">{bars}'
            f'<text x="0" y="{height + 12}">{edges[0]:.4g}</text>'
            f'<text x="{width}" y="{height + 12}" text-anchor="end">{edges[-1]:.4g}</text></svg>')


def _svg_bars(top: list[list[Any]], width: int = 260) -> str:
    if not top:
        return "<em>no values</em>"
    peak = max(c for _, c in top) or 1
    rows = "".join(
        f'<rect x="90" y="{i * 14}" width="{c / peak * (width - 95):.1f}" height="12"></rect>'
        f'<text x="86" y="{i * 14 + 10}" text-anchor="end">{html.escape(str(v))[:14]}</text>'
        for i, (v, c) in enumerate(top[:10]))
    return f'<svg width="{width}" height="{min(len(top), 10) * 14}" class="bars">{rows}</svg>'


def write_html(statistics: str | Path | dict[str, Any], path: str | Path) -> Path:
    """A self-contained HTML page: per split, one card per feature with its histogram."""
    data = _load(statistics)
    parts = ["<!doctype html><meta charset='utf-8'><title>Baton statistics</title><style>",
             "body{font:13px sans-serif;margin:20px}.card{display:inline-block;vertical-align:top;"
             "border:1px solid #ccc;border-radius:4px;padding:8px;margin:4px;width:280px}"
             "rect{fill:#4a7bd0}.bars rect{fill:#d08a4a}text{font-size:10px}"
             "table{border-collapse:collapse}td{padding:0 6px}</style>",
             "<h1>Statistics</h1>"]
    for split, s in data["splits"].items():
        parts.append(f"<h2>{html.escape(split)} &mdash; {s['rows']} rows</h2>")
        for name, f in s["features"].items():
            kind = f"{f['type']}{f['shape']}" if f.get("shape") else f["type"]
            parts.append(f"<div class='card'><b>{html.escape(name)}</b> <i>{kind}</i><table>")
            keys = (["count", "missing", "mean", "std", "min", "max", "inf", "nan"]
                    if f["type"] == "float32" else ["count", "missing", "distinct"])
            for k in keys:
                parts.append(f"<tr><td>{k}</td><td>{_num(f.get(k), 0)}</td></tr>")
            parts.append("</table>")
            if f["type"] == "float32":
                h = f.get("histogram", {})
                parts.append(_svg_histogram(h.get("edges", []), h.get("counts", [])))
            else:
                parts.append(_svg_bars(f["top"]))
            parts.append("</div>")
    out = Path(path)
    out.write_text("".join(parts) + "\n", encoding="utf-8")
    return out
