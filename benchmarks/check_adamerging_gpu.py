"""GPU check of AdaMerging+TAS (wildmerge.analysis.tas.adamerging): CPU and CUDA learn the same coefficients, and the CUDA
run's checkpoint is theta_0 + sum_t lambda[t, block] tau_t (float64 from the files). Needs torch, transformers,
tokenizers, safetensors, pydantic and pyyaml (not mergekit); writes $OUT/result.json.

    OUT=/tmp/out python benchmarks/check_adamerging_gpu.py   # measured: benchmarks/results/adamerging_gpu_h200.json
"""
import json, os, sys, time
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file


def tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    corpus = ["The sky is blue", "Two plus two is four", "Fire is hot", "Ice is cold", "1 plus 1 equals 2"] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|pad|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|pad|>")
    fast.save_pretrained(str(path))
    return len(fast)


def model(path, vocab, base=None, seed=0, noise=0.0):
    from transformers import AutoModelForCausalLM, LlamaConfig
    torch.manual_seed(seed)
    if base is None:
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          tie_word_embeddings=False)
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    else:
        m = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(noise * torch.randn_like(p))
    m.save_pretrained(str(path))
    tokenizer(path)
    return str(path)


def main():
    from wildmerge.analysis.tas.adamerging import AdaMergingSettings, adamerge
    out = Path(os.environ.get("OUT", "/tmp/out"))
    root = Path("/tmp/ada")
    root.mkdir(exist_ok=True)
    vocab = tokenizer(root / "tok")
    base = model(root / "base", vocab)
    experts = {f"e{i}": model(root / f"e{i}", vocab, base=base, seed=i + 1, noise=0.3) for i in range(2)}
    texts = [["The sky is blue and fire is hot", "Ice is cold and the sky is blue", "Fire is hot, ice is cold"] * 4, ["1 plus 1 equals 2 and two plus two is four", "Two plus two is four, 1 plus 1 equals 2"] * 6]
    data = {f"e{i}": t for i, t in enumerate(texts)}
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    lams = {}
    for device in ("cpu", "cuda"):
        settings = AdaMergingSettings(iterations=40, lr=0.05, batch_size=4)
        start = time.perf_counter()
        written = adamerge(base, experts, data, root / device, settings=settings, samples=8, device=device,
                           progress=False)
        info = json.loads(Path(written["coefficients"]).read_text())
        lams[device] = np.array(info["coefficients"])
        result[device] = {"seconds": round(time.perf_counter() - start, 2), "loss_first": info["losses"][0],
                          "loss_last": info["losses"][-1], "coefficients": info["coefficients"]}
    result["max_abs_diff_cpu_cuda"] = float(np.abs(lams["cpu"] - lams["cuda"]).max())
    b = load_file(f"{base}/model.safetensors")
    es = [load_file(f"{p}/model.safetensors") for p in experts.values()]
    merged = load_file(f"{root}/cuda/model/model.safetensors")
    worst = 0.0
    for name, x in b.items():
        col = int(name.split(".")[2]) if ".layers." in name else 3
        ref = x.astype(np.float64) + sum(lams["cuda"][t, col] * (e[name].astype(np.float64) - x) for t, e in enumerate(es))
        worst = max(worst, float(np.abs(merged[name] - ref).max()))
    result["cuda_checkpoint_vs_float64_reference"] = worst
    result["ok"] = bool(worst < 1e-5 and result["max_abs_diff_cpu_cuda"] < 1e-2
                        and result["cuda"]["loss_last"] < result["cuda"]["loss_first"])
    print(json.dumps(result, indent=1))
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
