"""The layer-sequential engine of RegMean and Chain of Merges for decoder LLMs (Buzzega et al., arXiv
2508.21421, Algorithm 1).

Per decoder block k, in forward order:
1. load block k of every model (streamed from disk) and start the merged block as their average (norms, biases:
   "for all non-linear layers, we employ simple averaging");
2. RegMean: Grams of each group's inputs inside each model's *own* block, on its own hidden states;
   CoM: group by group (q/k/v, o, gate/up, down), Grams of the inputs the *merged* block gives each model's data,
   so the statistics already include every merged layer before it (the chain, Eq. 4);
3. solve every changed linear layer in closed form (Eq. 7), skip layers identical in all models;
4. push each model's hidden states through the merged block (and through its own block when RegMean or the
   covariate-shift diagnostic needs them).
Only block k of each model, its Grams and the hidden states of the calibration data are in memory.

ProDistill (``prodistill.py``) runs on the same two streams: step 2 is each model through its own block (the
teachers' outputs), step 3 trains the block's task-arithmetic coefficients on the merged stream, step 4 as above;
its tensors outside the blocks are task arithmetic, not the average.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
from tqdm.auto import tqdm

from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.arch import (
    GROUPS,
    DecoderSkeleton,
    block_prefix,
    forward_until,
    input_hooks,
    linear_weight_names,
    load_block,
    run_layer,
)
from wildmerge.plugins.layerwise.io import Checkpoint
from wildmerge.plugins.layerwise.covariate_shift import MomentAccumulator, mcs
from wildmerge.plugins.layerwise.mats import mats_merge
from wildmerge.plugins.layerwise.methods import LayerwiseParams, MaTSParams, ProDistillParams
from wildmerge.plugins.layerwise.prodistill import distill_block
from wildmerge.plugins.layerwise.regmean import GramAccumulator, all_equal, closed_form_merge, omega, solve_precision

FIRST_MODULE = {g: mods[0] for g, mods in GROUPS}
PROGRESS = {"chain_of_merges": "CoM", "regmean": "RegMean", "mats": "MaTS", "prodistill": "ProDistill"}
DIAGNOSTIC_GROUPS = ("qkv", "o")  # the paper's Fig. 1/3: pre- and post-attention projections


@dataclass
class ChainJob:
    """Everything the engine needs, validated beforehand."""

    chain: bool  # True: Chain of Merges; False: RegMean (MaTS: RegMean's statistics, solved by conjugate gradient)
    experts: List[Checkpoint]
    base: Optional[Checkpoint]
    batches: List[list]  # per expert: [(input_ids, attention_mask)]
    config: object
    settings: LayerwiseParams  # the recipe's checked parameters (norm, sim, ridge, lam_rel, diagnostics;
    # ProDistillParams for ProDistill)
    compute_dtype: torch.dtype = torch.float32
    device: str = "cpu"
    progress: bool = True
    trace: Optional[Callable] = None  # trace(layer, group, grams, omegas): tests / research hooks
    report: Dict = field(default_factory=dict)
    # {(layer, group): [omega per model]} measured through the base (omega_reference: base); None: the chain's own
    base_omegas: Optional[Dict] = None

    @property
    def method(self) -> str:
        if self.chain:
            return "chain_of_merges"
        if isinstance(self.settings, ProDistillParams):
            return "prodistill"
        return "mats" if isinstance(self.settings, MaTSParams) else "regmean"


class _Batch:
    """One calibration batch of one model: hidden states (kept on CPU), valid-token mask, per-layer kwargs."""

    def __init__(self, own, hat, valid, kwargs):
        self.own, self.hat, self.valid, self.kwargs = own, hat, valid, kwargs


def _rows(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])[valid.reshape(-1)]


def _average(tensors: List[torch.Tensor]) -> torch.Tensor:
    if not tensors[0].is_floating_point():
        return tensors[0]
    acc = torch.zeros_like(tensors[0], dtype=torch.float32)
    for t in tensors:
        acc += t.float()
    return (acc / len(tensors)).to(tensors[0].dtype)


# Hidden states of every calibration batch wait in host memory between layers; only the batch being computed is on
# the device, so GPU memory holds one block and one batch whatever the calibration set's size.
HOST = "cpu"


def _release(job: ChainJob) -> None:
    """Unmap the checkpoint files read so far: the next block is read afresh, so RSS stays one block deep."""
    for ck in job.experts + ([job.base] if job.base is not None else []):
        ck.close()


def _stream_average(experts: List[Checkpoint], name: str, device="cpu", dtype=None) -> torch.Tensor:
    """Mean of one tensor over all models, reading one copy at a time (embeddings, lm_head are large)."""
    first = experts[0].get(name, device, dtype)
    if not first.is_floating_point() or len(experts) == 1:
        return first
    acc = first.to(torch.float32, copy=True)  # never write into a loaded tensor: it may be the file's mmap
    for e in experts[1:]:
        acc += e.get(name, device, dtype).float()
    return (acc / len(experts)).to(first.dtype)


def _task_arithmetic(job: ChainJob, name: str, device="cpu", dtype=None) -> torch.Tensor:
    """``base + init_lambda * Σ_i (θ_i - base)`` of one tensor (ProDistill outside the blocks), one copy at a time."""
    base = job.base.get(name, device, dtype)
    if not base.is_floating_point():
        return base
    acc = base.to(torch.float32, copy=True)
    for e in job.experts:
        acc += job.settings.init_lambda * (e.get(name, device, dtype).float() - base.float())
    return acc.to(base.dtype)


def _outside_blocks(job: ChainJob, name: str, device="cpu", dtype=None) -> torch.Tensor:
    """A tensor outside the decoder blocks (embeddings, final norm, head): the mean, or ProDistill's start."""
    if job.method == "prodistill":
        return _task_arithmetic(job, name, device, dtype)
    return _stream_average(job.experts, name, device, dtype)


