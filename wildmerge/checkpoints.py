"""Checkpoint folders as untrusted input: which weight files may be read, what tensors they hold, and whether a set
of checkpoints can be merged tensor by tensor.

Checkpoints from the wild are untrusted: safetensors only. A folder that ships only pickle files (``.bin``, ``.pt``,
``.pth``: loading them can run arbitrary code) is refused unless the user explicitly allows pickles.

Everything here reads ``config.json`` and the safetensors headers (``safe_open``: a few KB per shard, no weights), so
a mismatched expert is named in milliseconds, before a merge or an evaluation starts, instead of half-way through
one with a traceback.
"""

import json
import math
import struct
from pathlib import Path
from typing import Dict, List, Tuple

from wildmerge.errors import WildmergeError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth")

# config.json keys that must agree for two checkpoints to be merged tensor by tensor. vocab_size is not among them:
# mergekit aligns vocabularies itself (a recipe's ``tokenizer:`` / ``tokenizer_source:``, or embedding truncation),
# and public fine-tunes with added tokens are common.
ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
             "num_key_value_heads", "head_dim")


def weight_files(path, allow_pickle: bool = False) -> List[Path]:
    """The folder's ``*.safetensors`` files, else (only with ``allow_pickle``) its pickle files; else an error."""
    folder = Path(path)
    files = sorted(folder.glob("*.safetensors"))
    if files or (folder / SHARD_INDEX).is_file():
        check_shards(folder, files)
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


SHARD_INDEX = "model.safetensors.index.json"


