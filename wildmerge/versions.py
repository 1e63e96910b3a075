"""Which package versions are installed, against the lock (``constraints.txt``) that the published numbers were made
with. One place for the question, so a report and a family's build name the same differences the same way.

Torch-free and cheap: package metadata only (``importlib.metadata``), nothing is imported.
"""

import importlib.metadata
import platform
import re
from pathlib import Path
from typing import Dict, Optional

LOCK_NAME = "constraints.txt"
KEY_PACKAGES = ("torch", "transformers", "lm-eval", "mergekit")  # named in a report's one-line summary
_PACKAGE = Path(__file__).resolve().parent


def lock_file() -> Optional[Path]:
    """The lock: beside the package in a checkout (editable install), inside it in a wheel; None when neither."""
    for candidate in (_PACKAGE.parent / LOCK_NAME, _PACKAGE / LOCK_NAME):
        if candidate.is_file():
            return candidate
    return None


def normalize(name: str) -> str:
    """A distribution name as the package index compares them (``lm_eval``, ``LM-Eval`` -> ``lm-eval``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> Dict[str, str]:
    """Package -> pinned version of a constraints text (``name==version`` lines, ``#`` comments); anything else is an
    error, since a loose line would pass for a pin."""
    pins = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s=;]+)", line)
        if not match:
            raise ValueError(f"line {number} of the lock is not `name==version`: {raw!r}")
        pins[normalize(match.group(1))] = match.group(2)
    return pins


def installed() -> Dict[str, str]:
    """Package -> version of every distribution this Python sees (the first one where a name is installed twice)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def matches(version: Optional[str], pinned: str) -> bool:
    """``version`` satisfies ``==pinned``; a pin without a build tag accepts any (``2.13.0`` takes ``2.13.0+cpu``)."""
    if version is None:
        return False
    return version == pinned or ("+" not in pinned and version.split("+")[0] == pinned)


def differences(lock: Dict[str, str], have: Dict[str, str]) -> Dict[str, Dict[str, Optional[str]]]:
    """The locked packages whose installed version differs (None: not installed): name -> installed and lock."""
    return {name: {"installed": have.get(name), "lock": pinned} for name, pinned in sorted(lock.items())
            if not matches(have.get(name), pinned)}


def record(lock_text: Optional[str] = None) -> dict:
    """What this process runs with: the installed version of every locked package (and of the key ones), those that
    differ from the lock, Python and the machine. ``lock_text`` stands in for the lock file (None: the shipped one)."""
    path = None
    if lock_text is None:
        path = lock_file()
        lock_text = path.read_text() if path else ""
    lock, have = read_lock(lock_text), installed()
    return {"lock": str(path) if path else None, "locked": len(lock),
            "python": platform.python_version(), "machine": platform.machine(), "platform": platform.platform(),
            "packages": {name: have.get(name) for name in sorted({*lock, *KEY_PACKAGES})},
            "differ": differences(lock, have)}


def describe(env: dict) -> str:
    """One sentence: the key packages' versions and whether every locked one is at its pin (which are not)."""
    versions = ", ".join(f"{name} {env['packages'].get(name) or 'absent'}" for name in KEY_PACKAGES)
    where = f"Python {env['python']}, {env['machine']}"
    if not env["locked"]:
        return f"{versions} ({where}); no lock file ({LOCK_NAME}) to compare with"
    if not env["differ"]:
        return f"{versions} ({where}); all {env['locked']} locked packages at their {LOCK_NAME} versions"
    return (f"{versions} ({where}); {len(env['differ'])} of {env['locked']} differ from {LOCK_NAME}: "
            f"{listed(env['differ'])}")


def listed(differ: Dict[str, dict]) -> str:
    """``differences`` as text: ``torch 2.14.0 (lock 2.13.0), gguf absent (lock 0.19.0)``."""
    return ", ".join(f"{name} {d['installed'] or 'absent'} (lock {d['lock']})" for name, d in differ.items())
