"""The report as one self-contained HTML page (``RUN/report/index.html``): opens from disk, no server, no network.

The page is a generic renderer: the report hands it tables (columns + rows, embedded once as JSON) and figures
(PNG files, embedded as base64). A few lines of inline JavaScript make every table sortable (click a header) and
filterable (a text box matching any cell, plus a drop-down per categorical column). Rows are rendered as one HTML
string per table, so a run of hundreds of models stays fast. The static HTML, CSS and JavaScript are
``page_template.html``, filled in at its ``__TITLE__``, ``__SUBTITLE__``, ``__NAV__``, ``__SECTIONS__`` and
``__DATA__`` placeholders.
"""

import base64
import html
import json
import math
import re
from pathlib import Path
from typing import List, Optional, Sequence

from pydantic import BaseModel, Field

TEMPLATE = Path(__file__).with_name("page_template.html")  # the page's static HTML, CSS and JavaScript


class Column(BaseModel):
    key: str
    label: str = ""
    digits: Optional[int] = None  # numbers are shown with this many decimals
    link: Optional[str] = None  # the key of the column holding this cell's link target
    filter: bool = False  # a drop-down of its distinct values


class Table(BaseModel):
    id: str
    title: str
    description: str = ""
    columns: List[Column]
    rows: List[List[object]] = Field(default_factory=list)


class Figure(BaseModel):
    caption: str
    png: Path
    svg_href: str = ""  # a relative link to the vector version


def table_from_frame(id: str, title: str, frame, columns: Sequence[Column], description: str = "") -> Table:
    """Rows of a DataFrame as JSON-safe lists (NaN -> null) in the order of ``columns`` (and their link keys)."""
    keys = [c.key for c in columns] + [c.link for c in columns if c.link]
    rows = []
    for values in frame.reindex(columns=keys).itertuples(index=False):
        rows.append([_json_value(v) for v in values])
    return Table(id=id, title=title, description=description, columns=list(columns), rows=rows)


def _json_value(v):
    if v is None:
        return None
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if hasattr(v, "item"):  # numpy scalars
        return _json_value(v.item())
    return v


def render_page(title: str, subtitle: str, tables: List[Table], figures: List[Figure], notes: List[str]) -> str:
    data = json.dumps({"tables": [t.model_dump(mode="json") for t in tables]}, separators=(",", ":"),
                      allow_nan=False).replace("</", "<\\/")
    sections = [f'<section id="sec-{t.id}"><h2>{html.escape(t.title)}</h2>'
                + (f'<p class="desc">{html.escape(t.description)}</p>' if t.description else "")
                + f'<div class="table" data-table="{html.escape(t.id)}"></div></section>' for t in tables]
    figs = []
    for f in figures:
        b64 = base64.b64encode(Path(f.png).read_bytes()).decode()
        svg = f' (<a href="{html.escape(f.svg_href)}">SVG</a>)' if f.svg_href else ""
        figs.append(f'<figure><img alt="{html.escape(f.caption)}" src="data:image/png;base64,{b64}">'
                    f"<figcaption>{html.escape(f.caption)}{svg}</figcaption></figure>")
    if figures:
        sections.append(f'<section id="figures"><h2>Figures</h2>{"".join(figs)}</section>')
    if notes:
        sections.append("<section><h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                        + "</ul></section>")
    nav = " · ".join(f'<a href="#sec-{t.id}">{html.escape(t.title)}</a>' for t in tables)
    nav += ' · <a href="#figures">Figures</a>' if figures else ""
    values = {"TITLE": html.escape(title), "SUBTITLE": html.escape(subtitle), "NAV": nav,
              "SECTIONS": "".join(sections), "DATA": data}
    # one pass, so nothing substituted is read as a placeholder again
    return re.sub(r"__([A-Z]+)__", lambda m: values[m.group(1)], TEMPLATE.read_text(encoding="utf-8"))
