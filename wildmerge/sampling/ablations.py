"""The hyperparameter sweeps of the in-the-wild paper's Appendix C, as data. Each merges the full pool (n = N).

The paper plots these sweeps without listing every grid point; the values below are ours where it is silent
(TA: lambda 0.1 to 1.9 in steps of 0.2 plus 10, Fig. 11/12; SB: beta in [0, 1], Fig. 18; TIES: Figs. 13-17).
A user grid file (``--grid my_grid.yml``) has the same shape: ``{name: {method, grid: {param: [values]}}}``.
"""

import itertools
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.named_files import read_yaml

LAMBDAS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9, 10.0]


class Grid(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str
    grid: dict[str, list[float | int | bool | str]]
    description: str = ""

    def points(self) -> list[dict]:
        keys = list(self.grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]


ABLATIONS = {
    "ta_lambda": Grid(method="ta", grid={"lambda": LAMBDAS}, description="C.1 / Fig. 11: TA lambda, normalized"),
    "ta_lambda_nonorm": Grid(method="ta", grid={"lambda": LAMBDAS, "normalize": [False]},
                             description="C.1 / Fig. 12: TA lambda without normalization (a sum of task vectors)"),
    "ties_grid": Grid(method="ties", grid={"density": [0.1, 0.3, 0.5, 0.7, 0.9], "lambda": [0.1, 0.5, 1.0, 1.5, 1.9]},
                      description="C.2 / Figs. 13-16: TIES density x lambda (accuracy vs task-vector norm)"),
    "ties_density": Grid(method="ties", grid={"density": [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]},
                         description="C.3 / Fig. 17: TIES density at lambda 0.1"),
    "sb_beta": Grid(method="ta_sb", grid={"beta": [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0]},
                    description="C.4 / Fig. 18: Subspace Boosting threshold beta (on TA)"),
}


def load_grids(names=(), path=None) -> dict[str, Grid]:
    """Named ablations (``all`` = every one) plus the grids of a user YAML file."""
    out = {}
    for name in names:
        if name == "all":
            out.update(ABLATIONS)
        elif name in ABLATIONS:
            out[name] = ABLATIONS[name]
        else:
            raise ConfigError(f"unknown ablation {name!r}{did_you_mean(name, ABLATIONS)}; "
                              f"valid: all, {', '.join(ABLATIONS)}")
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"grid file {path} does not exist")
        data = read_yaml(path, "grid")
        try:
            out.update({k: Grid.model_validate(v) for k, v in (data or {}).items()})
        except (ValidationError, AttributeError) as exc:
            raise ConfigError(f"grid file {path} is invalid (expected {{name: {{method, grid: {{param: [values]}}}}}}, "
                              f"valid keys per grid: {', '.join(Grid.model_fields)}): {exc}") from None
    return out
