"""Task-vector norm ``||theta_merged - theta_base||_2`` over the whole model (Hitit et al., arXiv 2511.21437, Fig. 4).

Streaming: tensors are read one at a time from the safetensors files (large ones in row blocks), differences are
accumulated in float64, so memory stays at one block whatever the model size.
"""

import contextlib
import json
import math
from pathlib import Path

from wildmerge.atomic import write_json
from wildmerge.checkpoints import tensor_index
from wildmerge.errors import WildmergeError

BLOCK = 1 << 22  # elements per block (32 MiB in float64)


def task_vector_norm(merged_dir, base_dir) -> float:
    """L2 norm of the difference of every tensor of the two checkpoints (they must hold the same tensors); a model
    with added tokens is read on the base's tokens (``checkpoints.on_base_tokens``)."""
    import torch
    from safetensors import safe_open

    from wildmerge.checkpoints import on_base_tokens, resized_rows

    merged, base = tensor_index(merged_dir), tensor_index(base_dir)
    if set(merged) != set(base):
        only_m, only_b = sorted(set(merged) - set(base))[:3], sorted(set(base) - set(merged))[:3]
        raise WildmergeError(f"{merged_dir} and base {base_dir} hold different tensors (only in merge: {only_m}, "
                             f"only in base: {only_b}); is the base the right one?")
    aligned = resized_rows(str(base_dir), {"model": str(merged_dir)}).get("model", (None, None))
    total = 0.0
    with contextlib.ExitStack() as stack:  # each shard opened once, not once per tensor
        handles = {}

        def handle(path):
            if path not in handles:
                handles[path] = stack.enter_context(safe_open(str(path), framework="pt"))
            return handles[path]

        for name in sorted(merged):
            hm, hb = handle(merged[name]), handle(base[name])
            sm, sb = hm.get_slice(name), hb.get_slice(name)
            shape = sm.get_shape()
            if aligned[0] is not None and len(shape) == 2 and shape[0] == aligned[1]:
                d = on_base_tokens(hm.get_tensor(name), *aligned).double() - hb.get_tensor(name).double()
                total += float(torch.sum(d * d))
                continue
            if shape != sb.get_shape():
                raise WildmergeError(f"tensor {name}: shape {shape} in {merged_dir} but {sb.get_shape()} in the base")
            if len(shape) == 0:
                d = hm.get_tensor(name).double() - hb.get_tensor(name).double()
                total += float(d * d)
                continue
            rows = max(1, BLOCK // max(1, math.prod(shape[1:])))
            for start in range(0, shape[0], rows):
                d = sm[start:start + rows].to(torch.float64) - sb[start:start + rows].to(torch.float64)
                total += float(torch.sum(d * d))
    return math.sqrt(total)


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

    def norm(self, merged_dir, base_dir) -> float:
        key = f"{Path(merged_dir).resolve()}|{_signature(merged_dir)}|{Path(base_dir).resolve()}|{_signature(base_dir)}"
        if key not in self.data:
            self.data[key] = task_vector_norm(merged_dir, base_dir)
        return self.data[key]

    def save(self) -> None:
        write_json(self.path, self.data)
