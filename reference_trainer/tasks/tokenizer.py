"""A word-level tokenizer built in code, so nothing is fetched from the Hugging Face hub.

Every symbol is one whitespace-separated word: "3 1 4 =" is four tokens, and decoding joins
tokens with single spaces, so decode(encode(text)) gives the text back for any task string.
"""

from __future__ import annotations

import os

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
DIGITS = tuple("0123456789")
# A few spare symbols and words so new tasks can be added without changing the vocabulary
# (and therefore without invalidating saved checkpoints).
SYMBOLS = ("=", "+", "-", "*", ":", ";", "|", "?", "copy", "add", "rev", "sort", "shift", "map")
VOCAB = SPECIAL_TOKENS + DIGITS + SYMBOLS


def build_tokenizer(padding_side: str = "left") -> PreTrainedTokenizerFast:
    """The project tokenizer. Encoding prepends <bos> (like Llama); add_special_tokens=False skips it.

    Left padding is the default because batched prompts are padded on the left for generation;
    training code that wants right padding sets `tokenizer.padding_side = "right"`.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side={padding_side!r}; accepted: 'left', 'right'")
    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side=padding_side,
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | os.PathLike, padding_side: str | None = None) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with save_pretrained into a local directory (never the hub)."""
    if not os.path.isdir(path):
        raise ValueError(f"tokenizer path {str(path)!r} is not a local directory; save one with "
                         "build_tokenizer().save_pretrained(dir) first")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if padding_side is not None:
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side={padding_side!r}; accepted: 'left', 'right'")
        tok.padding_side = padding_side
    return tok
