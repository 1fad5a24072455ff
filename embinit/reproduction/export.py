"""The reproduction document rendered as Markdown, and its results as JSON/CSV exports."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from embinit.reproduction import frame
from embinit.reproduction.frame import Section  # the document's parts (export.Section for the sections)

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData


def write_exports(rep: ReproductionData, out_dir: Path) -> list[Path]:
    """Small result exports: one JSON of everything, a CSV per flat table, and the studies' figures."""
    from embinit.reproduction.beyond_figures import write_figures
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "reproduction.json"]
    paths[0].write_text(json.dumps(rep.exports, indent=1, default=str) + "\n")
    paths += write_figures(rep.exports, out_dir)   # the studies beyond the paper (issue 23)
    for name in ("table1", "table2", "table4", "runs", "dose_response", "oov_rules"):
        rows = rep.exports.get(name) or []
        if not rows:
            continue
        rows = [_csv_row(r) for r in rows]
        cols = [k for k in rows[0] if not isinstance(rows[0][k], (dict, list))]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        p = out_dir / f"{name}.csv"
        p.write_text(buf.getvalue())
        paths.append(p)
    return paths


def _csv_row(row: dict) -> dict:
    """A row as the CSVs hold it: `ci95`, the t interval's half-width before clipping, named so
    (`ci95_half_width_unclipped`, as in `embinit report --format csv`); the interval is ci_low, ci_high,
    clipped to the metric's range (mean ± the half-width can leave it). The JSON keeps `ci95`."""
    return {("ci95_half_width_unclipped" if k == "ci95" else k): v for k, v in row.items()}


def render(rep: ReproductionData, sections: list[Section], preamble: str = "", header: list[str] | None = None) -> str:
    """The document: the preamble, then each section; with `header` (embinit.reproduction.frame.header)
    a title block first. Headings with nothing under them and all-dash tables are left out."""
    if header is not None:
        lines = frame.title_block(preamble, header)
    else:
        lines = [preamble.rstrip(), ""] if preamble else []
    for sec in frame.clean(sections):
        lines += [f"## {sec.title}", "", *sec.lines, ""]
    return "\n".join(lines).rstrip() + "\n"