def _initial_batches(job: ChainJob, skeleton: DecoderSkeleton, need_own: bool, need_hat: bool) -> List[List[_Batch]]:
    """Layer-0 inputs: each model's own embeddings and the averaged (merged) embeddings of its data."""
    name = "model.embed_tokens.weight"
    dev, dt = job.device, job.compute_dtype
    merged_emb = (_outside_blocks(job, name, dev, dt) if len(job.experts) > 1 or job.method == "prodistill"
                  else None)
    out = []
    for i, expert in enumerate(job.experts):
        own_emb = expert.get(name, dev, dt) if (need_own or merged_emb is None) else None
        rows = []
        for ids, mask in job.batches[i]:
            ids, mask = ids.to(dev), mask.to(dev)
            hat = (merged_emb if merged_emb is not None else own_emb)[ids]
            own = own_emb[ids] if need_own else None
            kwargs = skeleton.layer_kwargs(hat, mask)
            rows.append(_Batch(own.to(HOST) if own is not None else None,
                               hat.to(HOST) if need_hat else None, mask.bool(), kwargs))
        out.append(rows)
        del own_emb
    return out


def solve_group(job, k, g, names, params, merged, accs, tok_accs, report_entry):
    """Solve the layers of group ``g`` in closed form (Eq. 7) from the models' Gram matrices, into ``merged``."""
    grams = [a.result() for a in accs]
    omegas = None
    if job.settings.sim:
        source = tok_accs if tok_accs is not None else accs
        omegas = [omega(a.result()) for a in source]
        if job.base_omegas is not None:  # the Fig. 6 ablation: the base's weights replace the chain's
            report_entry["omega_merged"] = omegas
            omegas = job.base_omegas[(k, g)]
        report_entry["omega"] = omegas
    if job.trace is not None:
        job.trace(k, g, grams, omegas)
    s = job.settings
    mats = isinstance(s, MaTSParams)
    for n in names:
        Ws = [p[n] for p in params]
        wants_base = s.ridge == "delta" or (mats and s.init == "task_arithmetic")
        W0 = job.base.get(n, job.device) if wants_base else None
        lam_rel = s.lam_rel
        precision = solve_precision(grams[0].shape[0])
        if mats:
            Wm, info = mats_merge(Ws, grams, omegas, lam_rel=lam_rel, ridge=s.ridge, base=W0, init=s.init,
                                  init_lambda=s.init_lambda, iterations=s.iterations, tol=s.tol, precision=precision)
            report_entry.setdefault("cg", {})[n] = info
        else:
            Wm = closed_form_merge(Ws, grams, omegas, lam_rel=lam_rel, ridge=s.ridge, base=W0, precision=precision)
        if not torch.isfinite(Wm).all():
            raise WildmergeError(
                f"{job.method}: the {'conjugate-gradient' if mats else 'closed-form'} solve for {n} gave NaN/Inf "
                f"(its Gram matrices are too ill-conditioned at lam_rel={lam_rel}); raise lam_rel in the recipe's "
                f"parameters (e.g. lam_rel: "
                f"{max(10 * lam_rel, 0.01):g}); if that does not help, a model's weights or activations contain "
                "NaN/Inf")
        merged[n] = Wm.to(job.compute_dtype)


