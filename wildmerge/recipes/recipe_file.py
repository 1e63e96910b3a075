"""A mergekit recipe file checked for structure before mergekit sees it, so every broken recipe gets one line.

mergekit answers a YAML syntax error, a recipe that is a list, ``models: []``, an expert listed twice or a local
path that does not exist with a traceback from deep inside pydantic, PyYAML or huggingface_hub ("Repo id must be
in the form ...").
"""

from pathlib import Path

from wildmerge.errors import ConfigError


def _first_error(exc) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "recipe"
        return f"{where}: {first['msg'].removeprefix('Value error, ')}"
    return str(exc).splitlines()[0]


def check_recipe_file(path) -> dict:
    """The recipe as a dict, or a ConfigError that names the file, what is wrong and how to fix it."""
    import yaml
    from mergekit.config import MergeConfiguration
    from pydantic import ValidationError

    from wildmerge.hub import Unresolvable, classify, family_ref_in_recipe

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {str(path)!r} not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"recipe {path} is not valid YAML{where} ({getattr(exc, 'problem', exc)}); fix the "
                          f"syntax (check brackets, quotes and indentation)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"recipe {path} is not a UTF-8 text file; give a mergekit YAML recipe") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"recipe {path} must be a YAML mapping with merge_method, base_model and models, not a "
                          f"{type(raw).__name__}")
    for key in ("models", "slices"):
        if key in raw and not raw[key]:
            raise ConfigError(f"recipe {path}: '{key}:' is empty; list the models to merge under it")
    try:
        config = MergeConfiguration.model_validate(raw)
    except (ValidationError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"recipe {path} is not a valid mergekit recipe ({_first_error(exc)})") from None
    _check_dtypes(path, raw)
    seen = {}
    for i, m in enumerate(config.models or []):
        key = str(m.model)
        if key in seen:
            raise ConfigError(f"recipe {path}: models[{i}] repeats models[{seen[key]}] ({key}); list each model once")
        seen[key] = i
    for ref in config.referenced_models():
        try:
            if classify(str(ref.model.path))[0] == "demo":
                raise ConfigError(f"recipe {path}: {family_ref_in_recipe(str(ref.model.path))}")
        except Unresolvable as exc:
            raise ConfigError(f"recipe {path}: model {exc}; fix the path (relative paths are read from "
                              f"{Path.cwd()}) or give a hub id org/name") from None
        folder = Path(str(ref.model.path))
        if ref.lora is None and (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
            raise ConfigError(f"recipe {path}: {folder} is a LoRA adapter, not a full checkpoint; mergekit merges full "
                              f"weights: list the adapter as an expert of a pool (`wildmerge sample --base POOL`), which "
                              f"folds it into the pool's base, or write it as BASE+ADAPTER in the recipe")
    return raw


def _check_dtypes(path, raw: dict) -> None:
    """``dtype: float33`` is one line naming the value and the valid ones, not mergekit's traceback mid-merge."""
    from mergekit.common import dtype_from_name

    from wildmerge.errors import did_you_mean

    valid = ["float32", "float16", "bfloat16", "float64"]
    for key in ("dtype", "out_dtype"):
        value = raw.get(key)
        if value is None:
            continue
        try:
            dtype_from_name(str(value))
        except RuntimeError:
            raise ConfigError(f"recipe {path}: {key}: {value!r} is not a dtype mergekit knows{did_you_mean(str(value), valid)}"
                              f"; use one of {', '.join(valid)}") from None
