"""The weight-space pass (Zhou et al., arXiv 2601.22285, §3.1-3.3): task-vector Gram entries per tensor and, for
the 2-D block matrices, an SVD sketch per model.

Every checkpoint is read once, tensor by tensor, from its safetensors files: per tensor, the float64 dot products
<tau_i, tau_j> of the models that need them (row chunks bounded by ``chunk_mib``, so an embedding matrix never sits
whole in memory for every model) and, for a 2-D block matrix, one model's thin SVD at a time. The 18 weight metrics
need nothing else: the task-vector and effective-rank families are functions of the 2x2 Gram matrix of a pair
(§2.1-2.2), the subspace family of the top/bottom singular vectors.

Scope (LLM port of the paper's "encoder only"): every float tensor shared with the base except the LM head (the
analogue of the classification head); with tied embeddings the embedding matrix is the head too and is left out.
Subspace metrics use the 2-D matrices inside the transformer blocks (``.layers.``), as the paper's "all transformer
blocks"; ``subspace_scope="all_2d"`` adds every other 2-D tensor in scope.
"""

import contextlib
import time
import re
from typing import Dict, Iterable, List, Literal, Set, Tuple

from pydantic import BaseModel, ConfigDict, Field

_BLOCK = re.compile(r"\.layers\.\d+\.")


class WeightSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: int = Field(10, ge=1)  # top-/bottom-k singular directions (Table 22)
    k_sv: int = Field(100, ge=1)  # singular values kept for the singular-value overlap (Table 22)
    subspace_scope: Literal["blocks", "all_2d"] = "blocks"
    device: str = "cpu"  # where the SVDs run (cuda when there is one)
    chunk_mib: float = Field(256, gt=0)  # bound on one stacked chunk of task-vector rows

    def cache_key(self) -> dict:
        return self.model_dump(exclude={"device", "chunk_mib"})


def tensor_scope(base: str, subspace_scope: str = "blocks") -> Tuple[List[str], List[str], Dict[str, str]]:
    """(tensors for the global metrics, 2-D tensors for the subspace metrics, {left-out tensor: why})."""
    from safetensors import safe_open

    from wildmerge.checkpoints import read_config, tensor_index

    tied = bool(read_config(base).get("tie_word_embeddings"))
    vector, left_out = [], {}
    for name, shard in sorted(tensor_index(base).items()):
        with safe_open(str(shard), framework="pt") as f:
            dtype, shape = f.get_slice(name).get_dtype(), f.get_slice(name).get_shape()
        if not dtype.startswith(("F", "BF")):
            left_out[name] = f"not a float tensor ({dtype})"
        elif name.startswith("lm_head") or name.endswith("lm_head.weight"):
            left_out[name] = "LM head (the paper's classification head is not part of the task vector)"
        elif tied and "embed_tokens" in name:
            left_out[name] = "tied to the LM head"
        else:
            vector.append((name, len(shape)))
    subspace = [n for n, dims in vector if dims == 2 and (subspace_scope == "all_2d" or _BLOCK.search(n))]
    return [n for n, _ in vector], subspace, left_out


def _handles(folder: str, stack) -> dict:
    from safetensors import safe_open

    from wildmerge.checkpoints import tensor_index

    index = tensor_index(folder)
    opened = {s: stack.enter_context(safe_open(str(s), framework="pt")) for s in set(index.values())}
    return {name: opened[shard] for name, shard in index.items()}


def _read(handles: dict, name: str, rows=None, aligned=(None, None)):
    """One tensor (or its rows ``rows``), upcast; ``aligned`` reads an expert with added tokens on the base's tokens
    (``checkpoints.resized_rows``)."""
    import torch

    from wildmerge.checkpoints import on_base_tokens

    h = handles[name]
    if aligned[0] is not None and h.get_slice(name).get_shape()[0] == aligned[1]:
        t = on_base_tokens(h.get_tensor(name), *aligned)
        t = t[rows[0]:rows[1]] if rows else t
    else:
        t = h.get_slice(name)[rows[0]:rows[1]] if rows else h.get_tensor(name)
    return t.to(torch.float32)  # upcast before subtracting: bf16 differences lose bits


