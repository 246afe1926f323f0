"""Tests for reference_trainer.algos; expected numbers are worked out by hand in the comments."""

import math

import numpy as np
import pytest
import torch

from reference_trainer import algos


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# --------------------------------------------------------------------------- masked statistics


def test_masked_stats_ignore_padding():
    x = t([[1.0, 3.0, 5.0, 100.0]])
    m = t([[1, 1, 1, 0]])
    # sum 1+3+5 = 9; mean 3; squared deviations 4,0,4 -> biased 8/3, unbiased 8/2 = 4
    assert algos.masked_sum(x, m).item() == pytest.approx(9.0)
    assert algos.masked_mean(x, m).item() == pytest.approx(3.0)
    assert algos.masked_var(x, m, unbiased=False).item() == pytest.approx(8 / 3)
    assert algos.masked_var(x, m).item() == pytest.approx(4.0)
    # whiten: (x - 3) / 2 -> -1, 0, 1; padding forced to 0; shift_mean=False adds 3 back -> 2, 3, 4
    torch.testing.assert_close(algos.masked_whiten(x, m), t([[-1.0, 0.0, 1.0, 0.0]]))
    torch.testing.assert_close(algos.masked_whiten(x, m, shift_mean=False), t([[2.0, 3.0, 4.0, 0.0]]))


def test_masked_mean_per_row_with_empty_row_is_zero():
    x = t([[2.0, 4.0], [7.0, 9.0]])
    m = t([[1, 1], [0, 0]])
    # row 0: (2+4)/2 = 3; row 1 has no valid token -> 0 rather than NaN
    torch.testing.assert_close(algos.masked_mean(x, m, dim=-1), t([3.0, 0.0]))


def test_masked_var_rejects_too_few_elements():
    with pytest.raises(ValueError, match="1 valid element"):
        algos.masked_var(t([[1.0, 2.0]]), t([[1, 0]]))


# --------------------------------------------------------------------------- GAE


def test_gae_single_row():
    r = t([[0.0, 0.0, 1.0]])
    v = t([[0.5, 0.6, 0.7]])
    m = t([[1, 1, 1]])
    # gamma=0.9, lam=0.8, gamma*lam = 0.72, value after the last token = 0
    # t=2: delta = 1 + 0 - 0.7 = 0.3;             A2 = 0.3
    # t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03;      A1 = 0.03 + 0.72*0.3   = 0.246
    # t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04;      A0 = 0.04 + 0.72*0.246 = 0.21712
    # returns = A + v = 0.71712, 0.846, 1.0
    adv, ret = algos.compute_gae(r, v, m, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, t([[0.21712, 0.246, 0.3]]))
    torch.testing.assert_close(ret, t([[0.71712, 0.846, 1.0]]))


def test_gae_batch_with_padding_ignores_garbage_in_pad():
    r = t([[0.0, 0.0, 1.0], [0.0, 2.0, 9.0]])  # 9.0 and 7.0 below sit on padding
    v = t([[0.5, 0.6, 0.7], [1.0, 0.5, 7.0]])
    m = t([[1, 1, 1], [1, 1, 0]])
    # row 0 as in test_gae_single_row.
    # row 1, last valid token t=1: delta = 2 + 0 - 0.5 = 1.5; A1 = 1.5
    #        t=0: delta = 0 + 0.9*0.5 - 1.0 = -0.55;         A0 = -0.55 + 0.72*1.5 = 0.53
    #        returns: 0.53 + 1.0 = 1.53, 1.5 + 0.5 = 2.0, pad 0
    adv, ret = algos.compute_gae(r, v, m, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, t([[0.21712, 0.246, 0.3], [0.53, 1.5, 0.0]]))
    torch.testing.assert_close(ret, t([[0.71712, 0.846, 1.0], [1.53, 2.0, 0.0]]))
    assert not adv.requires_grad


def test_gae_rejects_left_padding_and_bad_gamma():
    z = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="right-padded"):
        algos.compute_gae(z, z, torch.tensor([[0, 1, 1]]), gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match="gamma=1.5"):
        algos.compute_gae(z, z, torch.ones(1, 3), gamma=1.5, lam=1.0)


# --------------------------------------------------------------------------- GRPO


