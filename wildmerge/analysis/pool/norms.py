"""Task-vector norm ``||theta_merged - theta_base||_2`` over the whole model (Hitit et al., arXiv 2511.21437, Fig. 4).

Streaming: tensors are read one at a time from the safetensors files (large ones in row blocks), differences are
accumulated in float64, so memory stays at one block whatever the model size. A report's models share one pass
over the base (each base block read and converted once for all of them); the norms are cached in the run folder.
"""

import contextlib
import json
import math
from pathlib import Path
from typing import Dict, Union

from tqdm.auto import tqdm

from wildmerge.atomic import write_json
from wildmerge.checkpoints import tensor_index
from wildmerge.errors import WildmergeError

BLOCK = 1 << 22  # elements per block (32 MiB in float64)
GROUP = 32  # checkpoints compared in one pass over the base (each keeps its files open during the pass)
# ... and at most this many of their bytes: a file's pages read through its mapping stay resident until it is closed,
# so 31 SmolLM2 models (538 MB each) in one pass held 16.7 GB (measured); in groups of 7 about 4 GB.
GROUP_BYTES = 4 << 30


def group_size(model_dirs) -> int:
    """Checkpoints per pass over the base: ``GROUP``, fewer where the largest would map more than ``GROUP_BYTES``."""
    from wildmerge.checkpoints import weights_bytes

    largest = max((weights_bytes(d) for d in model_dirs), default=0)
    return max(1, min(GROUP, GROUP_BYTES // largest)) if largest else GROUP


class _Checkpoint:
    """One checkpoint compared with the base: its tensor -> shard index, its rows on the base's tokens, its sum."""

    def __init__(self, model_dir, base_dir, base_index):
        from wildmerge.checkpoints import resized_rows

        self.dir, self.total, self.error = model_dir, 0.0, None
        self.index = tensor_index(model_dir)
        if set(self.index) != set(base_index):
            only_m = sorted(set(self.index) - set(base_index))[:3]
            only_b = sorted(set(base_index) - set(self.index))[:3]
            raise WildmergeError(f"{model_dir} and base {base_dir} hold different tensors (only in merge: {only_m}, "
                                 f"only in base: {only_b}); is the base the right one?")
        self.aligned = resized_rows(str(base_dir), {"model": str(model_dir)}).get("model", (None, None))


def task_vector_norms(model_dirs: Dict[str, object], base_dir, desc: str = "task-vector norms"
                      ) -> Dict[str, Union[float, WildmergeError, OSError]]:
    """{key: L2 norm of the difference of every tensor of ``model_dirs[key]`` and the base}, or the error that
    checkpoint gave (different tensors, shapes, unreadable files); a model with added tokens is read on the base's
    tokens (``checkpoints.on_base_tokens``).

    One pass over the base serves up to ``group_size`` checkpoints: each block of the base is read and converted once,
    not once per model. Each model's sum runs over the same blocks in the same order as on its own, so its norm is
    the same number bit for bit."""
    try:
        base = tensor_index(base_dir)
    except (WildmergeError, OSError) as exc:  # every model's norm needs the base
        return {key: exc for key in model_dirs}
    out: Dict[str, Union[float, WildmergeError, OSError]] = {}
    keys = list(model_dirs)
    size = group_size(model_dirs.values())
    with tqdm(total=len(keys), desc=desc, unit="model", disable=not keys) as bar:
        for start in range(0, len(keys), size):
            group = {}
            for key in keys[start:start + size]:
                try:
                    group[key] = _Checkpoint(model_dirs[key], base_dir, base)
                except (WildmergeError, OSError) as exc:
                    out[key] = exc
            _one_pass(group, base, base_dir)
            for key, ck in group.items():
                out[key] = ck.error if ck.error is not None else math.sqrt(ck.total)
            bar.update(len(keys[start:start + size]))
    return {key: out[key] for key in keys}


def _one_pass(group: Dict[str, _Checkpoint], base: Dict[str, Path], base_dir) -> None:
    """Add every tensor's squared difference to each checkpoint's ``total``; a checkpoint that fails gets ``error``
    and leaves the pass."""
    import torch
    from safetensors import safe_open

    from wildmerge.checkpoints import on_base_tokens

    with contextlib.ExitStack() as stack:  # each shard opened once, not once per tensor
        handles = {}

        def handle(path):
            if path not in handles:
                handles[path] = stack.enter_context(safe_open(str(path), framework="pt"))
            return handles[path]

        for name in sorted(base):
            live = [ck for ck in group.values() if ck.error is None]
            if not live:
                return
            try:
                hb = handle(base[name])
            except OSError as exc:
                for ck in live:
                    ck.error = exc
                return
            sb = hb.get_slice(name)
            blocked = []  # the checkpoints whose tensor is read in row blocks, against the same base blocks
            for ck in live:
                try:
                    hm = handle(ck.index[name])
                    sm = hm.get_slice(name)
                    shape = sm.get_shape()
                    if ck.aligned[0] is not None and len(shape) == 2 and shape[0] == ck.aligned[1]:
                        d = on_base_tokens(hm.get_tensor(name), *ck.aligned).double() - hb.get_tensor(name).double()
                        ck.total += float(torch.sum(d * d))
                    elif shape != sb.get_shape():
                        raise WildmergeError(f"tensor {name}: shape {shape} in {ck.dir} but {sb.get_shape()} in the "
                                             f"base")
                    elif len(shape) == 0:
                        d = hm.get_tensor(name).double() - hb.get_tensor(name).double()
                        ck.total += float(d * d)
                    else:
                        blocked.append((ck, sm))
                except (WildmergeError, OSError) as exc:
                    ck.error = exc
            if not blocked:
                continue
            shape = sb.get_shape()
            rows = max(1, BLOCK // max(1, math.prod(shape[1:])))
            for start in range(0, shape[0], rows):
                b = sb[start:start + rows].to(torch.float64)
                for ck, sm in blocked:
                    d = sm[start:start + rows].to(torch.float64) - b
                    ck.total += float(torch.sum(d * d))


def task_vector_norm(merged_dir, base_dir) -> float:
    """L2 norm of the difference of every tensor of the two checkpoints (they must hold the same tensors); a model
    with added tokens is read on the base's tokens (``checkpoints.on_base_tokens``)."""
    value = task_vector_norms({"model": merged_dir}, base_dir)["model"]
    if isinstance(value, Exception):
        raise value
    return value


def _signature(model_dir) -> str:
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                    for p in sorted(Path(model_dir).glob("*.safetensors")))


class NormCache:
    """Norms keyed by both checkpoints' file signatures, so a report rerun reads no weights."""

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except ValueError:
            self.data = {}

    @staticmethod
    def key(merged_dir, base_dir) -> str:
        return f"{Path(merged_dir).resolve()}|{_signature(merged_dir)}|{Path(base_dir).resolve()}|{_signature(base_dir)}"

    def norm(self, merged_dir, base_dir) -> float:
        value = self.norms({"model": merged_dir}, base_dir)["model"]
        if isinstance(value, Exception):
            raise value
        return value

    def norms(self, model_dirs: Dict[str, object], base_dir) -> Dict[str, Union[float, WildmergeError, OSError]]:
        """{name: norm, or the error its checkpoint gave}; the ones not cached computed in one pass over the base."""
        keys = {name: self.key(path, base_dir) for name, path in model_dirs.items()}
        todo = {k: model_dirs[name] for name, k in keys.items() if k not in self.data}
        computed = task_vector_norms(todo, base_dir)
        self.data.update({k: v for k, v in computed.items() if not isinstance(v, Exception)})
        return {name: self.data.get(k, computed.get(k)) for name, k in keys.items()}

    def save(self) -> None:
        write_json(self.path, self.data)
