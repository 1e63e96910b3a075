"""metrics.csv (pair x metric) and its JSON sidecar; reading them back for the predictor."""

import json
from pathlib import Path
from typing import List, Tuple

from wildmerge.errors import WildmergeError


def write_metrics(df, side: dict, out_dir) -> List[Path]:
    from wildmerge.atomic import write_json, write_text

    out = Path(out_dir)
    return [write_text(out / "metrics.csv", df.to_csv(index=False, float_format="%.10g")),
            write_json(out / "metrics.json", side)]


def read_metrics(path) -> Tuple["object", dict]:
    """(DataFrame, sidecar) from a metrics folder or its metrics.csv."""
    import pandas as pd

    p = Path(path)
    csv = p / "metrics.csv" if p.is_dir() else p
    if not csv.is_file():
        raise WildmergeError(f"{csv} not found; compute it with `wildmerge analyze mergeability --pool NAME`")
    side_path = csv.with_name("metrics.json")
    side = json.loads(side_path.read_text()) if side_path.is_file() else {}
    return pd.read_csv(csv), side
