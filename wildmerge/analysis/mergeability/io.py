"""metrics.csv (pair x metric), its JSON sidecar and category_cost.csv (seconds per category of metric, the
paper's Table 10); reading them back for the predictor."""

import json
from pathlib import Path
from typing import List, Tuple

from wildmerge.errors import WildmergeError


def write_metrics(df, side: dict, out_dir) -> List[Path]:
    from wildmerge.atomic import write_json, write_text

    out = Path(out_dir)
    written = [write_text(out / "metrics.csv", df.to_csv(index=False, float_format="%.10g")),
               write_json(out / "metrics.json", side)]
    if side.get("category_cost"):  # the paper's Table 10: seconds per category of metric and what it reads
        import pandas as pd

        written.append(write_text(out / "category_cost.csv", pd.DataFrame(side["category_cost"]).to_csv(index=False)))
    return written


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
