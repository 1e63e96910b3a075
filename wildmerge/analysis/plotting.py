"""What every figure of the analysis shares: matplotlib without a display (Agg, SVG text kept as text), the line
styles that stay apart in grey scale, and PNG + SVG files written whole or not at all.

The report's figures (``report/``), the pool diagnostics (``pool/``), the task alignment score checks (``tas/``) and
the mergeability predictor (``mergeability/``) all draw through it.
"""

import os
from pathlib import Path
from typing import Dict

MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p"]
LINESTYLES = ["-", "--", "-.", ":"]
HATCHES = ["", "//", "..", "xx", "\\\\", "--", "++", "oo"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed), with SVG text kept as text."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, selectable, smaller
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path_stem: Path) -> Dict[str, Path]:
    """PNG and SVG, each written to a temporary sibling then renamed (never half a file); closes ``fig``."""
    out = {}
    for ext in ("png", "svg"):
        final = path_stem.with_suffix(f".{ext}")
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        os.replace(tmp, final)
        out[ext] = final
    pyplot().close(fig)
    return out


def style(i: int) -> dict:
    """Line style i: colour, marker and dash pattern all change, so curves stay apart in grey scale."""
    return {"color": pyplot().get_cmap("tab10")(i % 10), "marker": MARKERS[i % len(MARKERS)],
            "ls": LINESTYLES[(i // 2) % len(LINESTYLES)]}
