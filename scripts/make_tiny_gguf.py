"""Write the tiny local model (scripts/make_tiny_model.py) as a GGUF file for llama.cpp.

    python scripts/make_tiny_gguf.py HF_MODEL_DIR OUT.gguf

Run with a Python that has ``gguf``, ``safetensors`` and ``numpy`` (scripts/real-engines.sh
uses llama.cpp's environment). The same weights and tokenizer as the vLLM model, so both
engines serve one model: llama architecture, float32, the byte-level BPE vocabulary with
its merges, the chat template in the metadata. Query and key weights are permuted the way
llama.cpp's own converter does (its rotary embedding pairs dimensions differently).
"""

from __future__ import annotations

import json
import os
import sys


def permute(w, n_head: int, n_head_kv: int | None = None):  # type: ignore[no-untyped-def]
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def main(src: str, out: str) -> None:
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    if os.path.exists(out):
        print(f"model already there: {out}")
        return
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(src, "tokenizer.json")) as f:
        tj = json.load(f)
    with open(os.path.join(src, "chat_template.jinja")) as f:
        template = f.read()
    vocab: dict[str, int] = tj["model"]["vocab"]
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    tokens = [""] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        tokens[i] = tok
    special = {t["id"] for t in tj.get("added_tokens", []) if t.get("special")}
    types = [
        gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
        for i in range(len(tokens))
    ]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(out + ".part", "llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(cfg["hidden_size"] // n_head)
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    t = load_file(os.path.join(src, "model.safetensors"))
    w.add_tensor("token_embd.weight", t["model.embed_tokens.weight"].astype(np.float32))
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            a = t[f"model.layers.{i}.{hf}.weight"].astype(np.float32)
            if gg == "attn_q":
                a = permute(a, n_head)
            elif gg == "attn_k":
                a = permute(a, n_head, n_kv)
            w.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(a))
    w.add_tensor("output_norm.weight", t["model.norm.weight"].astype(np.float32))
    w.add_tensor("output.weight", t["lm_head.weight"].astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".part", out)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: make_tiny_gguf.py HF_MODEL_DIR OUT.gguf")
    main(sys.argv[1], sys.argv[2])
