"""Tiny decoder models built from configs (nothing downloaded), and a critic with a per-token value head."""

from __future__ import annotations

import os

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
)

from .tokenizer import build_tokenizer

# Sizes: the tiny ones learn the built-in tasks in minutes on 2 CPU cores; llama-small is big enough
# (~25M params, ~100 MB of params+grads in fp32, ~300 MB with Adam) that offloading shows in memory plots.
PRESETS: dict[str, dict] = {
    "llama-tiny": dict(
        config_class=LlamaConfig, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, intermediate_size=256, max_position_embeddings=256,
    ),
    "qwen2-tiny": dict(
        config_class=Qwen2Config, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, intermediate_size=256, max_position_embeddings=256,
    ),
    "llama-small": dict(
        config_class=LlamaConfig, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=8, intermediate_size=1376, max_position_embeddings=512,
    ),
}


def _special_ids() -> dict[str, int]:
    tok = build_tokenizer()
    return dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


def _is_local_dir(preset_or_path) -> bool:
    return isinstance(preset_or_path, os.PathLike) or (
        isinstance(preset_or_path, str) and os.path.isdir(preset_or_path)
    )


def build_config(preset: str, vocab_size: int, dtype: torch.dtype = torch.float32) -> PretrainedConfig:
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; known presets: {sorted(PRESETS)} "
                         "(a local checkpoint directory also works)")
    if vocab_size <= 0:
        raise ValueError(f"vocab_size={vocab_size}; must be a positive int (len(tokenizer))")
    spec = dict(PRESETS[preset])
    config_class = spec.pop("config_class")
    return config_class(vocab_size=vocab_size, dtype=dtype, tie_word_embeddings=False,
                        **_special_ids(), **spec)


def build_causal_lm(preset_or_path, vocab_size: int | None = None, seed: int = 0,
                    dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """A LlamaForCausalLM / Qwen2ForCausalLM from a preset name, or a saved checkpoint directory.

    The seed only drives weight initialisation; the global torch RNG is left as it was.
    """
    if _is_local_dir(preset_or_path):
        return AutoModelForCausalLM.from_pretrained(preset_or_path, local_files_only=True, dtype=dtype)
    config = build_config(preset_or_path, _vocab(vocab_size), dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.to(dtype)


def build_value_model(preset_or_path, vocab_size: int | None = None, seed: int = 0,
                      dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """A critic: the same backbone with a one-output token-classification head (a value per token).

    From a causal-LM checkpoint directory the backbone weights are reused and the head is new,
    which is how PPO critics are usually initialised from the policy.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if _is_local_dir(preset_or_path):
            config = AutoConfig.from_pretrained(preset_or_path, local_files_only=True)
            config.num_labels = 1
            model = AutoModelForTokenClassification.from_pretrained(
                preset_or_path, config=config, local_files_only=True, dtype=dtype)
        else:
            config = build_config(preset_or_path, _vocab(vocab_size), dtype)
            config.num_labels = 1
            model = AutoModelForTokenClassification.from_config(config)
    return model.to(dtype)


def value_forward(model: PreTrainedModel, input_ids: torch.Tensor,
                  attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token values [B, T] from a model made by build_value_model."""
    out = model(input_ids=input_ids, attention_mask=attention_mask)
    return out.logits.squeeze(-1)


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _vocab(vocab_size: int | None) -> int:
    # Defaulting to the project tokenizer keeps the common call short: build_causal_lm("llama-tiny").
    return len(build_tokenizer()) if vocab_size is None else vocab_size
