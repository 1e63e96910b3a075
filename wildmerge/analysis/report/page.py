"""The report as one self-contained HTML page (``RUN/report/index.html``): opens from disk, no server, no network.

The page is a generic renderer: the report hands it tables (columns + rows, embedded once as JSON) and figures
(PNG files, embedded as base64). A few lines of inline JavaScript make every table sortable (click a header) and
filterable (a text box matching any cell, plus a drop-down per categorical column). Rows are rendered as one HTML
string per table, so a run of hundreds of models stays fast.
"""

import base64
import html
import json
import math
from pathlib import Path
from typing import List, Optional, Sequence

from pydantic import BaseModel, Field

from wildmerge.atomic import write_text


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
    nav = " · ".join(f'<a href="#sec-{t.id}">{html.escape(t.title)}</a>' for t in tables)
    nav += ' · <a href="#figures">Figures</a>' if figures else ""
    note_html = ("<section><h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                 + "</ul></section>") if notes else ""
    return (_HEAD.replace("__TITLE__", html.escape(title)) + f"<h1>{html.escape(title)}</h1>"
            f'<p class="desc">{html.escape(subtitle)}</p><nav>{nav}</nav>' + "".join(sections)
            + (f'<section id="figures"><h2>Figures</h2>{"".join(figs)}</section>' if figures else "") + note_html
            + f'<script id="data" type="application/json">{data}</script><script>{_SCRIPT}</script></body></html>\n')


def write_page(path, title: str, subtitle: str, tables: List[Table], figures: List[Figure],
               notes: Optional[List[str]] = None) -> Path:
    return write_text(path, render_page(title, subtitle, tables, figures, notes or []))


_HEAD = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>__TITLE__</title><style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#111}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
.desc{color:#444;max-width:70em}nav{margin:.5em 0 1em}
.controls{margin:.4em 0;display:flex;gap:.6em;flex-wrap:wrap;align-items:center}
.controls input{padding:.25em .4em;min-width:16em}.count{color:#555}
.scroll{max-height:36em;overflow:auto;border:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{padding:.2em .5em;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
th{position:sticky;top:0;background:#f4f4f4;cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td.long{max-width:28em;overflow:hidden;text-overflow:ellipsis}
tr:hover td{background:#f7f7ff}
figure{display:inline-block;margin:.5em;vertical-align:top;max-width:100%}
figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:12px;color:#333}
</style></head><body>"""

_SCRIPT = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  function esc(v) {
    return String(v).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function show(v, col) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number" && col.digits !== null && col.digits !== undefined) return v.toFixed(col.digits);
    return String(v);
  }
  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined || a === "") return 1;
    if (b === null || b === undefined || b === "") return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  }
  function build(table, host) {
    var cols = table.columns, rows = table.rows;
    var keyIndex = {};
    cols.forEach(function (c, i) { keyIndex[c.key] = i; });
    var linkIndex = cols.map(function (c) {
      return c.link ? cols.length + cols.filter(function (d) { return d.link; }).indexOf(c) : -1;
    });
    var haystack = rows.map(function (r) {
      return cols.map(function (c, i) { return show(r[i], c); }).join(" \u0001 ").toLowerCase();
    });
    var state = {sort: -1, dir: 1, text: "", selects: {}};
    var controls = document.createElement("div");
    controls.className = "controls";
    var search = document.createElement("input");
    search.type = "search"; search.placeholder = "filter rows (any column)"; search.className = "filter";
    search.addEventListener("input", function () { state.text = search.value.toLowerCase(); render(); });
    controls.appendChild(search);
    cols.forEach(function (c, i) {
      if (!c.filter) return;
      var values = [];
      rows.forEach(function (r) { var v = show(r[i], c); if (values.indexOf(v) < 0) values.push(v); });
      values.sort(function (a, b) { return compare(a, b); });
      var sel = document.createElement("select");
      sel.setAttribute("data-column", c.key);
      sel.innerHTML = '<option value="">' + esc(c.label || c.key) + ": all</option>" +
        values.map(function (v) { return '<option value="' + esc(v) + '">' + esc(v) + "</option>"; }).join("");
      sel.addEventListener("change", function () { state.selects[i] = sel.value; render(); });
      controls.appendChild(sel);
    });
    var count = document.createElement("span");
    count.className = "count";
    controls.appendChild(count);
    var scroll = document.createElement("div");
    scroll.className = "scroll";
    var el = document.createElement("table");
    var head = "<thead><tr>" + cols.map(function (c, i) {
      return '<th data-col="' + i + '" aria-sort="none">' + esc(c.label || c.key) + "</th>";
    }).join("") + "</tr></thead>";
    el.innerHTML = head + "<tbody></tbody>";
    var ths = el.querySelectorAll("th");
    ths.forEach(function (th) {
      th.addEventListener("click", function () {
        var i = Number(th.getAttribute("data-col"));
        state.dir = state.sort === i ? -state.dir : 1;
        state.sort = i;
        ths.forEach(function (t) { t.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
        render();
      });
    });
    scroll.appendChild(el);
    host.appendChild(controls);
    host.appendChild(scroll);
    var tbody = el.querySelector("tbody");
    function render() {
      var order = [];
      for (var r = 0; r < rows.length; r++) {
        if (state.text && haystack[r].indexOf(state.text) < 0) continue;
        var keep = true;
        for (var k in state.selects) {
          if (state.selects[k] && show(rows[r][k], cols[k]) !== state.selects[k]) { keep = false; break; }
        }
        if (keep) order.push(r);
      }
      if (state.sort >= 0) {
        var s = state.sort, d = state.dir;
        order.sort(function (a, b) {
          var va = rows[a][s], vb = rows[b][s];
          var empty = function (v) { return v === null || v === undefined || v === ""; };
          if (empty(va) || empty(vb)) return compare(va, vb);  // empty cells last in both directions
          return d * compare(va, vb) || a - b;
        });
      }
      var out = [];
      order.forEach(function (r) {
        var row = rows[r];
        out.push("<tr>" + cols.map(function (c, i) {
          var text = esc(show(row[i], c));
          var cls = typeof row[i] === "number" ? ' class="num"' : (text.length > 40 ? ' class="long" title="' + text + '"' : "");
          if (linkIndex[i] >= 0 && row[linkIndex[i]]) text = '<a href="' + esc(row[linkIndex[i]]) + '">' + text + "</a>";
          return "<td" + cls + ">" + text + "</td>";
        }).join("") + "</tr>");
      });
      tbody.innerHTML = out.join("");
      count.textContent = order.length + " of " + rows.length + " rows";
      host.setAttribute("data-shown", String(order.length));
    }
    render();
  }
  DATA.tables.forEach(function (t) {
    var host = document.querySelector('[data-table="' + t.id + '"]');
    if (host) build(t, host);
  });
  document.body.setAttribute("data-ready", "1");
})();
"""
