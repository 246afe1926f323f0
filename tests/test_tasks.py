"""Tokenizer, tiny model presets, value model and the built-in verifiable tasks."""

import numpy as np
import pytest
import torch

from reference_trainer.tasks import (
    PRESETS, TASKS, build_causal_lm, build_tokenizer, build_value_model, count_params, get_task,
    load_tokenizer, value_forward,
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


# --- tokenizer -------------------------------------------------------------------------------------

def test_prompt_is_one_token_per_word_plus_bos(tok):
    assert tok.tokenize("3 1 4 =") == ["3", "1", "4", "="]
    ids = tok("3 1 4 =").input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == 5
    assert tok("3 1 4 =", add_special_tokens=False).input_ids == ids[1:]
    assert tok.unk_token_id not in ids


def test_decode_round_trips_and_skips_specials(tok):
    ids = tok("3 1 4 = 4 2 5").input_ids + [tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "3 1 4 = 4 2 5"
    assert tok.decode(ids) == "<bos> 3 1 4 = 4 2 5 <eos> <pad>"


def test_special_ids_are_distinct(tok):
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4


def test_left_padding_for_batched_prompts(tok):
    batch = tok(["3 1 =", "3 1 4 5 ="], padding=True, return_tensors="pt")
    assert batch.input_ids.shape == (2, 6)
    assert batch.input_ids[0, :2].tolist() == [tok.pad_token_id] * 2
    assert batch.attention_mask[0].tolist() == [0, 0, 1, 1, 1, 1]
    right = build_tokenizer(padding_side="right")(["3 1 =", "3 1 4 5 ="], padding=True).input_ids
    assert right[0][-2:] == [tok.pad_token_id] * 2


def test_bad_padding_side_names_the_choices():
    with pytest.raises(ValueError, match="'left', 'right'"):
        build_tokenizer(padding_side="middle")


def test_tokenizer_save_load_round_trip(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded("3 1 4 =").input_ids == tok("3 1 4 =").input_ids
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (
        tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    assert loaded.padding_side == "left"
    assert load_tokenizer(tmp_path, padding_side="right").padding_side == "right"


def test_load_tokenizer_rejects_non_directory(tmp_path):
    with pytest.raises(ValueError, match="not a local directory"):
        load_tokenizer(tmp_path / "missing")


# --- models ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset,lo,hi,arch", [
    ("llama-tiny", 0.5e6, 1e6, "LlamaForCausalLM"),
    ("qwen2-tiny", 0.5e6, 1e6, "Qwen2ForCausalLM"),
    ("llama-small", 20e6, 30e6, "LlamaForCausalLM"),
])
def test_preset_builds_with_expected_size(tok, preset, lo, hi, arch):
    model = build_causal_lm(preset, len(tok), seed=0)
    assert type(model).__name__ == arch
    assert lo <= count_params(model) <= hi
    assert (model.config.pad_token_id, model.config.bos_token_id, model.config.eos_token_id) == (
        tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)


def test_presets_are_all_tested():
    assert set(PRESETS) == {"llama-tiny", "qwen2-tiny", "llama-small"}


def test_same_seed_same_weights_and_global_rng_untouched(tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_causal_lm("llama-tiny", len(tok), seed=7)
    assert torch.equal(torch.rand(3), expected)
    b = build_causal_lm("llama-tiny", len(tok), seed=7)
    c = build_causal_lm("llama-tiny", len(tok), seed=8)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_dtype_is_applied(tok):
    model = build_causal_lm("llama-tiny", len(tok), dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_unknown_preset_lists_presets_and_mentions_directories(tok):
    with pytest.raises(ValueError, match=r"llama-tiny.*local checkpoint directory"):
        build_causal_lm("gpt-huge", len(tok))


@pytest.mark.parametrize("preset", ["llama-tiny", "qwen2-tiny"])
def test_value_model_gives_one_value_per_token(tok, preset):
    critic = build_value_model(preset, len(tok), seed=0)
    batch = tok(["3 1 =", "3 1 4 5 ="], padding=True, return_tensors="pt")
    values = value_forward(critic, batch.input_ids, batch.attention_mask)
    assert values.shape == batch.input_ids.shape
    assert values.dtype == torch.float32 and torch.isfinite(values).all()


def test_local_checkpoint_dir_loads_back(tok, tmp_path):
    model = build_causal_lm("qwen2-tiny", len(tok), seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)

    loaded = build_causal_lm(str(tmp_path))
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    ids = load_tokenizer(tmp_path)("3 1 4 =", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits)

    critic = build_value_model(tmp_path)  # a PathLike works too; the backbone comes from the checkpoint
    assert torch.equal(critic.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert value_forward(critic, ids).shape == ids.shape


# --- tasks -----------------------------------------------------------------------------------------

def test_registry_has_digit_shift():
    assert "digit_shift" in TASKS
    assert get_task("digit_shift").name == "digit_shift"


def test_unknown_task_lists_known_tasks():
    with pytest.raises(ValueError, match=r"unknown task 'sudoku'.*digit_shift"):
        get_task("sudoku")


def test_unknown_task_parameter_lists_accepted():
    with pytest.raises(ValueError, match=r"\['digits'\].*n_digits"):
        get_task("digit_shift", digits=3)


@pytest.mark.parametrize("params", [dict(n_digits=0), dict(n_digits="3"), dict(shift=0), dict(shift=10)])
def test_bad_task_parameters(params):
    with pytest.raises(ValueError, match="accepted"):
        get_task("digit_shift", **params)


def test_prompts_are_deterministic_given_seed_and_tokenize_cleanly(tok):
    task = get_task("digit_shift", n_digits=4, shift=3)
    a = task.make_prompts(20, np.random.default_rng(5))
    assert a == task.make_prompts(20, np.random.default_rng(5))
    assert a != task.make_prompts(20, np.random.default_rng(6))
    for prompt, answer in a:
        words = prompt.split()
        assert len(words) == 5 and words[-1] == "="
        assert answer.split() == [str((int(d) + 3) % 10) for d in words[:-1]]
        assert tok.unk_token_id not in tok(prompt + " " + answer).input_ids


def test_answer_example_from_docs():
    task = get_task("digit_shift", n_digits=3, shift=1)
    assert task.score("4 2 5", "4 2 5") == 1.0


@pytest.mark.parametrize("response,expected", [
    ("4 2 5", 1.0),                 # exact
    ("4 2 5 <eos>", 1.0),           # decoded without skip_special_tokens
    ("4 2 5 <eos> 9 9 <pad>", 1.0),  # anything after <eos> is not part of the answer
    ("4 0 5", 2 / 3),               # one position wrong
    ("4 2", 2 / 3),                 # too short
    ("4 7 7", 1 / 3),
    ("4 2 5 5", 3 / 4),             # extra tokens dilute the credit
    ("4 2 5 5 5 5", 1 / 2),
    ("= = =", 0.0),                 # garbage
    ("copy add", 0.0),
    ("", 0.0),                      # empty
    ("<eos>", 0.0),
])
def test_score_partial_credit(response, expected):
    task = get_task("digit_shift", n_digits=3, shift=1)
    assert task.score(response, "4 2 5") == pytest.approx(expected)


def test_sft_examples_teach_format_not_answers():
    task = get_task("digit_shift", n_digits=3)
    examples = task.sft_examples(200, np.random.default_rng(0))
    assert examples == task.sft_examples(200, np.random.default_rng(0))
    assert all(len(t.split()) == 3 and all(w.isdigit() for w in t.split()) for _, t in examples)
    # Random targets: the mean score of a perfect imitator stays near chance (0.1 per digit).
    truths = dict(task.make_prompts(200, np.random.default_rng(0)))
    mean = np.mean([task.score(t, truths[p]) for p, t in examples])
    assert mean < 0.25


def test_count_up_prompts_and_answers():
    task = get_task("count_up", length=4, step=3)
    prompts = task.make_prompts(10, np.random.default_rng(1))
    assert prompts == task.make_prompts(10, np.random.default_rng(1))
    for prompt, answer in prompts:
        start = int(prompt.split()[0])
        assert prompt == f"{start} ="
        assert answer.split() == [str((start + 3 * k) % 10) for k in range(1, 5)]


@pytest.mark.parametrize("response,expected", [
    ("8 9 0 1", 1.0),        # exact
    ("8 9 0 1 <eos> 3", 1.0),
    ("8 5 0 1", 3 / 4),      # one position wrong
    ("8 5 6 7", 1 / 4),      # counting on from a slip earns nothing: answers must match the prompt
    ("8 9", 2 / 4),          # too short
    ("8 9 0 1 2", 4 / 5),    # extra words dilute
    ("8 = 0 1", 3 / 4),
    ("1 2 1 2", 0.0),        # a prompt-independent pattern
    ("copy", 0.0),
    ("", 0.0),
])
def test_count_up_score_partial_credit(response, expected):
    assert get_task("count_up").score(response, "8 9 0 1") == pytest.approx(expected)
