"""Write a tiny random-weight Llama and a locally trained BPE tokenizer to a directory (no downloads).

Run with the engine's Python (it needs torch and transformers):
    python live/tiny_model.py OUT_DIR [--layers 4] [--hidden 256] [--vocab 4096] [--seed 0]
The result serves on vLLM's CPU build: a 4,000-token prompt in about 0.35 s cold.
"""

from __future__ import annotations

import argparse
import random
import string
from pathlib import Path


def corpus(seed: int, n: int = 4000) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 9))) for _ in range(5000)]
    return [" ".join(rng.choice(words) for _ in range(60)) for _ in range(n)]


def build_tokenizer(out: Path, vocab: int, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    fast.save_pretrained(out)


def build_model(out: Path, layers: int, hidden: int, vocab: int, seed: int, context: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                      num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 128),
                      max_position_embeddings=context, bos_token_id=0, eos_token_id=1,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, a.vocab, a.seed)
    build_model(out, a.layers, a.hidden, a.vocab, a.seed, a.context)
    print(f"wrote tiny llama ({a.layers} layers, {a.hidden} wide, vocab {a.vocab}) to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
