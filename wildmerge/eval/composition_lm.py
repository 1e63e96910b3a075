"""The composition baselines (``composition.py``) as an lm-eval model: ``wildmerge-composition``, registered by
``register`` only when wildmerge scores a composition. It subclasses lm-eval's ``LM``, so this module imports
lm-eval: nothing imports it at start-up (``eval/worker.py`` does, for a composition's job)."""

import functools
from pathlib import Path
from typing import List

from lm_eval.api.model import LM

from wildmerge.errors import WildmergeError
from wildmerge.eval.composition import CENTROIDS_FILE, MODEL_NAME, mixing_weights, read_spec
from wildmerge.threads import torch_threads


def _on_one_cpu_thread(request):
    """An lm-eval request of ``CompositionLM`` on one torch thread on a CPU (tiny forward passes: extra threads
    mostly spin on a shared CPU); the caller's count back after."""

    @functools.wraps(request)
    def run(self, *args, **kwargs):
        with torch_threads(1 if self.device_name == "cpu" else None):
            return request(self, *args, **kwargs)

    return run


class CompositionLM(LM):
    """lm-eval model over a composition folder (``pretrained=FOLDER``)."""

    def __init__(self, pretrained: str, device: str = "cpu", batch_size=16, dtype=None, **_ignored):
        super().__init__()
        import torch
        from safetensors.torch import load_file

        from wildmerge.eval.features import load_causal_lm

        self.spec = read_spec(pretrained)
        self.device_name = device if device not in (None, "auto") else "cpu"
        loaded = [load_causal_lm(p, self.device_name) for p in self.spec.experts.values()]
        self.experts = [m for m, _ in loaded]
        self.tokenizer = loaded[0][1]
        self.batch_size_ = int(batch_size) if str(batch_size).isdigit() else 16
        self.router = self.centroids = None
        if self.spec.kind == "composer":
            self.router, _ = load_causal_lm(self.spec.router, self.device_name)
            self.centroids = load_file(str(Path(pretrained) / CENTROIDS_FILE))["centroids"]
        self._torch = torch

    def weights(self, contexts: List[str]):
        from wildmerge.eval.features import last_token_features

        query = (last_token_features(self.router, self.tokenizer, contexts) if self.router is not None
                 else self._torch.zeros(len(contexts), 1))
        return mixing_weights(self.spec.kind, len(self.experts), query, self.centroids, self.spec.top_k,
                              self.spec.temperature)

    def logits(self, ids, mask, weights):
        """sum_t w_t z_t, running only the experts some input of the batch uses."""
        total = None
        for t, model in enumerate(self.experts):
            w = weights[:, t]
            if not bool((w > 0).any()):
                continue
            z = model(input_ids=ids, attention_mask=mask).logits.float() * w.to(ids.device)[:, None, None]
            total = z if total is None else total + z
        return total

    @_on_one_cpu_thread
    def loglikelihood(self, requests, disable_tqdm: bool = False):
        """One-token continuations are read from one pass over their context (shared by every choice of an
        item); longer ones get their own pass."""
        from wildmerge.eval.features import encode_pair

        args = [r.args for r in requests]
        enc = [encode_pair(self.tokenizer, c, x) for c, x in args]
        out = [None] * len(args)
        single = [i for i, (c, x) in enumerate(enc) if len(x) == 1 and c]
        contexts = list(dict.fromkeys(args[i][0] for i in single))
        last = dict(zip(contexts, self._last_logprobs(contexts, disable_tqdm)))
        for i in single:
            lp, token = last[args[i][0]], enc[i][1][0]
            out[i] = (float(lp[token]), bool(int(lp.argmax()) == token))
        rest = [i for i in range(len(args)) if out[i] is None]
        for i, value in zip(rest, self._full_loglikelihood([args[i] for i in rest], disable_tqdm)):
            out[i] = value
        return out

    def _last_logprobs(self, contexts: List[str], disable_tqdm: bool):
        from tqdm.auto import tqdm

        from wildmerge.eval.features import _pad_id, _padded, encode_pair

        torch, out = self._torch, []
        for i in tqdm(range(0, len(contexts), self.batch_size_), disable=disable_tqdm, desc=MODEL_NAME):
            chunk = contexts[i:i + self.batch_size_]
            rows = [encode_pair(self.tokenizer, c, "")[0] for c in chunk]
            ids, mask = _padded(rows, _pad_id(self.tokenizer), self.device_name)
            with torch.no_grad():
                logits = self.logits(ids, mask, self.weights(chunk))
            end = mask.sum(1) - 1
            out += list(torch.log_softmax(logits[torch.arange(len(chunk)), end], -1))
        return out

    def _full_loglikelihood(self, args, disable_tqdm: bool):
        from tqdm.auto import tqdm

        from wildmerge.eval.features import _pad_id, _padded, encode_pair

        torch, out = self._torch, []
        for i in tqdm(range(0, len(args), self.batch_size_), disable=disable_tqdm or not args, desc=MODEL_NAME):
            chunk = args[i:i + self.batch_size_]
            enc = [encode_pair(self.tokenizer, c, x) for c, x in chunk]
            ids, mask = _padded([(c + x)[:-1] for c, x in enc], _pad_id(self.tokenizer), self.device_name)
            with torch.no_grad():
                logprobs = torch.log_softmax(self.logits(ids, mask, self.weights([c for c, _ in chunk])), -1)
            for row, (c, x) in enumerate(enc):
                pos = torch.arange(len(c) - 1, len(c) - 1 + len(x))
                lp = logprobs[row, pos]
                target = torch.tensor(x)
                out.append((float(lp[torch.arange(len(x)), target].sum()), bool((lp.argmax(-1) == target).all())))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise WildmergeError(f"{MODEL_NAME} scores multiple-choice and generation tasks; perplexity tasks "
                             f"(loglikelihood_rolling) are not supported")

    @_on_one_cpu_thread
    def generate_until(self, requests, disable_tqdm: bool = False):
        """Greedy decoding on the combined logits, routed once from the prompt."""
        torch, out = self._torch, []
        for r in requests:
            context, kwargs = r.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            ids = self.tokenizer(context, add_special_tokens=False)["input_ids"]
            weights, new = self.weights([context]), []
            for _ in range(int(kwargs.get("max_gen_toks", 32))):
                x = torch.tensor([ids + new])
                with torch.no_grad():
                    nxt = int(self.logits(x, torch.ones_like(x), weights)[0, -1].argmax())
                if nxt == self.tokenizer.eos_token_id:
                    break
                new.append(nxt)
                text = self.tokenizer.decode(new)
                if any(u in text for u in until):
                    break
            text = self.tokenizer.decode(new)
            for u in until:
                text = text.split(u)[0]
            out.append(text)
        return out


_REGISTERED = []


def register() -> None:
    """Make ``wildmerge-composition`` known to lm-eval's model registry (idempotent).

    lm-eval fills its registry with the built-in models only when it is empty at the first lookup, so they are
    imported first: otherwise a long-lived worker that scored a composition first could no longer find ``hf``."""
    if not _REGISTERED:
        import lm_eval.models  # noqa: F401
        from lm_eval.api.registry import register_model

        _REGISTERED.append(register_model(MODEL_NAME)(CompositionLM))
