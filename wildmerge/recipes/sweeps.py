"""Sweeps: a method's hyperparameter points, each merged on the full pool (n = N). The papers' sweeps, as data.

- The in-the-wild paper's Appendix C (``all`` runs these): the paper plots these sweeps without listing every grid
  point; the values below are ours where it is silent (TA: lambda 0.1 to 1.9 in steps of 0.2 plus 10, Fig. 11/12;
  SB: beta in [0, 1], Fig. 18; TIES: Figs. 13-17).
- Chain of Merges (Buzzega et al. 2025): ``com_components`` is its Table 3 (RegMean, then CoM with the chain only
  (MCS), + Norm, + Sim); ``com_samples`` its Table 4 (calibration samples per task, 2 to 500). They need each
  expert's calibration data, so ``all`` leaves them out.

A user sweep file (``--grid my_sweeps.yml``) has the same shape: ``{name: {method, grid: {param: [values]}}}``,
plus optionally ``cases: [{param: value, ...}]`` (explicit points, each combined with every grid point). A preset
made of several sweeps names them ``<preset>:<part>``; the report's sweep tables put the parts of a preset in one
table. (``ablations`` in a plan entry and ``--ablation`` on the command line are older names of the same thing.)
"""

import itertools
from pathlib import Path

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.named_files import read_yaml
from wildmerge.recipes.method import MethodRecipe, check_finite, load_method_recipe

LAMBDAS = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9, 10.0]


class Sweep(BaseModel):
    """A method (a recipe name or path) and its points: every combination of ``grid``, each with every case."""

    model_config = ConfigDict(extra="forbid")
    method: str
    grid: dict[str, list[float | int | bool | str]] = {}
    cases: list[dict[str, float | int | bool | str]] = []
    description: str = ""
    _recipe: MethodRecipe | None = PrivateAttr(None)

    @property
    def recipe(self) -> MethodRecipe:
        """The method's recipe, loaded once (``load_sweeps`` loads it, so an unknown method fails there)."""
        if self._recipe is None:
            self._recipe = load_method_recipe(self.method)
        return self._recipe

    def points(self) -> list[dict]:
        """Every grid combination, each combined with every case (no cases: the combinations alone)."""
        keys = list(self.grid)
        combos = [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]
        return [{**p, **c} for p in combos for c in self.cases] if self.cases else combos


SWEEPS = {
    "ta_lambda": Sweep(method="ta", grid={"lambda": LAMBDAS}, description="C.1 / Fig. 11: TA lambda, normalized"),
    "ta_lambda_nonorm": Sweep(method="ta", grid={"lambda": LAMBDAS, "normalize": [False]},
                             description="C.1 / Fig. 12: TA lambda without normalization (a sum of task vectors)"),
    "ties_grid": Sweep(method="ties", grid={"density": [0.1, 0.3, 0.5, 0.7, 0.9], "lambda": [0.1, 0.5, 1.0, 1.5, 1.9]},
                      description="C.2 / Figs. 13-16: TIES density x lambda (accuracy vs task-vector norm)"),
    "ties_density": Sweep(method="ties", grid={"density": [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]},
                         description="C.3 / Fig. 17: TIES density at lambda 0.1"),
    "sb_beta": Sweep(method="ta_sb", grid={"beta": [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0]},
                    description="C.4 / Fig. 18: Subspace Boosting threshold beta (on TA)"),
}
APPENDIX_C = tuple(SWEEPS)  # what ``all`` runs

# Chain of Merges, Table 3: MCS (the chain) is CoM against RegMean; Norm and Sim are CoM's switches (cumulative rows)
SWEEPS["com_components:regmean"] = Sweep(
    method="regmean", description="Chain of Merges Table 3, row 1: RegMean (no MCS, no Norm, no Sim)")
SWEEPS["com_components"] = Sweep(
    method="com", cases=[{"norm": "none", "sim": False}, {"norm": "token", "sim": False},
                         {"norm": "token", "sim": True}],
    description="Chain of Merges Table 3, rows 2-4: the chain (MCS), + Norm, + Sim")
SWEEPS["com_samples"] = Sweep(
    method="com", grid={"n_samples": [2, 5, 10, 50, 100, 200, 300, 400, 500]},
    description="Chain of Merges Table 4: calibration samples per task (CoM full)")


def preset_of(name: str) -> str:
    """The preset a sweep belongs to: ``com_components:regmean`` -> ``com_components``."""
    return name.split(":", 1)[0]


def _loaded(name: str, sweep: Sweep) -> Sweep:
    """A copy of ``sweep`` with its method's recipe read now (the presets are shared) and every point's values
    checked against the ranges its method declares, before anything is merged."""
    out = sweep.model_copy()
    out._recipe = load_method_recipe(sweep.method)
    _check_ranges(name, out)
    return out


def _declared_params(merge_method: str):
    """The parameter model that declares ``merge_method``'s ranges (``plugins/method_params.py``): our methods' own;
    for mergekit's methods our declaration of its Task Arithmetic / TIES ``density`` (as recipes are checked)."""
    from mergekit.merge_methods import registered_methods

    from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS
    from wildmerge.plugins.methods import TaskArithmeticParams

    if merge_method in LAYERWISE_METHODS:
        return LAYERWISE_METHODS[merge_method].params, None
    method = {m.spec.name: m for m in registered_methods()}.get(merge_method)
    declared = getattr(method, "params", None)
    return (declared, None) if declared is not None else (TaskArithmeticParams, {"density"})


def _check_ranges(name: str, sweep: Sweep) -> None:
    for point in sweep.points():  # NaN / inf refused for every parameter, declared or not (mergekit's TA lambda)
        check_finite(sweep.recipe.name, point, f"sweep {name!r}")
    merge_method = sweep.recipe.recipe.get("merge_method")
    if not merge_method or not (sweep.grid or sweep.cases):
        return
    params, only = _declared_params(merge_method)
    fields = params.fields_by_name()
    for point in sweep.points():
        for key, value in point.items():
            if key in fields and (only is None or key in only):
                try:
                    params.check_value(sweep.recipe.name, key, value)
                except ConfigError as exc:
                    raise ConfigError(f"sweep {name!r}: {exc}") from None


def load_sweeps(names=(), path=None) -> dict[str, Sweep]:
    """Named sweeps (``all`` = the in-the-wild paper's Appendix C) plus the sweeps of a user YAML file, each with
    its method's recipe loaded (once per run: the plan, the pre-flight and the dry run read it from the sweep)."""
    out = {}
    presets = list(dict.fromkeys(preset_of(k) for k in SWEEPS))
    for name in names:
        if name == "all":
            out.update({k: SWEEPS[k] for k in APPENDIX_C})
        elif name in presets:
            out.update({k: s for k, s in SWEEPS.items() if preset_of(k) == name})
        else:
            raise ConfigError(f"unknown sweep {name!r}{did_you_mean(name, presets)}; "
                              f"valid: all, {', '.join(presets)}")
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"grid file {path} does not exist")
        data = read_yaml(path, "grid")
        try:
            out.update({k: Sweep.model_validate(v) for k, v in (data or {}).items()})
        except (ValidationError, AttributeError) as exc:
            raise ConfigError(f"grid file {path} is invalid (expected {{name: {{method, grid: {{param: [values]}}}}}}, "
                              f"valid keys per sweep: {', '.join(Sweep.model_fields)}): {exc}") from None
    return {k: _loaded(k, sweep) for k, sweep in out.items()}
