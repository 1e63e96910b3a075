"""Experts whose tokenizer is not the base's: aligned by mergekit's tokenizer options, said in the run log.

Published fine-tunes often add tokens (and resize their embeddings) or ship another chat template. mergekit merges
them when the recipe has a ``tokenizer:`` section: every model's embedding and output-head rows are permuted onto
one output vocabulary before the merge method sees them (mergekit's ``PermutedVocabulary``), so a token's merged
row is the method applied to that token's rows in every model.

Our default is ``tokenizer: {source: base}``: every merged model keeps the base's tokens and ids, so all merges of a
run (and the base itself) read the same prompts the same way and are scored on one evaluation suite; tokens only an
expert added are dropped (the base's prompts never produce them). The chat template stays the base's when it has
one; when it has none, mergekit's ``chat_template: auto`` takes the most common template among the inputs.

RegMean and Chain of Merges do not go through mergekit's alignment; their driver reads an expert with added tokens
at the rows of the base's tokens (``plugins/layerwise/io.vocabulary_rows``): the same policy, source = base.
"""

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from wildmerge.checkpoints import read_config
from wildmerge.errors import WildmergeError

TOKENIZER_SOURCE = "base"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "added_tokens.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json")


@dataclass(frozen=True)
class Tokenizer:
    """What of a checkpoint's tokenizer matters to a merge: its embedding rows, its token -> id map, its template."""

    vocab_size: Optional[int]  # rows of the embedding matrix (config.json)
    tokens: Optional[str]  # digest of the token -> id map; None when the folder has no tokenizer
    chat_template: Optional[str]


def _files_digest(path: Path) -> str:
    """A digest of the folder's tokenizer files (re-read only when one's size or modification time changes)."""
    stamps = tuple((name, st.st_size, st.st_mtime_ns) for name in TOKENIZER_FILES
                   if (f := path / name).is_file() and (st := f.stat()))
    return _digest(str(path), stamps)


@lru_cache(maxsize=1024)
def _digest(path: str, stamps: tuple) -> str:
    h = hashlib.sha256()
    for name, _, _ in stamps:
        h.update(name.encode() + b"\0" + (Path(path) / name).read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=256)
def _load(path: str, files: str) -> Tokenizer:  # ``files``: the cache key changes when the files do
    from transformers import AutoTokenizer

    vocab_size = _rows(read_config(path))
    if not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        return Tokenizer(vocab_size, None, None)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as exc:
        raise WildmergeError(f"{path}: its tokenizer cannot be loaded ({exc}); repair or remove its tokenizer "
                             "files") from None
    vocab = json.dumps(sorted(tok.get_vocab().items()))
    template = tok.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    return Tokenizer(vocab_size, hashlib.sha256(vocab.encode()).hexdigest(), (template or "").strip() or None)


def tokenizer_of(path) -> Tokenizer:
    """The checkpoint's tokenizer facts (loaded once per process while its files stay the same)."""
    path = Path(path)
    return _load(str(path.resolve()), _files_digest(path))


def _same_files(path, base_path) -> bool:
    """Same tokenizer files and embedding rows as the base (config.json and file stamps only)."""
    return _files_digest(Path(path)) == _files_digest(Path(base_path)) and \
        _rows(read_config(path)) == _rows(read_config(base_path))


def _rows(config: dict):
    return config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))


def _n(v) -> str:
    return f"{v:,}".replace(",", " ") if isinstance(v, int) else str(v)


def differences(base: Tokenizer, expert: Tokenizer, name: str) -> Tuple[List[str], bool]:
    """(what differs, in words; whether the embedding rows need aligning)."""
    said, align = [], False
    if expert.vocab_size != base.vocab_size:
        said.append(f"expert {name} has vocabulary {_n(expert.vocab_size)} vs base {_n(base.vocab_size)}")
        align = True
    elif expert.tokens is not None and base.tokens is not None and expert.tokens != base.tokens:
        said.append(f"expert {name} has another token -> id map (same size {expert.vocab_size})")
        align = True
    if expert.chat_template != base.chat_template and expert.chat_template is not None:
        said.append(f"expert {name} has another chat template")
    return said, align


def plan_tokenizer(base_path, experts: Dict[str, str], layerwise: bool, method: str) -> Tuple[dict, Optional[str]]:
    """(recipe keys to add, one run-log line saying what was done; None when every expert has the base's tokenizer).

    Raises when the base has no tokenizer to align to."""
    odd = {name: path for name, path in experts.items() if not _same_files(path, base_path)}
    if not odd:  # the common case: every expert ships the base's own tokenizer files (nothing is loaded)
        return {}, None
    base = tokenizer_of(base_path)
    said, align, template = [], [], False
    for name, path in odd.items():
        words, needs = differences(base, tokenizer_of(path), name)
        said += words
        if needs:
            align.append(name)
        template |= any("chat template" in w for w in words)
    if not said:
        return {}, None
    if layerwise:  # the driver reads resized experts on the base's tokens and saves the base's tokenizer
        done = ", embeddings read at the rows of the base's tokens" if align else ""
        return {}, "; ".join(said) + f": the merged model keeps the base's tokenizer and chat template{done}"
    if base.tokens is None:
        raise WildmergeError(
            f"{'; '.join(said)}, but the base {base_path} has no tokenizer to align them to; add the base's "
            "tokenizer files to its folder, or leave those experts out (--exclude NAME)")
    keys = {"tokenizer": {"source": TOKENIZER_SOURCE}}
    done = "tokenizer source=base" + (", embeddings aligned by mergekit" if align else "")
    if template:
        if base.chat_template is None:
            keys["chat_template"] = "auto"
            done += ", chat template: the most common among the inputs (the base has none)"
        else:
            done += ", chat template: the base's"
    return keys, "; ".join(said) + ": " + done