@dataclass
class _Block:
    """Decoder block k while it is merged: every model's weights, the merged ones, and what is measured on it."""

    k: int
    layer: torch.nn.Module
    params: List[Dict[str, torch.Tensor]]  # per model: {weight name: tensor}
    merged: Dict[str, torch.Tensor]  # starts as the average, the solved groups replace their layers
    groups: Dict[str, List[str]]  # linear group -> its weight names
    changed: Dict[str, bool]  # False: the group is identical in all models, nothing to solve
    entries: Dict[str, Dict]  # the report row of each group
    diag_groups: List[str]  # groups whose merging covariate shift is measured
    own_m: Dict[str, list]  # per group, per model: moments of the inputs inside the model's own block
    hat_m: Dict[str, list]  # per group, per model: moments of the inputs inside the merged block

    def new_accs(self, job: ChainJob, g: str):
        """Gram accumulators of group ``g``, one per model (and token-normalised ones for Sim when norm is none)."""
        d = self.layer.get_submodule(FIRST_MODULE[g]).in_features
        accs = [GramAccumulator(d, job.settings.norm, job.device) for _ in self.params]
        with_tok = job.settings.sim and job.settings.norm == "none"
        tok = [GramAccumulator(d, "token", job.device) for _ in self.params] if with_tok else None
        return accs, tok

    def moments(self, job: ChainJob, g: str) -> MomentAccumulator:
        """Moments of group ``g``'s inputs for one model (the merging covariate shift)."""
        return MomentAccumulator(self.layer.get_submodule(FIRST_MODULE[g]).in_features, job.device)


def _open_block(job: ChainJob, skeleton: DecoderSkeleton, k: int, names: List[str]) -> _Block:
    """Read block k of every model and start the merged block as their average."""
    layer = skeleton.make_layer(k)
    params = [{n: e.get(n, job.device, job.compute_dtype) for n in names} for e in job.experts]
    merged = {n: _average([p[n] for p in params]) for n in names}
    groups = linear_weight_names(k)
    changed = {g: not all(all_equal([p[n] for p in params]) for n in groups[g]) for g in groups}
    entries = {g: {"layer": k, "group": g, "merged": changed[g]} for g in groups}
    diag_groups = [g for g in DIAGNOSTIC_GROUPS if job.settings.diagnostics]
    own_m = {g: [None] * len(params) for g in diag_groups}
    hat_m = {g: [None] * len(params) for g in diag_groups}
    return _Block(k, layer, params, merged, groups, changed, entries, diag_groups, own_m, hat_m)