def weights_bytes(path) -> int:
    """The size of a model folder's weight files (safetensors, else pickles); 0 for one without (a composition)."""
    files = list(Path(path).glob("*.safetensors")) or list(Path(path).glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def cpu_merge_peak_bytes(model_bytes: int, experts: int) -> int:
    """A merge's peak resident memory on the CPU, estimated high: mergekit maps every input's weight files (the
    experts and the base) and the pages it reads stay resident, plus the output it writes: (experts + 2) x one
    model's bytes. Measured with Python on top (about 0.4 GB): SmolLM2's TIES of 2 experts 2.7 GB, of 9 6.3 GB
    (538 MB models; benchmarks/results/ties_trim_linear_cpu2.txt, docs/performance.md)."""
    return model_bytes * (experts + 2)


def check_shards(folder: Path, files: List[Path]) -> None:
    """A sharded checkpoint's index is readable and every shard it lists is there: a damaged index or a shard whose
    download never finished is named as such, not as a bare JSON error or "lacks 7 tensors" much later."""
    index = folder / SHARD_INDEX
    if not index.is_file():
        return
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
        if not all(isinstance(s, str) for s in shards):
            raise ValueError("shard names are not strings")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise WildmergeError(f"{index} is damaged ({type(exc).__name__}: {str(exc).splitlines()[0][:80]}); download "
                             f"it again with the checkpoint") from None
    present = {f.name for f in files}
    missing = [s for s in shards if s not in present]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise WildmergeError(f"shard {missing[0]}{more} listed in {index} but missing from {folder}; the download is "
                             f"incomplete, download the checkpoint again")


def check_weights(models: Dict[str, str], allow_pickle: bool = False) -> None:
    """Every safetensors file of these models complete (no truncation, every shard) and free of NaN / Inf; one error
    naming every model, file and tensor otherwise. The analyses run it first: a NaN expert would otherwise give a
    cosine of 0 with itself, or a linear-algebra traceback naming no model."""
    problems = []
    for name, path in models.items():
        try:
            for f in weight_files(path, allow_pickle):
                if f.suffix != ".safetensors":
                    continue
                check_safetensors(f)
                bad = nonfinite_in_file(f)
                if bad:
                    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
                    problems.append(f"  {name}: NaN or Inf in {bad[0]}{more} ({f})")
        except WildmergeError as exc:
            problems.append(f"  {name}: {exc}")
    if problems:
        raise WildmergeError(f"{len(problems)} model(s) cannot be analysed:\n" + "\n".join(problems)
                             + "\nReplace the damaged checkpoint (download it again), or leave it out with --exclude NAME.")


def check_safetensors(file) -> dict:
    """The header of one safetensors file, after checking the file holds every byte its header promises.

    A download cut short is the commonest damage from the wild: an empty file, a header cut mid-way, or a header
    intact with the weights missing (safetensors then fails only when a tensor is read, with "incomplete metadata").
    Reads the 8-byte length and the JSON header only.
    """
    file = Path(file)
    again = "the file is damaged or its download was cut short; download it again"
    size = file.stat().st_size
    if size < 8:
        raise WildmergeError(f"{file} is {'empty' if size == 0 else f'only {size} bytes'}: not a safetensors file "
                             f"({again})")
    with open(file, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > size - 8:
            raise WildmergeError(f"{file} is truncated inside its header ({size} bytes, the header alone needs "
                                 f"{header_len + 8}); {again}")
        raw = f.read(header_len)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise WildmergeError(f"{file} has an unreadable safetensors header ({exc}); {again}") from None
    needed = 8 + header_len + end
    if size < needed:
        raise WildmergeError(f"{file} is truncated: {size} of {needed} bytes ({100 * size / needed:.0f}%); {again}")
    return header


def read_config(path) -> dict:
    """``config.json`` of a checkpoint folder, with an error that names the folder."""
    f = Path(path) / "config.json"
    if not f.is_file():
        raise WildmergeError(f"{path}: no config.json; is this a transformers checkpoint folder?")
    try:
        return json.loads(f.read_text())
    except ValueError as exc:
        raise WildmergeError(f"{f} is not valid JSON ({exc}); the checkpoint is damaged, download it again") from None


def tensor_index(path) -> Dict[str, Path]:
    """{tensor name: safetensors shard} of a checkpoint folder, from mergekit's ``ShardedTensorIndex``."""
    from mergekit.io.lazy_tensor_loader import ShardedTensorIndex

    for f in weight_files(path):  # refuses pickle-only and empty folders with a clear message
        check_safetensors(f)
    try:
        index = ShardedTensorIndex.from_disk(str(path))
    except (RuntimeError, OSError, ValueError, KeyError) as exc:
        raise WildmergeError(f"{path}: cannot index its safetensors weights ({exc}); expected model.safetensors or "
                             f"model.safetensors.index.json") from None
    return {name: Path(path) / shard for name, shard in index.tensor_paths.items()}


def tensor_shapes(path, allow_pickle: bool = False) -> Dict[str, tuple]:
    """{tensor name: shape} from the safetensors headers of a checkpoint folder ({} for an allowed pickle-only
    checkpoint: it has no cheap header; mergekit will load it)."""
    shards = weight_files(path, allow_pickle)
    if shards[0].suffix != ".safetensors":
        return {}
    shapes = {}
    for shard in shards:
        shapes.update(shard_shapes(shard))
    return shapes


def shard_shapes(shard) -> Dict[str, tuple]:
    """{tensor name: shape} from one safetensors file's header (checked whole first)."""
    from safetensors import SafetensorError, safe_open

    check_safetensors(shard)
    try:
        with safe_open(str(shard), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise WildmergeError(f"{shard} is not a readable safetensors file ({exc}); the checkpoint is damaged or "
                             f"incomplete, download it again") from None


def param_count(path) -> int:
    """Number of parameters, from the safetensors headers (for the plan's disk estimate)."""
    return sum(math.prod(s) for s in tensor_shapes(path, allow_pickle=True).values())


def _arch(config: dict) -> dict:
    arch = {k: config.get(k) for k in ARCH_KEYS if k in config}
    arch["architectures"] = tuple(config.get("architectures") or ())
    return arch


def _vocab_size(config: dict):
    return config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))


def _only_vocab_differs(shape: tuple, base_shape: tuple, vocab, base_vocab) -> bool:
    """True when two shapes differ only along axes that are each checkpoint's vocabulary size (embeddings,
    output heads): mergekit's tokenizer alignment or embedding truncation reconciles those."""
    if vocab is None or base_vocab is None or vocab == base_vocab or len(shape) != len(base_shape):
        return False
    return all(a == b or (a == vocab and b == base_vocab) for a, b in zip(shape, base_shape))


def check_compatible(base: str, experts: Dict[str, str], allow_pickle: bool = False, base_name: str = "base",
                     same_vocab: bool = False) -> Dict[str, Tuple[int, int]]:
    """Raise one error listing every expert that mergekit cannot merge with the base tensor by tensor: another
    architecture (hidden size, layer count, heads), a tensor it lacks, a tensor of another shape.

    A vocabulary of another size is not a problem (mergekit aligns vocabularies through a recipe's ``tokenizer:``
    section): the experts whose vocabulary differs are returned as {name: (its vocab_size, the base's)} so the
    caller can align them or say what it does. ``same_vocab=True`` refuses them instead, for consumers that need
    identical shapes (the layer-wise RegMean / CoM driver, the geometry diagnostics).

    ``experts`` maps expert name -> folder; ``base`` is the reference they are compared with (a merge without a base
    model passes its first expert). Tensors an expert lacks are errors, except a tied ``lm_head``; extra tensors in
    an expert are ignored (mergekit merges the base's tensors). The same folder twice is an error.
    """
    paths = {base_name: base, **experts}
    seen = {}
    for name, p in paths.items():
        real = str(Path(p).resolve())
        if real in seen:
            raise WildmergeError(f"{name} and {seen[real]} are the same checkpoint ({real}); remove the duplicate")
        seen[real] = name
    base_config = read_config(base)
    base_arch, base_vocab = _arch(base_config), _vocab_size(base_config)
    base_shapes = tensor_shapes(base, allow_pickle)
    tied = bool(base_config.get("tie_word_embeddings"))
    problems, unreadable, vocab_differs = [], [], {}
    for name, path in experts.items():
        try:  # every expert is checked: one pickle-only or damaged expert does not hide another's mismatch
            problems += _expert_problems(name, path, base_name, base_arch, base_vocab, base_shapes, tied, same_vocab,
                                         allow_pickle, vocab_differs)
        except WildmergeError as exc:
            unreadable.append((name, exc))
    if len(unreadable) == 1 and not problems:
        raise unreadable[0][1]  # its own message names the file and the fix
    if problems or unreadable:
        lines = [f"  {name}: {exc}" for name, exc in unreadable] + problems
        fix = ["Use experts fine-tuned from this exact base"] if problems else []
        fix += ["repair or replace the unreadable checkpoint(s)"] if unreadable else []
        raise WildmergeError(
            f"these experts cannot be merged with {base_name} tensor by tensor:\n" + "\n".join(lines)
            + f"\n{'; '.join(fix)}, or leave them out with --exclude NAME.")
    return vocab_differs


def _expert_problems(name, path, base_name, base_arch, base_vocab, base_shapes, tied, same_vocab, allow_pickle,
                     vocab_differs) -> List[str]:
    """What stops one expert from merging with the base tensor by tensor ([] when nothing)."""
    config = read_config(path)
    arch, vocab = _arch(config), _vocab_size(config)
    diff = [f"{k}: {arch.get(k)!r} vs {base_name} {v!r}" for k, v in base_arch.items() if arch.get(k) != v]
    if diff:
        return [f"  {name} ({path}): architecture differs: " + "; ".join(diff)]
    if vocab != base_vocab:
        if same_vocab:
            return [f"  {name} ({path}): vocabulary of {vocab} tokens vs {base_name} {base_vocab}; this step needs "
                    "identical vocabularies (mergekit's tokenizer alignment does not apply)"]
        vocab_differs[name] = (vocab, base_vocab)
    shapes = tensor_shapes(path, allow_pickle)
    if not shapes or not base_shapes:
        return []
    missing = [t for t in base_shapes if t not in shapes and not (tied and t.startswith("lm_head"))]
    wrong = [f"{t} {shapes[t]} vs {base_name} {s}" for t, s in base_shapes.items()
             if t in shapes and shapes[t] != s and not _only_vocab_differs(shapes[t], s, vocab, base_vocab)]
    problems = []
    if missing:
        problems.append(f"  {name} ({path}): lacks {len(missing)} tensor(s) of {base_name}, e.g. {missing[:3]}")
    if wrong:
        problems.append(f"  {name} ({path}): {len(wrong)} tensor shape(s) differ, e.g. {'; '.join(wrong[:3])}")
    return problems


def _token_ids(folder: str) -> Dict[str, int]:
    """Token -> id of a folder's ``tokenizer.json`` (added tokens included)."""
    from tokenizers import Tokenizer

    file = Path(folder) / "tokenizer.json"
    if not file.is_file():
        raise WildmergeError(f"{folder} has no tokenizer.json, so its embedding rows cannot be matched to the base's "
                             f"tokens; leave this expert out (--exclude NAME)")
    return Tokenizer.from_file(str(file)).get_vocab(with_added_tokens=True)


def vocabulary_rows(base: str, expert: str, name: str):
    """For each token id of ``base``'s tokenizer, the row of ``expert``'s embedding that holds that token.

    An expert that added tokens (and resized its embeddings) is read on the base's tokens: its rows of the base's
    tokens in the base's order, the rows of tokens only it added dropped, as mergekit's ``tokenizer: {source: base}``
    does for per-tensor methods. A base token the expert lacks is an error."""
    import torch

    ours, theirs = _token_ids(base), _token_ids(expert)
    missing = [t for t in ours if t not in theirs]
    if missing:
        raise WildmergeError(f"{name}: {len(missing)} of the base's tokens (e.g. {missing[0]!r}) are not in its "
                             f"tokenizer, so its embeddings cannot be read on the base's tokens; leave it out "
                             f"(--exclude NAME)")
    return torch.tensor([theirs[t] for t in sorted(ours, key=ours.get)], dtype=torch.long)


def resized_rows(base: str, experts: Dict[str, str]) -> Dict[str, tuple]:
    """{expert name: (``vocabulary_rows``, its vocab_size)} for the experts whose vocabulary size is not the base's."""
    base_vocab = _vocab_size(read_config(base))
    out = {}
    for name, path in experts.items():
        vocab = _vocab_size(read_config(path))
        if vocab != base_vocab:
            out[name] = (vocabulary_rows(base, path, name), vocab)
    return out


def on_base_tokens(tensor, rows, vocab_size):
    """``tensor`` read on the base's tokens: a matrix with ``vocab_size`` rows (embeddings, output head) at ``rows``."""
    if rows is not None and tensor.ndim == 2 and tensor.shape[0] == vocab_size:
        return tensor.index_select(0, rows)
    return tensor


def nonfinite_tensors(path) -> List[str]:
    """Names of the floating-point tensors of a safetensors checkpoint that hold NaN or Inf (reads every tensor,
    one at a time)."""
    return [name for shard in weight_files(path) for name in nonfinite_in_file(shard)]


def all_finite(t) -> bool:
    """No NaN / Inf in the floating-point tensor ``t``. A NaN or Inf makes the sum non-finite, so one summing pass
    (no boolean copy of the tensor) answers for the finite tensors that nearly every check reads; only a non-finite
    sum (a NaN, an Inf, or finite values whose sum overflowed) is checked element by element."""
    import torch

    return math.isfinite(float(t.sum(dtype=torch.float32))) or bool(torch.isfinite(t).all())


def nonfinite_in_file(file) -> List[str]:
    """Names of the floating-point tensors of one safetensors file that hold NaN or Inf."""
    from safetensors import safe_open

    bad = []
    with safe_open(str(file), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if t.is_floating_point() and not all_finite(t):
                bad.append(name)
    return bad


def nonfinite_sources(tensors: List[str], models: Dict[str, str]) -> Dict[str, List[str]]:
    """{tensor: [names of the models whose copy holds NaN or Inf]}, reading only those tensors of each model."""
    from safetensors import safe_open

    found = {t: [] for t in tensors}
    for model, path in models.items():
        try:
            index = tensor_index(path)
        except WildmergeError:
            continue  # a pickle-only or unreadable input: nothing cheap to say about it
        for t in tensors:
            if t in index:
                with safe_open(str(index[t]), framework="pt") as f:
                    x = f.get_tensor(t)
                if x.is_floating_point() and not all_finite(x):
                    found[t].append(model)
    return found
