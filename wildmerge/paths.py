"""Where the shipped configuration data (``merge_recipes/``) lives, in a checkout or an installed wheel."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def recipes_dir() -> Path:
    """``merge_recipes/``: next to the package in a checkout (editable install), inside it in a wheel."""
    for candidate in (_PACKAGE.parent / "merge_recipes", _PACKAGE / "merge_recipes"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("wildmerge's merge_recipes/ folder is missing: reinstall the package")