def _own_stream(job: ChainJob, block: _Block, data: List[List[_Batch]]) -> None:
    """Each model's inputs inside its own block: RegMean's statistics (then its solve) and the MCS reference."""
    k, layer = block.k, block.layer
    own_accs = {g: block.new_accs(job, g) for g in block.groups
                if block.changed[g] and job.method in ("regmean", "mats")}
    for i, p in enumerate(block.params):
        load_block(layer, p, k)
        for g in block.diag_groups:
            block.own_m[g][i] = block.moments(job, g)
        for b in data[i]:
            def on_input(g, x, i=i, b=b):
                rows = _rows(x, b.valid)
                if g in own_accs:
                    own_accs[g][0][i].add(rows)
                    if own_accs[g][1] is not None:
                        own_accs[g][1][i].add(rows)
                if g in block.own_m:
                    block.own_m[g][i].add(rows)

            with input_hooks(layer, FIRST_MODULE, on_input):
                b.own = run_layer(layer, b.own.to(job.device), b.kwargs[k]).to(HOST)
    for g, (accs, tok) in own_accs.items():
        solve_group(job, k, g, block.groups[g], block.params, block.merged, accs, tok, block.entries[g])


def _chain_stream(job: ChainJob, block: _Block, data: List[List[_Batch]]) -> None:
    """Chain of Merges: group by group, the statistics of the merged block on each model's data, then the solve."""
    k, layer = block.k, block.layer
    for g, _mods in GROUPS:
        if not block.changed[g] and g not in block.diag_groups:
            continue
        load_block(layer, block.merged, k)
        accs, tok = block.new_accs(job, g) if block.changed[g] else (None, None)
        for i in range(len(block.params)):
            if g in block.diag_groups:
                block.hat_m[g][i] = block.moments(job, g)
            for b in data[i]:
                def on_input(_g, x, i=i, b=b):
                    rows = _rows(x, b.valid)
                    if accs is not None:
                        accs[i].add(rows)
                        if tok is not None:
                            tok[i].add(rows)
                    if g in block.hat_m:
                        block.hat_m[g][i].add(rows)

                with input_hooks(layer, {g: FIRST_MODULE[g]}, on_input, stop_at=g):
                    forward_until(layer, b.hat.to(job.device), b.kwargs[k])
        if block.changed[g]:
            solve_group(job, k, g, block.groups[g], block.params, block.merged, accs, tok, block.entries[g])


def _distill(job: ChainJob, block: _Block, data: List[List[_Batch]]) -> None:
    """ProDistill: train block k's coefficients on the merged stream (``b.hat``, this block's input) against each
    model's own block output (``b.own``, just computed), on the first ``samples`` sequences of each model."""
    k, s = block.k, job.settings
    prefix = block_prefix(k)
    names = list(block.merged)
    base = {n[len(prefix):]: job.base.get(n, job.device, torch.float32) for n in names}
    vectors = [{n[len(prefix):]: p[n].float() - base[n[len(prefix):]] for n in names} for p in block.params]
    rows = []
    for batches in data:
        chosen, seen = [], 0
        for b in batches:
            if seen >= s.samples:
                break
            chosen.append((b.hat.to(job.device, torch.float32), b.own.to(job.device, torch.float32),
                           b.valid.to(job.device), b.kwargs[k]))
            seen += b.valid.shape[0]
        rows.append(chosen)
    merged, report = distill_block(block.layer, base, vectors, rows, steps=s.steps, lr=s.lr,
                                   init_lambda=s.init_lambda)
    for n in names:
        block.merged[n] = merged[n[len(prefix):]].to(job.compute_dtype)
    block.entries["distill"] = {"layer": k, "group": "block", **report}


