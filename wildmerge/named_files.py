"""Named YAML files: a shipped name (``merge_recipes/<kind>/<name>.yml``) or the path of a file.

Methods, pools and suites are looked up the same way, so a typo gets the same did-you-mean and list of valid
names everywhere, and a broken file the same one-line message naming it.
"""

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.paths import recipes_dir


def list_names(kind: str) -> List[str]:
    """The shipped names of one kind (``methods``, ``pools``, ``suites``)."""
    return sorted(p.stem for p in (recipes_dir() / kind).glob("*.yml"))


def _looks_like_a_path(text: str) -> bool:
    return Path(text).suffix in (".yml", ".yaml") or "/" in text or os.sep in text


def find_named_file(kind: str, name_or_path, what: str, aliases: Optional[Dict[str, str]] = None) -> Path:
    """The file of a shipped name (or of an old name in ``aliases``), else of a path.

    A bare word is a shipped name first and a file in the working folder second; ``what`` (``method``, ``pool``,
    ``suite``) names the thing in errors."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not _looks_like_a_path(text):
        shipped = recipes_dir() / kind / f"{(aliases or {}).get(text, text)}.yml"
        if shipped.is_file():
            return shipped
        if not path.is_file():
            valid = list_names(kind)
            raise ConfigError(f"unknown {what} {text!r}{did_you_mean(text, valid)}; valid {what}s: "
                              f"{', '.join(valid) or 'none'}; or give the path of a {what} YAML file")
    if not path.is_file():
        raise ConfigError(f"{what} file {str(path)!r} does not exist; give a path or a shipped {what} name "
                          f"({', '.join(list_names(kind))})")
    return path


def read_yaml(path, what: str) -> Any:
    """The parsed file; broken YAML (or not text) is one line naming the file and the place."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} file {path} is not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} file {path} is not a UTF-8 text file") from None
