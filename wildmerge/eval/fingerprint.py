"""Which model a job scores: check it is a loadable checkpoint, fingerprint its content.

The fingerprint is a **streaming SHA-256 of every file that changes what lm-eval measures**: the weight files
(``*.safetensors``, byte for byte), ``config.json`` and ``generation_config.json`` (without the volatile
``_name_or_path`` / ``transformers_version`` keys) and the tokenizer files. Hashing headers and sizes alone would be
faster but wrong: two merges of the same architecture have identical headers. Hashes are cached per file by
(path, size, mtime), so a rerun does not read the weights again.
"""

import hashlib
import json
from pathlib import Path
from typing import Dict, Optional

from wildmerge.atomic import write_json
from wildmerge.checkpoints import weight_files
from wildmerge.errors import WildmergeError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja")
VOLATILE_CONFIG_KEYS = ("_name_or_path", "transformers_version")
CHUNK = 16 << 20


def check_model_dir(path, allow_pickle: bool = False) -> None:
    """Raise a WildmergeError unless ``path`` looks like a Hugging Face causal LM folder lm-eval can load."""
    path = Path(path)
    if not path.is_dir():
        raise WildmergeError(f"model folder {str(path)!r} does not exist (was its merge finished?)")
    from wildmerge.eval.composition import is_composition, read_spec

    if is_composition(path):  # ensemble / composer: its experts must be loadable models
        for member in read_spec(path).experts.values():
            check_model_dir(member, allow_pickle)
        return
    if not (path / "config.json").is_file():
        raise WildmergeError(f"{path} is not a model folder: config.json is missing")
    weight_files(path, allow_pickle)  # safetensors, or pickles only when allowed
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise WildmergeError(f"{path} has no tokenizer files; lm-eval needs one: save the base model's tokenizer "
                             f"next to the weights (tokenizer.save_pretrained)")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _config_sha256(path: Path) -> str:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WildmergeError(f"{path} is not valid JSON: {exc}") from None
    for key in VOLATILE_CONFIG_KEYS:
        data.pop(key, None) if isinstance(data, dict) else None
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class FingerprintCache:
    """Per-file hashes keyed by (absolute path, size, mtime_ns), stored as one JSON file."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.entries: Dict[str, str] = {}
        if self.path and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except ValueError:
                self.entries = {}  # a broken cache only costs a re-hash

    def file_hash(self, file: Path) -> str:
        st = file.stat()
        key = f"{file.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if key not in self.entries:
            self.entries[key] = _config_sha256(file) if file.suffix == ".json" and file.name.endswith(
                "config.json") else _file_sha256(file)
        return self.entries[key]

    def save(self) -> None:
        if self.path:
            write_json(self.path, self.entries)


def fingerprint_model(path, cache: Optional[FingerprintCache] = None, allow_pickle: bool = False) -> str:
    """``sha256:<hex>`` over the weights, configs and tokenizer of the model folder (see module docstring)."""
    path = Path(path)
    check_model_dir(path, allow_pickle)
    cache = cache or FingerprintCache()
    from wildmerge.eval.composition import is_composition, read_spec

    if is_composition(path):  # the spec, the centroids and every member's own fingerprint
        h = hashlib.sha256()
        for file in sorted(path.glob("*")):
            if file.is_file():
                h.update(f"{file.name}:{_file_sha256(file)}\n".encode())
        spec = read_spec(path)
        for member in [*spec.experts.values(), *([spec.router] if spec.router else [])]:
            h.update(fingerprint_model(member, cache, allow_pickle).encode())
        return "sha256:" + h.hexdigest()
    names = [p for p in weight_files(path, allow_pickle)]
    names += [path / n for n in ("config.json", "generation_config.json", *TOKENIZER_FILES) if (path / n).is_file()]
    h = hashlib.sha256()
    for file in names:
        h.update(f"{file.name}:{cache.file_hash(file)}\n".encode())
    return "sha256:" + h.hexdigest()
