"""Recipe checks, run before mergekit loads a single tensor.

mergekit 0.1.5 silently ignores a parameter name its method does not know (``lamda: 0.5`` merges with the
default lambda) and checks no ranges. For our methods we refuse both, naming the key, where it sits in the recipe
and the valid choices. For mergekit's own methods the same findings are only warnings unless the caller asks for
strictness (``wildmerge merge --strict``): people keep one recipe and switch its method, and mergekit ignores what
a method does not use, so a recipe that merges without wildmerge must merge with it.
"""

import difflib
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS


def _settings(config) -> Iterator[Tuple[str, Optional[Dict[str, Any]]]]:
    """(where, parameters dict) for every place a recipe can set parameters."""
    yield "parameters", config.parameters
    for i, model in enumerate(config.models or []):
        yield f"models[{i}] ({model.model}).parameters", model.parameters
    for i, s in enumerate(config.slices or []):
        yield f"slices[{i}].parameters", s.parameters
        for j, src in enumerate(s.sources):
            yield f"slices[{i}].sources[{j}] ({src.model}).parameters", src.parameters
    for name, module in (config.modules or {}).items():
        yield f"modules.{name}.parameters", module.parameters
        for i, model in enumerate(module.models or []):
            yield f"modules.{name}.models[{i}] ({model.model}).parameters", model.parameters
        for i, s in enumerate(module.slices or []):
            yield f"modules.{name}.slices[{i}].parameters", s.parameters
            for j, src in enumerate(s.sources):
                yield f"modules.{name}.slices[{i}].sources[{j}] ({src.model}).parameters", src.parameters


def _numbers(value: Any) -> Iterator[Any]:
    """The plain values inside a mergekit ParameterSetting (scalar, gradient list, or conditional list)."""
    if isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, dict):
        yield from _numbers(value.get("value"))
    elif hasattr(value, "value"):  # ConditionalParameter
        yield from _numbers(value.value)
    else:
        yield value


def warn(message: str) -> None:
    """One line on stderr (mergekit-yaml's own output goes to the log; ours must be seen)."""
    print(f"wildmerge: warning: {message}", file=sys.stderr)


def is_ours(name: str) -> bool:
    """True for a merge method wildmerge provides (per-tensor or layer-wise), not one of mergekit's."""
    return name in LAYERWISE_METHODS or name in _our_names()


def recipe_problems(config) -> List[str]:
    """Unknown parameters and values outside their declared range, one message each (an unknown method raises).

    Our methods declare their parameters as a pydantic model (``method.params``): every value is checked against
    it. mergekit's own methods are checked for names, and for ``density`` against our declaration of mergekit's
    Task Arithmetic / TIES parameters.
    """
    from mergekit.merge_methods import registered_methods

    from wildmerge.plugins.methods import TaskArithmeticParams

    methods = {m.spec.name: m for m in registered_methods()}
    name = config.merge_method
    if name not in methods:
        valid = sorted(set(methods) | set(LAYERWISE_METHODS))
        raise ConfigError(f"unknown merge_method {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")
    valid_keys = [p.name for p in methods[name].spec.parameters]
    declared = getattr(methods[name], "params", None)
    problems = []
    for where, params in _settings(config):
        for key, value in (params or {}).items():
            if key not in valid_keys:
                problems.append(f"{where}: unknown parameter {key!r} for merge_method {name!r}"
                                f"{did_you_mean(key, valid_keys)}; valid parameters: {', '.join(valid_keys)}")
                continue
            model = declared if declared is not None else (TaskArithmeticParams if key == "density" else None)
            if model is not None:
                for number in _numbers(value):
                    try:
                        model.check_value(name, key, number)
                    except ConfigError as exc:
                        problems.append(str(exc))
    return problems


def validate_merge_config(config, strict: bool = True) -> None:
    """Raise ConfigError on the first problem of ``recipe_problems``; with ``strict=False`` (mergekit's own
    methods through the stock entry points) print each as a warning instead, and let mergekit decide.

    An unknown merge_method is an error when strict or when its closest name is one of ours (mergekit would stop
    on it anyway); otherwise mergekit raises its own error after our did-you-mean warning."""
    try:
        problems = recipe_problems(config)
    except ConfigError as exc:
        close = difflib.get_close_matches(config.merge_method, list(LAYERWISE_METHODS) + _our_names(), n=1)
        if strict or close:
            raise
        warn(str(exc))
        return
    if problems and strict:
        raise ConfigError(problems[0])
    for problem in problems:
        warn(problem + " (mergekit ignores it)")


def _our_names() -> List[str]:
    from mergekit.merge_methods import registered_methods

    return [m.spec.name for m in registered_methods() if getattr(m, "__wildmerge__", False)]


# Keys a recipe may carry beyond mergekit's own: the layer-wise methods' calibration data.
_EXTRA_KEYS = ("calibration",)


def validate_recipe_source(source: str, strict: bool = True) -> None:
    """Unknown top-level or per-model keys in the YAML text (pydantic would drop ``base_modle:`` silently);
    warnings instead of errors with ``strict=False``."""
    import yaml
    from mergekit.config import InputModelDefinition, MergeConfiguration

    try:
        data = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        if not strict:  # the Python API passes any text along as the model card's recipe: not ours to judge
            return
        raise ConfigError(f"the recipe is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        if not strict:
            return
        raise ConfigError("the recipe must be a YAML mapping with merge_method, base_model and models")
    problems = _unknown_keys("recipe", data, [*MergeConfiguration.model_fields, *_EXTRA_KEYS])
    for i, model in enumerate(data.get("models") or []):
        if isinstance(model, dict):
            problems += _unknown_keys(f"models[{i}]", model, [*InputModelDefinition.model_fields, *_EXTRA_KEYS])
    if problems and strict:
        raise ConfigError(problems[0])
    for problem in problems:
        warn(problem + " (mergekit ignores it)")


def _unknown_keys(where: str, data: dict, valid) -> List[str]:
    return [f"{where}: unknown key {key!r}{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}"
            for key in data if key not in valid]