def test_grpo_groups_including_singleton():
    scores = t([1.0, 0.0, 1.0, 0.0, 5.0, 2.0, 4.0])
    groups = np.array(["a", "a", "a", "a", "b", "c", "c"], dtype=object)
    mask = t([[1, 1], [1, 0], [1, 1], [1, 1], [1, 1], [1, 1], [1, 0]])
    # group a: mean 0.5, unbiased std = sqrt(4 * 0.25 / 3) = 0.5773503 -> +-0.5/0.5773503 = +-0.8660254
    # group b: size 1 -> 0
    # group c: mean 3, unbiased std = sqrt((1 + 1) / 1) = 1.4142136 -> -+1/1.4142136 = -+0.7071068
    # (eps = 1e-6 moves these by < 1e-6 relative)
    a, c = 0.8660254, 0.7071068
    expected = t([[a, a], [-a, 0], [a, a], [-a, -a], [0, 0], [-c, -c], [c, 0]])
    adv, ret = algos.compute_grpo_advantages(scores, groups, mask)
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret, adv)


def test_grpo_tensor_ids_without_std():
    scores = t([1.0, 0.0, 2.0, 4.0, 7.0])
    groups = torch.tensor([3, 3, 9, 9, 5])
    mask = torch.ones(5, 1)
    # group 3: mean 0.5 -> 0.5, -0.5; group 9: mean 3 -> -1, 1; group 5 is a singleton -> 0
    adv, _ = algos.compute_grpo_advantages(scores, groups, mask, norm_by_std=False)
    torch.testing.assert_close(adv, t([[0.5], [-0.5], [-1.0], [1.0], [0.0]]))


def test_grpo_constant_group_is_zero_even_with_zero_eps():
    adv, _ = algos.compute_grpo_advantages(t([2.0, 2.0]), torch.tensor([0, 0]), torch.ones(2, 1), eps=0.0)
    torch.testing.assert_close(adv, t([[0.0], [0.0]]))


def test_grpo_rejects_mismatched_group_ids():
    with pytest.raises(ValueError, match="group_ids has 2 entries"):
        algos.compute_grpo_advantages(t([1.0, 2.0, 3.0]), torch.tensor([0, 0]), torch.ones(3, 1))


# --------------------------------------------------------------------------- KL


@pytest.mark.parametrize(
    "logp, ref, expected",
    [
        # logp - ref = 0.5: k1 0.5; k2 0.5*0.25 = 0.125; k3 with r = ref-logp = -0.5:
        # exp(-0.5) + 0.5 - 1 = 0.6065307 - 0.5 = 0.1065307; abs 0.5
        (-1.0, -1.5, {"k1": 0.5, "k2": 0.125, "k3": 0.1065307, "low_var_kl": 0.1065307, "abs": 0.5}),
        # logp - ref = -1: k1 -1; k2 0.5; k3 with r = 1: e - 1 - 1 = 0.7182818; abs 1
        (-2.0, -1.0, {"k1": -1.0, "k2": 0.5, "k3": 0.7182818, "low_var_kl": 0.7182818, "abs": 1.0}),
    ],
)
def test_kl_kinds_on_scalars(logp, ref, expected):
    for kind, value in expected.items():
        got = algos.kl_estimate(t([[logp]]), t([[ref]]), kind)
        assert got.item() == pytest.approx(value, abs=1e-6), kind


def test_k3_is_clamped_and_has_finite_gradient():
    logp = torch.tensor([[-60.0]], requires_grad=True)
    # ref - logp = 60: exp(60) is far above 10, so the value is clamped to 10
    kl = algos.kl_estimate(logp, torch.tensor([[0.0]]), "k3")
    assert kl.item() == 10.0
    kl.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_unknown_kl_kind():
    with pytest.raises(ValueError, match="accepted: k1, k2, k3, low_var_kl, abs"):
        algos.kl_estimate(t([[0.0]]), t([[0.0]]), "k4")


