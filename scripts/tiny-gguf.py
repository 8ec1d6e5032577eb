#!/usr/bin/python3
"""Writes a tiny llama-architecture GGUF model with random weights (a few
hundred KB) for the serving tests: python3 tiny-gguf.py OUT.gguf [SEED].
The writer is gguf-py from the llama.cpp sources scripts/llama-server.sh
unpacks (its --bundle path), run with Debian's python3-numpy. The vocabulary
is ASCII characters (newline and tab too: SentencePiece would look them up
as byte tokens) plus its word mark, and has no byte-fallback
tokens, so whatever the model emits decodes to valid UTF-8 (non-streaming
chat fails on invalid UTF-8). At temperature 0 its output is deterministic."""
import os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
bundle = subprocess.run([os.path.join(here, "llama-server.sh"), "--bundle"], check=True,
                        capture_output=True, text=True).stdout.strip()
sys.path.insert(0, os.path.join(bundle, "gguf-py"))
import numpy as np  # noqa: E402
import gguf  # noqa: E402

out = sys.argv[1]
rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 17)
n_embd, n_ff, n_layer, n_head, ctx = 64, 128, 2, 4, 512
tokens = ["<unk>", "<s>", "</s>", "\u2581", "\n", "\t"] + [chr(c) for c in range(0x21, 0x7f)]
types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
    [gguf.TokenType.NORMAL] * (len(tokens) - 3)
n_vocab = len(tokens)

w = gguf.GGUFWriter(out, "llama")
w.add_name("corral-tiny-test")
w.add_context_length(ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(n_embd // n_head)
w.add_file_type(gguf.LlamaFileType.ALL_F32)
w.add_tokenizer_model("llama")
w.add_token_list(tokens)
w.add_token_scores([0.0] * 3 + [-float(i) for i in range(n_vocab - 3)])
w.add_token_types(types)
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
w.add_add_bos_token(True)
w.add_chat_template("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                    "{% if add_generation_prompt %}assistant: {% endif %}")


def t(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


w.add_tensor("token_embd.weight", t(n_vocab, n_embd))
w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
w.add_tensor("output.weight", t(n_vocab, n_embd))
for i in range(n_layer):
    p = "blk.%d." % i
    w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(p + name + ".weight", t(n_embd, n_embd))
    w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor(p + "ffn_gate.weight", t(n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", t(n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", t(n_embd, n_ff))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
