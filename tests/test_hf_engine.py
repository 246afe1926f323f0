"""The HF rollout engine's own sampling loop against transformers' generate() and the model's
own probabilities: same greedy continuation, same sampling distribution, shared prompt prefill."""
from __future__ import annotations

import copy

import torch

from reference_trainer.engines.base import SamplingConfig
from reference_trainer.engines.hf import HFEngine, _sample
from reference_trainer.tasks import build_causal_lm, build_tokenizer

TOK = build_tokenizer()


def _engine(seed: int = 0) -> HFEngine:
    model = build_causal_lm("llama-tiny", len(TOK), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a rougher random init than the model's, so continuations differ between prompts
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return HFEngine(copy.deepcopy(model), TOK.pad_token_id, TOK.eos_token_id)


def _prompts(texts: list[str]):
    enc = TOK(texts, padding=True, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def test_greedy_matches_transformers_generate_with_left_padding_and_repeats():
    engine = _engine()
    ids, mask = _prompts(["1 2 + 3 =", "7 =", "1 2 + 3 =", "9 9 + 1 =", "7 =", "4 + 4 + 4 ="])
    ref = engine.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=6,
                                pad_token_id=TOK.pad_token_id, eos_token_id=TOK.eos_token_id)[:, ids.shape[1]:]
    ref = torch.nn.functional.pad(ref, (0, 6 - ref.shape[1]), value=TOK.pad_token_id)
    ours = engine.generate(ids, mask, SamplingConfig(6, temperature=1e-6))
    assert len({tuple(r) for r in ref.tolist()}) > 1, "the check needs prompts with different continuations"
    assert torch.equal(ours, ref)


def test_rows_after_eos_are_padding():
    engine = _engine(seed=3)
    ids, mask = _prompts(["1 =", "2 3 =", "4 5 6 ="] * 20)
    out = engine.generate(ids, mask, SamplingConfig(5, temperature=3.0))
    eos = out == TOK.eos_token_id
    after_first_eos = (eos.long().cumsum(-1) - eos.long()) > 0
    assert eos.any(), "the check needs some rows that end"
    assert (out[after_first_eos] == TOK.pad_token_id).all()


def test_sampled_first_tokens_follow_the_model_distribution():
    torch.manual_seed(0)
    engine = _engine(seed=1)
    with torch.no_grad():
        engine.model.lm_head.weight.div_(8)  # a spread-out distribution over the vocabulary
    ids, mask = _prompts(["3 + 4 ="] * 20000)
    with torch.no_grad():
        probs = torch.softmax(engine.model(input_ids=ids[:1], attention_mask=mask[:1]).logits[0, -1] / 0.7, -1)
    first = engine.generate(ids, mask, SamplingConfig(1, temperature=0.7))[:, 0]
    freq = torch.bincount(first, minlength=len(probs)).double() / len(first)
    assert probs.max() < 0.5, "the check needs a spread-out distribution"
    # 20k draws: each frequency is within 4 standard errors of its probability.
    se = (probs.double() * (1 - probs.double()) / len(first)).sqrt()
    assert ((freq - probs.double()).abs() <= 4 * se + 1e-4).all(), (freq, probs)


def test_top_p_keeps_the_smallest_set_reaching_p():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(20000, 1)
    draws = _sample(logits, 1.0, top_p=0.75)
    freq = torch.bincount(draws, minlength=4).double() / len(draws)
    assert freq[2] == 0 and freq[3] == 0
    assert abs(freq[0] - 0.625) < 0.02 and abs(freq[1] - 0.375) < 0.02
