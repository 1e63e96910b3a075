"""The ``smollm2_bf16`` suite: the ``smollm2`` suite's tasks with cheaper settings (bfloat16 weights, float32
log-softmax, batch 64), its own job ids, and the ``smollm2`` suite's job ids unchanged. Its settings reach lm-eval:
a tiny Llama scored through the worker's ``build_lm`` gives the log-likelihoods of a float64 computation from the
same bfloat16 weights (written here from the definition: the sum over the continuation's tokens of log p(token |
the tokens before it), log p from a log-softmax over the vocabulary)."""

import math

import pytest

from helpers import lm_family, one_thread  # noqa: F401  (fixtures)
from wildmerge.eval.jobs import make_job
from wildmerge.eval.suites import load_suite
from wildmerge.eval.worker import build_lm

CHANGED = {"dtype", "batch_size", "model_args"}


def test_same_tasks_as_smollm2_and_only_the_cost_settings_differ():
    fast, shipped = load_suite("smollm2_bf16"), load_suite("smollm2")
    assert [t.model_dump() for t in fast.tasks] == [t.model_dump() for t in shipped.tasks]
    assert fast.include_path == shipped.include_path
    a, b = fast.settings.model_dump(), shipped.settings.model_dump()
    assert {k for k in a if a[k] != b[k]} == CHANGED
    assert (a["dtype"], a["batch_size"], a["model_args"]) == ("bfloat16", 64, {"softmax_dtype": "float32"})


def test_large_bf16_is_the_large_suite_with_the_same_cost_settings():
    """The search's SmolLM2 recording suite: smollm2_large's tasks, smollm2_bf16's cost settings, no limit."""
    fast, shipped, bf16 = load_suite("smollm2_large_bf16"), load_suite("smollm2_large"), load_suite("smollm2_bf16")
    assert [t.model_dump() for t in fast.tasks] == [t.model_dump() for t in shipped.tasks]
    assert fast.include_path == shipped.include_path
    a, b = fast.settings.model_dump(), shipped.settings.model_dump()
    assert {k for k in a if a[k] != b[k]} == CHANGED
    assert {k: a[k] for k in CHANGED} == {k: bf16.settings.model_dump()[k] for k in CHANGED}


def test_smollm2_job_ids_unchanged_and_bf16_ids_its_own():
    """The shipped suite's settings (part of every job id) are what main's run folders were made with."""
    shipped = load_suite("smollm2")
    assert shipped.settings.model_dump(mode="json") == {
        "dtype": "float32", "batch_size": 16, "max_batch_size": None, "apply_chat_template": False, "limit": 50,
        "backend": "hf", "device": "auto", "model_args": {}, "include_defaults": False, "bootstrap_iters": 0}
    ids = {name: make_job("/m", "fp", load_suite(name), None, False).job_id for name in ("smollm2", "smollm2_bf16")}
    assert ids["smollm2"].startswith("smollm2-") and ids["smollm2_bf16"].startswith("smollm2_bf16-")
    assert ids["smollm2"].split("-")[1] != ids["smollm2_bf16"].split("-")[1]


def _float64_loglikelihood(model_path, context: str, continuation: str, dtype) -> float:
    """log p(continuation | context) in float64 from the model's weights rounded to ``dtype`` first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model = model.to(dtype).to(torch.float64).eval()
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    n_context = len(tok(context, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logits = model(torch.tensor([whole])).logits[0]
    total = 0.0
    for i in range(n_context, len(whole)):  # token i given tokens 0..i-1
        row = logits[i - 1]
        total += float(row[whole[i]] - (row.max() + torch.log(torch.exp(row - row.max()).sum())))
    return total


@pytest.mark.parametrize("suite_name", ["smollm2_bf16", "smollm2"])
def test_settings_reach_lm_eval_and_log_likelihoods_match_float64(lm_family, suite_name):  # noqa: F811
    import torch
    from lm_eval.api.instance import Instance

    suite = load_suite(suite_name)
    suite.settings.device = "cpu"
    job = make_job(lm_family["base"], "fp", suite, None, False).to_dict()
    lm = build_lm(job)
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[suite.settings.dtype]
    assert next(lm.model.parameters()).dtype == dtype
    assert lm.batch_size == suite.settings.batch_size
    assert lm.softmax_dtype == (torch.float32 if suite_name == "smollm2_bf16" else None)
    pairs = [("The sky is", " blue"), ("Two plus two is", " four"), ("Fire is", " hot and loud")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got = [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    for (context, continuation), ll in zip(pairs, got):
        want = _float64_loglikelihood(lm_family["base"], context, continuation, dtype)
        # float32 logits: float32 round-off; bfloat16: the activations' rounding (8-bit significand) on top
        tol = 1e-4 if dtype == torch.float32 else 0.02 * (1 + abs(want))
        assert math.isfinite(ll) and abs(ll - want) <= tol, (continuation, ll, want)