def test_apply_kl_penalty_puts_score_on_last_valid_token():
    scores = t([1.0, -2.0])
    logp = t([[-1.0, -1.0, -1.0], [-2.0, -2.0, 5.0]])
    ref = t([[-1.5, -1.0, -1.0], [-1.0, -2.0, 0.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    # k1 = logp - ref: row 0 -> 0.5, 0, 0; row 1 -> -1, 0, (pad)
    # rewards = -0.1 * kl: row 0 -> -0.05, 0, 0 + score 1 at t=2; row 1 -> 0.1, 0 + score -2 at t=1, 0
    # mean kl over the 5 valid tokens = (0.5 - 1) / 5 = -0.1
    rewards, mean_kl = algos.apply_kl_penalty(scores, logp, ref, mask, coef=0.1)
    torch.testing.assert_close(rewards, t([[-0.05, 0.0, 1.0], [0.1, -2.0, 0.0]]))
    assert mean_kl == pytest.approx(-0.1)


def test_apply_kl_penalty_rejects_empty_row():
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        algos.apply_kl_penalty(t([1.0, 2.0]), torch.zeros(2, 2), torch.zeros(2, 2), t([[1, 0], [0, 0]]), 0.1)


# --------------------------------------------------------------------------- policy loss


def _logp_for(ratios):
    """logp with old_logp = 0, so that ratio = exp(logp - old_logp) is exactly ``ratios``."""
    logp = torch.log(t(ratios)).requires_grad_(True)
    return logp, torch.zeros_like(logp, requires_grad=False)


def test_policy_loss_symmetric_clip():
    ratios = [[1.5, 0.5, 50.0], [0.5, 1.5, 50.0]]  # last column is padding with a wild ratio
    logp, old = _logp_for(ratios)
    adv = t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = t([[1, 1, 0], [1, 1, 0]])
    # loss per token = max(-A r, -A clip(r, 0.8, 1.2)):
    #   r=1.5, A=+1: max(-1.5, -1.2) = -1.2 (clipped)
    #   r=0.5, A=+1: max(-0.5, -0.8) = -0.5
    #   r=0.5, A=-1: max( 0.5,  0.8) =  0.8 (clipped)
    #   r=1.5, A=-1: max( 1.5,  1.2) =  1.5
    # token-mean = (-1.2 - 0.5 + 0.8 + 1.5) / 4 = 0.15; clipfrac = 2/4
    # approx_kl = mean(-log r) = -(2 ln 1.5 + 2 ln 0.5) / 4 = -ln(0.75) / 2 = 0.1438410
    # ratio_mean = (1.5 + 0.5 + 0.5 + 1.5) / 4 = 1.0
    loss, stats = algos.policy_loss(logp, old, adv, mask)
    assert loss.item() == pytest.approx(0.15)
    assert stats["clipfrac"] == pytest.approx(0.5)
    assert stats["approx_kl"] == pytest.approx(0.1438410, abs=1e-6)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    # gradient flows only through the unclipped tokens: d(-A r)/dlogp / 4 = -A r / 4
    loss.backward()
    torch.testing.assert_close(logp.grad, t([[0.0, -0.125, 0.0], [0.0, 0.375, 0.0]]))


def test_policy_loss_asymmetric_clip():
    logp, old = _logp_for([[1.25, 1.5, 0.75]])
    adv = t([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    # range [0.8, 1.28]:
    #   r=1.25, A=+1: inside the range -> -1.25 (a symmetric 0.2 clip would give -1.2)
    #   r=1.5,  A=+1: max(-1.5, -1.28) = -1.28 (clipped high)
    #   r=0.75, A=-1: max(0.75, 0.8)   =  0.8  (clipped low)
    # mean = (-1.25 - 1.28 + 0.8) / 3 = -0.5766667; clipfrac 2/3
    loss, stats = algos.policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.73 / 3)
    assert stats["clipfrac"] == pytest.approx(2 / 3)


def test_policy_loss_dual_clip():
    logp, old = _logp_for([[5.0, 2.0, 5.0]])
    adv = t([[-1.0, -2.0, 1.0]])
    mask = torch.ones(1, 3)
    # r=5, A=-1: max(5, 1.2) = 5, capped at 3*1 = 3
    # r=2, A=-2: max(4, 2.4) = 4, cap 3*2 = 6 -> 4
    # r=5, A=+1: max(-5, -1.2) = -1.2 (no dual clip for A > 0)
    # with dual clip: (3 + 4 - 1.2) / 3 = 1.9333333; without: (5 + 4 - 1.2) / 3 = 2.6
    loss, stats = algos.policy_loss(logp, old, adv, mask, dual_clip_c=3.0)
    assert loss.item() == pytest.approx(5.8 / 3)
    assert stats["dual_clipfrac"] == pytest.approx(1 / 3)
    loss.backward()
    # only token 2 is live: d(-A r)/dlogp / 3 = 2 * 2 / 3
    torch.testing.assert_close(logp.grad, t([[0.0, 4 / 3, 0.0]]))
    plain, _ = algos.policy_loss(logp.detach(), old, adv, mask)
    assert plain.item() == pytest.approx(2.6)


@pytest.mark.parametrize(
    "kwargs, match", [({"dual_clip_c": 1.0}, "dual_clip_c=1.0"), ({"clip_low": 1.0}, "clip_low=1.0")]
)
def test_policy_loss_rejects_bad_clip(kwargs, match):
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=match):
        algos.policy_loss(z, z, z, torch.ones(1, 2), **kwargs)


# --------------------------------------------------------------------------- value loss


def test_value_loss_clipping():
    values = t([[1.0, 0.0, 2.0, 99.0]])
    old = t([[0.5, 0.1, 1.0, 0.0]])
    returns = t([[1.0, 1.0, 0.0, 0.0]])
    mask = t([[1, 1, 1, 0]])
    # eps 0.2:
    #   v=1,   old=0.5, R=1: unclipped 0; v_clip = 0.7 -> 0.09; max 0.09 (clipped) -> 0.045
    #   v=0,   old=0.1, R=1: unclipped 1; v_clip = 0.0 -> 1;    not clipped      -> 0.5
    #   v=2,   old=1,   R=0: unclipped 4; v_clip = 1.2 -> 1.44; max 4            -> 2.0
    # mean = 2.545 / 3 = 0.8483333; vf_clipfrac = 1/3
    loss, stats = algos.value_loss(values, old, returns, mask, clip_range=0.2)
    assert loss.item() == pytest.approx(2.545 / 3)
    assert stats["vf_clipfrac"] == pytest.approx(1 / 3)
    # without clipping: 0.5 * (0 + 1 + 4) / 3 = 0.8333333
    unclipped, stats = algos.value_loss(values, old, returns, mask, clip_range=None)
    assert unclipped.item() == pytest.approx(2.5 / 3)
    assert stats["vf_clipfrac"] == 0.0


# --------------------------------------------------------------------------- logits helpers


def test_entropy_uniform_and_skewed_and_large_logits():
    uniform = torch.zeros(2, 3, 5)
    torch.testing.assert_close(algos.entropy_from_logits(uniform), torch.full((2, 3), math.log(5)))
    # p = (1/4, 3/4): H = 0.25 ln 4 + 0.75 ln(4/3) = 0.3465736 + 0.2157616 = 0.5623351
    skewed = t([[[0.0, math.log(3.0)]]])
    assert algos.entropy_from_logits(skewed).item() == pytest.approx(0.5623351, abs=1e-7)
    # a naive exp() would overflow here; the answer is still ln 2
    big = torch.full((1, 1, 2), 1000.0)
    assert algos.entropy_from_logits(big).item() == pytest.approx(math.log(2), abs=1e-6)


def test_logprobs_hand_value_and_match_distributions():
    # logits (0, ln 3): p = (1/4, 3/4); label 1 -> ln 0.75 = -0.2876821
    lp = algos.logprobs_from_logits(t([[[0.0, math.log(3.0)]]]), torch.tensor([[1]]))
    assert lp.item() == pytest.approx(-0.2876821, abs=1e-7)

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=gen, dtype=torch.float64) * 5
    labels = torch.randint(0, 11, (3, 4), generator=gen)
    expected = torch.distributions.Categorical(logits=logits).log_prob(labels)
    torch.testing.assert_close(algos.logprobs_from_logits(logits, labels), expected)
    torch.testing.assert_close(algos.logprobs_from_logits(logits, labels, chunk_rows=2), expected)
    torch.testing.assert_close(algos.logprobs_from_logits(logits, labels, chunk_rows=1), expected)


def test_logprobs_stay_accurate_for_large_float32_logits():
    # logits (1000, 1001) behave like (0, 1): label 0 -> -ln(1 + e) = -ln 3.7182818 = -1.3132617
    logits = torch.tensor([[[1000.0, 1001.0]]], dtype=torch.float32)
    assert algos.logprobs_from_logits(logits, torch.tensor([[0]])).item() == pytest.approx(-1.3132617, abs=1e-6)
    # bf16 input comes back as float32
    assert algos.logprobs_from_logits(logits.bfloat16(), torch.tensor([[0]])).dtype == torch.float32


def test_logprobs_rejects_label_shape():
    with pytest.raises(ValueError, match="labels has shape"):
        algos.logprobs_from_logits(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))


# --------------------------------------------------------------------------- loss aggregation


def test_agg_loss_modes_by_hand():
    loss = t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [8.0, 8.0, 8.0]])
    mask = t([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # row 2 is an all-padding row
    # token-mean: (1+2+3+4) / 4 = 2.5
    # seq-mean-token-mean: (mean(1,2,3) + 4) / 2 sequences = (2 + 4) / 2 = 3
    # seq-mean-token-sum: (6 + 4) / 2 = 5
    assert algos.agg_loss(loss, mask, "token-mean").item() == pytest.approx(2.5)
    assert algos.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert algos.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(5.0)
    # global denominator 8 on a rank of a dp_size=2 group: 10 / 8 * 2 = 2.5
    assert algos.agg_loss(loss, mask, global_denominator=8, dp_size=2).item() == pytest.approx(2.5)


def _dp_batch():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 6, 3, generator=gen, dtype=torch.float64)
    lengths = [6, 1, 4, 2, 0]  # uneven rows, plus one all-padding row
    mask = (torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]).double()
    return x, mask


