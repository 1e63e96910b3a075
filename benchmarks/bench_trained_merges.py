"""What one training step of the two trained baselines costs on a pool's models: the data-based Localize of
Localize-and-Stitch (He et al. 2024: a real-valued score per parameter, the model ``theta_0 + sigmoid(S) * tau_t``
trained on the expert's own data with an L1 penalty on the mask) and ProDistill (Xu et al. 2025: per block, the
merging coefficients trained so that the merged block on the merged prefix's activations matches the fine-tuned
block on its own). Both read each expert's items through ``expert_data`` and the models through ``pools.resolve``.

    python benchmarks/bench_trained_merges.py                  # the demo family, 2 experts, batch 8
    python benchmarks/bench_trained_merges.py --pool smollm2 --batch 4

Prints the median seconds of one step (after a warm-up step), the parameters each step trains, and the extra
model-sized tensors each method holds, as JSON.
"""

import argparse
import json
import statistics
import time

import torch
from torch.func import functional_call


def batch_of(tokenizer, items, size):
    texts = [f"{i['prompt']} {i['answer']}" for i in items[:size]]
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=128)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    return enc, labels


def timed(step, repeats):
    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def localize_step(model, theta0, tau, enc, labels):
    """One step of Localize: scores S (init: the top-10 % mask as +3 / -3), loss = LM loss + 1e-5 * sum sigmoid(S)."""
    scores = {k: torch.where(t.abs() >= t.abs().flatten().kthvalue(max(1, int(0.9 * t.numel()))).values, 3.0, -3.0)
              .requires_grad_() for k, t in tau.items()}
    opt = torch.optim.Adam(scores.values(), lr=0.01)

    def step():
        params = {k: theta0[k] + torch.sigmoid(scores[k]) * tau[k] for k in tau}
        out = functional_call(model, params, args=(), kwargs={**enc, "labels": labels})
        loss = out.loss + 1e-5 * sum(torch.sigmoid(s).sum() for s in scores.values())
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, sum(s.numel() for s in scores.values())


def prodistill_step(base, experts, enc_list):
    """One step on block 0: coefficients a_t per tensor of the block, loss = sum_t ||block_merged(h_merged) -
    block_t(h_t)||^2 over each task's batch (the dual inputs: the merged and the fine-tuned prefix)."""
    block = base.model.layers[0]
    names = [n for n, _ in block.named_parameters()]
    theta0 = {n: p.detach() for n, p in block.named_parameters()}
    taus = [{n: dict(e.model.layers[0].named_parameters())[n].detach() - theta0[n] for n in names} for e in experts]
    coeffs = torch.full((len(experts), len(names)), 1.0 / len(experts), requires_grad=True)
    opt = torch.optim.Adam([coeffs], lr=1e-3)
    rotary = base.model.rotary_emb
    with torch.no_grad():
        inputs = []
        for e, enc in zip(experts, enc_list):
            h_ft = e.model.embed_tokens(enc["input_ids"])
            h_merged = base.model.embed_tokens(enc["input_ids"])
            pos = torch.arange(h_ft.shape[1]).unsqueeze(0)
            emb = rotary(h_ft, pos)
            target = e.model.layers[0](h_ft, position_embeddings=emb)
            target = target[0] if isinstance(target, tuple) else target
            inputs.append((h_merged, emb, target))

    def step():
        params = {n: theta0[n] + sum(coeffs[t, j] * taus[t][n] for t in range(len(experts)))
                  for j, n in enumerate(names)}
        loss = 0.0
        for h, emb, target in inputs:
            out = functional_call(block, params, args=(h,), kwargs={"position_embeddings": emb})
            out = out[0] if isinstance(out, tuple) else out
            loss = loss + ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, coeffs.numel(), len(base.model.layers)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="demo")
    parser.add_argument("--experts", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no spinning on a shared CPU)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.expert_data.read import expert_items
    from wildmerge.pools import resolve

    torch.manual_seed(0)
    pool = resolve(args.pool)
    names = pool.expert_names[:args.experts]
    tokenizer = AutoTokenizer.from_pretrained(pool.base_path)
    base = AutoModelForCausalLM.from_pretrained(pool.base_path, dtype=torch.float32)
    experts = [AutoModelForCausalLM.from_pretrained(pool.experts[n], dtype=torch.float32) for n in names]
    batches = [batch_of(tokenizer, expert_items(pool.data[n], n), args.batch) for n in names]
    theta0 = {k: v.detach() for k, v in base.named_parameters()}
    tau = {k: v.detach() - theta0[k] for k, v in experts[0].named_parameters()}
    n_params = sum(v.numel() for v in theta0.values())

    step, trained = localize_step(base, theta0, tau, *batches[0])
    localize = timed(step, args.repeats)
    step, coeffs, layers = prodistill_step(base, experts, [enc for enc, _ in batches])
    prodistill = timed(step, args.repeats)
    print(json.dumps({
        "pool": args.pool, "parameters": n_params, "experts": len(names), "batch": args.batch,
        "threads": torch.get_num_threads(),
        "localize": {"seconds_per_step": round(localize, 4), "trained_values": trained,
                     "model_sized_tensors": 6},  # theta_0, tau, S, its gradient, Adam's two moments
        "prodistill": {"seconds_per_step_one_block": round(prodistill, 4), "trained_values_per_block": coeffs,
                       "blocks": layers},
    }, indent=1))


if __name__ == "__main__":
    main()
