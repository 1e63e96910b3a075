"""A byte-level BPE tokenizer trained locally on the demo's own text, saved in Hugging Face format.

Byte-level pre-tokenization splits on spaces, so ``prompt`` and ``" " + answer`` tokenize the same apart as
together: what lm-eval scores is exactly what the model was trained on.
"""

EOS, PAD = "<|endoftext|>", "<|pad|>"


def train_tokenizer(texts: list, vocab_size: int):
    """A ``PreTrainedTokenizerFast`` (byte-level BPE, ``vocab_size`` tokens, EOS and PAD specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None, model_max_length=128
    )