def _propagate(job: ChainJob, block: _Block, data: List[List[_Batch]]) -> None:
    """Push every model's data through the finished merged block (RegMean: measuring the MCS on the way)."""
    k, layer = block.k, block.layer
    load_block(layer, block.merged, k)
    watch = {g: FIRST_MODULE[g] for g in block.diag_groups} if not job.chain else {}
    for i in range(len(block.params)):
        for g in watch:
            block.hat_m[g][i] = block.moments(job, g)
        for b in data[i]:
            def on_input(g, x, i=i, b=b):
                block.hat_m[g][i].add(_rows(x, b.valid))

            with input_hooks(layer, watch, on_input):
                b.hat = run_layer(layer, b.hat.to(job.device), b.kwargs[k]).to(HOST)


def _covariate_shift(block: _Block) -> None:
    """The merging covariate shift (Eq. 8) of the diagnostic groups, into their report rows."""
    for g in block.diag_groups:
        per_model = [mcs(block.own_m[g][i], block.hat_m[g][i]) for i in range(len(block.params))]
        block.entries[g]["mcs"] = sum(per_model)
        block.entries[g]["mcs_per_model"] = per_model


def _merge_block(job: ChainJob, skeleton: DecoderSkeleton, k: int, names: List[str], data: List[List[_Batch]],
                 save_tensor: Callable[[str, torch.Tensor], None]) -> List[Dict]:
    """Merge decoder block k (steps 1-4 above), hand its tensors to ``save_tensor``; returns its report rows."""
    block = _open_block(job, skeleton, k, names)
    if _needs_own(job):
        _own_stream(job, block, data)
    if job.chain:
        _chain_stream(job, block, data)
    if job.method == "prodistill":
        _distill(job, block, data)
    if _needs_hat(job):
        _propagate(job, block, data)
    _covariate_shift(block)
    for n in names:
        save_tensor(n, block.merged[n].cpu())
    return list(block.entries.values())


def _needs_own(job: ChainJob) -> bool:
    """Whether each model's hidden states inside its own blocks are kept (RegMean's statistics, the MCS)."""
    return (not job.chain) or job.settings.diagnostics


def _needs_hat(job: ChainJob) -> bool:
    """Whether each model's data is pushed through the merged blocks (CoM's statistics, the MCS)."""
    return job.chain or job.method == "prodistill" or job.settings.diagnostics


def _base_omegas(job: ChainJob) -> Dict:
    """Sim's importance weights through the base model (the CoM paper's Fig. 6 "zero-shot" reference): each model's
    data through the whole base once, normalised as the chain normalises them for Sim."""
    from wildmerge.plugins.layerwise.reference import reference_omegas

    norm = "feature" if job.settings.norm == "feature" else "token"
    return reference_omegas(str(job.base.path), job.batches, norm=norm, device=job.device, progress=job.progress)


def run_chain(job: ChainJob, save_tensor: Callable[[str, torch.Tensor], None]) -> Dict:
    """Merge all tensors of ``job`` and hand them to ``save_tensor`` as they are ready; returns the report."""
    n_layers = job.config.num_hidden_layers
    names = job.experts[0].names()
    block_names = [[n for n in names if n.startswith(block_prefix(k))] for k in range(n_layers)]
    blocked = {n for b in block_names for n in b}
    if job.chain and job.settings.sim and getattr(job.settings, "omega_reference", "merged") == "base":
        job.base_omegas = _base_omegas(job)
    with torch.no_grad():
        for n in tqdm([n for n in names if n not in blocked], desc="average embeddings/norms/head",
                      disable=not job.progress, leave=False):
            save_tensor(n, _outside_blocks(job, n))
        _release(job)
        skeleton = DecoderSkeleton.build(job.config, job.device)
        data = _initial_batches(job, skeleton, _needs_own(job), _needs_hat(job))
        _release(job)
        layers_report = []
        for k in tqdm(range(n_layers), desc=f"{PROGRESS[job.method]} layers", disable=not job.progress):
            layers_report.extend(_merge_block(job, skeleton, k, block_names[k], data, save_tensor))
            _release(job)
    return {"layers": layers_report}
