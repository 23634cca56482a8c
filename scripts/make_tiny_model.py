"""Build a tiny random-weight Llama model and its tokenizer locally (no download).

    python scripts/make_tiny_model.py [--think] OUT_DIR

``--think``: a reasoning model's vocabulary and template (the same words): ``<think>`` and
``</think>`` as tokens of their own, the chat template opening the thinking as DeepSeek-R1's
does, for vLLM's ``--reasoning-parser deepseek_r1``. Its weights never choose ``</think>``:
the thinking ends where a request's ``thinking_token_budget`` makes the server force it.

Run with the engines' own Python (it needs torch, transformers and tokenizers, which the
vLLM CPU build brings). Random weights emit byte tokens that are not valid UTF-8 on their
own, and servers hold such text back, which would ruin streaming timing; so every
embedding gets a large constant in hidden dimension 0 and the output rows of byte tokens
and of the end-of-sequence token a large negative weight there: they are never chosen.
"""

from __future__ import annotations

import json
import os
import random
import sys


THINK = ("<think>", "</think>")


def main(out: str, think: bool = False) -> None:
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(out, exist_ok=True)
    if os.path.exists(os.path.join(out, "config.json")):
        print(f"model already there: {out}")
        return
    rng = random.Random(0)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "with",
        "was",
        "on",
        "be",
        "by",
        "this",
        "are",
        "from",
        "at",
        "or",
        "an",
        "have",
        "not",
        "which",
        "but",
        "were",
        "all",
        "their",
        "one",
        "can",
        "has",
        "more",
        "will",
        "would",
        "there",
        "been",
        "if",
        "its",
        "also",
        "into",
        "than",
        "other",
        "some",
        "these",
        "time",
        "only",
        "two",
        "may",
        "first",
        "new",
        "any",
        "such",
        "could",
        "made",
        "over",
        "after",
        "system",
        "model",
        "data",
        "value",
        "each",
        "work",
        "used",
        "between",
        "both",
        "under",
        "state",
        "def",
        "return",
        "class",
        "import",
        "print",
        "self",
        "list",
        "dict",
        "error",
        "count",
        "file",
        "parse",
        "json",
        "table",
        "story",
        "light",
        "house",
        "ending",
        "write",
        "function",
        "summary",
        "notes",
        "fields",
        "name",
        "unit",
    ]
    corpus = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(3000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=480,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    if think:  # (plain text tokens, as a reasoning model's tokenizer has them)
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:" + ("<think>" if think else "") + "{% endif %}"
    )
    fast.save_pretrained(out)
    vocab = fast.get_vocab()
    cfg = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 8.0
        # Tokens to avoid: single bytes outside printable ASCII letters, and specials.
        byte_like = [
            i
            for t, i in vocab.items()
            if len(t) == 1 and not t.isalpha() or t in ("<s>", "</s>", "<pad>", *THINK)
        ]
        model.lm_head.weight[byte_like, 0] = -50.0
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "tokmon_avoided_tokens.json"), "w") as f:
        json.dump(len(byte_like), f)
    print(f"tiny model written to {out} (vocabulary {len(vocab)}, avoided {len(byte_like)})")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[-1], think="--think" in args)
