"""HTML tables for notebooks: the numbers of an explanation or an attribution, each cell shaded by its
value, as Jupyter shows an object that has `_repr_html_`. Plain HTML with inline styles: nothing to
load, and the numbers stay in the cells, readable and copyable."""

from __future__ import annotations

import html
from typing import Optional, Sequence

Cell = Optional[float]


def _shade(value: Cell, scale: float, signed: bool) -> str:
    """A cell's background: blue for a weight or a positive value, red for a negative one, as deep
    as its share of `scale`."""
    if value is None or scale <= 0:
        return ""
    depth = min(abs(value) / scale, 1.0)
    colour = "214, 39, 40" if signed and value < 0 else "31, 119, 180"
    return f"background: rgba({colour}, {0.85 * depth:.3f});"


def table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[Cell], str]], caption: str = "",
          signed: bool = False, corner: str = "") -> str:
    """A table with one header row (`columns`), each row a label, its cells (None: empty) and a note
    after them. Weights (`signed` False) are shaded on 0 to 1; signed values on their largest size."""
    values = [abs(v) for _, cells, _ in rows for v in cells if v is not None]
    scale = max(values, default=0.0) if signed else 1.0
    cell = "padding: 2px 6px; text-align: right; font-family: monospace;"
    head = "".join(f'<th style="{cell}">{html.escape(c)}</th>' for c in columns)
    lines = ['<table style="border-collapse: collapse;">',
             f'<caption style="text-align: left;">{html.escape(caption)}</caption>' if caption else "",
             f'<tr><th style="{cell}">{html.escape(corner)}</th>{head}<th></th></tr>']
    for label, cells, note in rows:
        shaded = "".join(f'<td style="{cell}{_shade(v, scale, signed)}">{"" if v is None else f"{v:.3f}"}</td>'
                         for v in cells)
        lines.append(f'<tr><th style="{cell}">{html.escape(label)}</th>{shaded}'
                     f'<td style="{cell} text-align: left;">{html.escape(note)}</td></tr>')
    return "\n".join(lines + ["</table>"])