def _row_chunks(shape, n_models: int, chunk_mib: int) -> Iterable:
    if len(shape) == 0:
        yield None
        return
    per_row = max(1, _prod(shape[1:])) * 8 * max(1, n_models)
    step = max(1, int(chunk_mib * (1 << 20)) // per_row)
    for r0 in range(0, shape[0], step):
        yield (r0, min(shape[0], r0 + step))


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def svd_sketch(delta, k: int, k_sv: int, device: str = "cpu") -> dict:
    """Top-k left/right and bottom-k right singular vectors, the normalised spectrum (over the *full* sum, then
    truncated to k_sv, as the authors' code) and the numerical rank of one task-vector matrix.

    A CPU SVD runs on one thread, whatever the cores or ``WILDMERGE_LAPACK_THREADS`` (``kernel_pool.lapack_threads``;
    that variable sets how many matrices the merge kernels work on side by side, ``threads.py``): on several threads
    LAPACK rounds otherwise and waits at barriers (on this shared 2-core machine 12 SVDs of 512 x 192 took 91.6 s on
    two threads and 1.4 s on one)."""
    import torch

    from wildmerge.plugins.kernel_pool import lapack_threads

    d = delta.to(device, torch.float32)
    with lapack_threads(d.device):
        try:
            U, S, Vh = torch.linalg.svd(d, full_matrices=False)
        except RuntimeError:  # no convergence in float32: LAPACK in float64
            U, S, Vh = (x.float() for x in torch.linalg.svd(d.double().cpu(), full_matrices=False))
    kk = min(k, S.numel())
    tol = (S[0] * max(d.shape) * torch.finfo(torch.float32).eps) if S.numel() else 0.0
    return {"U": U[:, :kk].cpu().contiguous(), "Vt": Vh[:kk].cpu().contiguous(), "Vb": Vh[-kk:].cpu().contiguous(),
            "s": (S[:k_sv] / (S.sum() + 1e-8)).cpu().contiguous(), "rank": int((S > tol).sum())}


def weight_pass(base: str, models: Dict[str, str], need_self: Set[str], need_pairs: Set[Tuple[str, str]],
                settings: WeightSettings, progress: bool = True) -> dict:
    """Per-tensor statistics of the models that need them, reading each involved checkpoint once.

    Returns ``{"base_sq": {tensor: |theta_0|^2}, "self": {model: {tensor: |tau|^2}}, "dots": {(a, b): {tensor:
    <tau_a, tau_b>}}, "sketch": {model: {tensor: svd_sketch}}, "tensors": [...], "subspace": [...],
    "left_out": {...}}``.
    """
    import torch
    from tqdm.auto import tqdm

    vector, subspace, left_out = tensor_scope(base, settings.subspace_scope)
    subspace_set = set(subspace)
    involved = sorted(set(need_self) | {m for p in need_pairs for m in p})
    out = {"base_sq": {}, "self": {m: {} for m in need_self}, "dots": {p: {} for p in need_pairs},
           "sketch": {m: {} for m in need_self}, "tensors": vector, "subspace": subspace, "left_out": left_out,
           "svd_seconds": 0.0}  # of the pass's seconds, those in the SVD sketches (effective rank and subspace)
    if not involved:
        return out
    from wildmerge.checkpoints import resized_rows

    aligned = resized_rows(base, {m: models[m] for m in involved})
    with contextlib.ExitStack() as stack, torch.no_grad():
        hb = _handles(base, stack)
        hs = {m: _handles(models[m], stack) for m in involved}
        for name in tqdm(vector, desc="weight metrics", unit="tensor", disable=not progress):
            shape = hb[name].get_slice(name).get_shape()
            whole = name in subspace_set and any(m in need_self for m in involved)
            chunks = [None] if whole else list(_row_chunks(shape, len(involved), settings.chunk_mib))
            sums = {}
            base_sq = 0.0
            for rows in chunks:
                b = _read(hb, name, rows)
                base_sq += float(b.double().pow(2).sum())
                taus = {m: _read(hs[m], name, rows, aligned.get(m, (None, None))) - b for m in involved}
                if whole:
                    started = time.perf_counter()
                    for m in involved:
                        if m in need_self:
                            out["sketch"][m][name] = svd_sketch(taus[m], settings.k, settings.k_sv, settings.device)
                    out["svd_seconds"] += time.perf_counter() - started
                _accumulate(sums, taus, need_self, need_pairs)
                del taus, b
            out["base_sq"][name] = base_sq
            for key, value in sums.items():
                if isinstance(key, tuple):
                    out["dots"][key][name] = value
                else:
                    out["self"][key][name] = value
    return out


def _accumulate(sums: dict, taus: dict, need_self: Set[str], need_pairs: Set[Tuple[str, str]]) -> None:
    """Add this chunk's float64 Gram entries; column slices keep the float64 copy small."""
    import torch

    names = list(taus)
    flat = [taus[m].reshape(-1) for m in names]
    width = flat[0].numel()
    step = max(1, (64 << 20) // (8 * len(names)))
    G = torch.zeros(len(names), len(names), dtype=torch.float64)
    for c0 in range(0, max(width, 1), step):
        D = torch.stack([f[c0:c0 + step] for f in flat]).double()
        G += D @ D.T
    pos = {m: i for i, m in enumerate(names)}
    for m in need_self:
        sums[m] = sums.get(m, 0.0) + float(G[pos[m], pos[m]])
    for a, b in need_pairs:
        sums[(a, b)] = sums.get((a, b), 0.0) + float(G[pos[a], pos[b]])