def _grad(w0, x, mask, mode, **kw):
    w = w0.clone().requires_grad_(True)
    loss_mat = torch.tanh(x @ w) + (x @ w) ** 2  # any non-linear per-token loss
    algos.agg_loss(loss_mat, mask, mode, **kw).backward()
    return w.grad


@pytest.mark.parametrize("mode", algos.AGG_MODES)
def test_agg_loss_gradient_is_invariant_to_dp_split(mode):
    x, mask = _dp_batch()
    w0 = torch.tensor([0.3, -0.7, 1.1], dtype=torch.float64)
    full = _grad(w0, x, mask, mode)

    # rank 0 gets rows 0-2 (11 tokens, 3 sequences), rank 1 rows 3-4 (2 tokens, 1 non-empty sequence)
    shards = [slice(0, 3), slice(3, 5)]
    total_tokens = int(mask.sum())  # 13
    total_seqs = int((mask.sum(-1) > 0).sum())  # 4
    denom = total_tokens if mode == "token-mean" else total_seqs
    rank_grads = [_grad(w0, x[s], mask[s], mode, global_denominator=denom, dp_size=2) for s in shards]
    all_reduced = sum(rank_grads) / 2  # what DDP/FSDP does: sum over ranks, divide by world size
    torch.testing.assert_close(all_reduced, full)

    # the naive local-mean version is biased towards the small shard, which is what we guard against
    naive = sum(_grad(w0, x[s], mask[s], mode) for s in shards) / 2
    assert not torch.allclose(naive, full)


