"""Chain of Merges' importance weights (Buzzega et al., arXiv 2508.21421, Eq. 6) measured on a reference model of
one's choice: each expert's calibration data through one whole model (the base, "zero-shot" reference of the
paper's Fig. 6, or a finished merge), the normalised input Gram of each layer group's first projection, and its
omega. The merge itself takes the merged model as reference, group by group (chain.py); on the finished CoM merge
this gives back the omegas it wrote, because a group's input never depends on its own weights.
"""

from typing import Dict, List, Tuple

import torch
from tqdm.auto import tqdm

from wildmerge.plugins.layerwise.arch import GROUPS
from wildmerge.plugins.layerwise.io import load_eval_model
from wildmerge.plugins.layerwise.regmean import GramAccumulator, omega

FIRST = {g: mods[0] for g, mods in GROUPS}


def reference_omegas(model_path: str, batches: List[list], norm: str = "token", device: str = "cpu",
                     progress: bool = True) -> Dict[Tuple[int, str], List[float]]:
    """{(layer, group): [omega of expert i's data]} for the model at ``model_path`` (float32), ``batches`` per
    expert as the layer-wise driver reads them ([(input_ids, attention_mask)])."""
    model = load_eval_model(model_path, device)
    layers = model.model.layers
    out: Dict[Tuple[int, str], List[float]] = {}
    for i, expert_batches in enumerate(tqdm(batches, desc="reference omegas", unit="expert", disable=not progress)):
        accs, handles = {}, []
        mask_now = {}
        for k, layer in enumerate(layers):
            for g, name in FIRST.items():
                module = layer.get_submodule(name)
                accs[(k, g)] = GramAccumulator(module.in_features, norm, device)

                def hook(_m, args, key=(k, g)):
                    x = args[0]
                    accs[key].add(x.reshape(-1, x.shape[-1])[mask_now["valid"].reshape(-1)])

                handles.append(module.register_forward_pre_hook(hook))
        try:
            with torch.no_grad():
                for ids, mask in expert_batches:
                    mask_now["valid"] = mask.to(device).bool()
                    model(input_ids=ids.to(device), attention_mask=mask.to(device))
        finally:
            for h in handles:
                h.remove()
        for key, acc in accs.items():
            out.setdefault(key, []).append(omega(acc.result()))
    return out
