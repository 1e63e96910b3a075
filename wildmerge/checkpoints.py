"""Which weight files of a checkpoint folder may be read.

Checkpoints from the wild are untrusted input: safetensors only. A folder that ships only pickle files (``.bin``,
``.pt``, ``.pth``: loading them can run arbitrary code) is refused unless the user explicitly allows pickles.
"""

from pathlib import Path
from typing import List

from wildmerge.errors import WildmergeError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


def weight_files(path, allow_pickle: bool = False) -> List[Path]:
    """The folder's ``*.safetensors`` files, else (only with ``allow_pickle``) its pickle files; else an error."""
    folder = Path(path)
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    pickled = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES) if folder.is_dir() else []
    if pickled and allow_pickle:
        return pickled
    if pickled:
        raise WildmergeError(
            f"{folder} ships only pickle weights ({', '.join(p.name for p in pickled[:3])}); pickles from the wild "
            "can run code when loaded. Convert them to safetensors, or pass --allow-pickle (mergekit: --lazy-unpickle)"
            " if you trust this checkpoint"
        )
    raise WildmergeError(f"{folder}: no *.safetensors weights found; is this a model folder?")