def test_agg_loss_errors():
    loss, mask = torch.zeros(1, 2), torch.ones(1, 2)
    with pytest.raises(ValueError, match="dp_size=2 needs global_denominator"):
        algos.agg_loss(loss, mask, dp_size=2)
    with pytest.raises(ValueError, match="unknown agg mode 'seq-sum'"):
        algos.agg_loss(loss, mask, "seq-sum")
    with pytest.raises(ValueError, match="global_denominator=0"):
        algos.agg_loss(loss, mask, global_denominator=0)


# --------------------------------------------------------------------------- KL controllers


def test_kl_controllers():
    fixed = algos.FixedKLController(0.05)
    fixed.update(current_kl=100.0, n_steps=256)
    assert fixed.value == 0.05

    ctl = algos.AdaptiveKLController(init_coef=0.1, target=6.0, horizon=10000)
    # kl 9 -> error 9/6 - 1 = 0.5, clipped to 0.2; factor 1 + 0.2 * 1000 / 10000 = 1.02 -> 0.102
    ctl.update(current_kl=9.0, n_steps=1000)
    assert ctl.value == pytest.approx(0.102)
    # kl 5.4 -> error -0.1; factor 1 - 0.1 * 2000 / 10000 = 0.98 -> 0.102 * 0.98 = 0.09996
    ctl.update(current_kl=5.4, n_steps=2000)
    assert ctl.value == pytest.approx(0.09996)
    with pytest.raises(ValueError, match="target=0"):
        algos.AdaptiveKLController(0.1, target=0, horizon=10)
