"""RL math for the reference trainer: advantages, KL, PPO losses, loss aggregation.

Per-token tensors are ``[B, T]`` with a ``response_mask`` (1 = real response token). Responses are
right-padded, so each row's valid tokens form a prefix. Everything here is plain torch and runs on
whatever device its inputs live on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "AdaptiveKLController",
    "FixedKLController",
    "agg_loss",
    "apply_kl_penalty",
    "compute_gae",
    "compute_grpo_advantages",
    "entropy_from_logits",
    "kl_estimate",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "value_loss",
]

KL_KINDS = ("k1", "k2", "k3", "low_var_kl", "abs")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

# exp() of a log-ratio beyond this overflows float32 or gives a useless gradient; see kl_estimate.
_MAX_LOG_RATIO = 20.0


def _check_same_shape(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} has shape {tuple(a.shape)} but {name_b} has {tuple(b.shape)}; they must match")


def _check_2d(name: str, x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be [B, T], got shape {tuple(x.shape)}")


# --------------------------------------------------------------------------- masked statistics


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is nonzero, over ``dim`` (all elements if None)."""
    _check_same_shape("x", x, "mask", mask)
    prod = x * mask.to(x.dtype)
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over masked elements; a slice with no valid element gives 0, not NaN."""
    count = masked_sum(torch.ones_like(x), mask, dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all masked elements (Bessel-corrected when ``unbiased``)."""
    n = float(mask.to(x.dtype).sum())
    if n == 0:
        raise ValueError("masked_var got a mask with no valid elements; need at least 1 (2 if unbiased)")
    if unbiased and n < 2:
        raise ValueError("masked_var(unbiased=True) got a mask with 1 valid element; need at least 2")
    mean = masked_sum(x, mask) / n
    var = masked_sum((x - mean) ** 2, mask) / n
    return var * (n / (n - 1)) if unbiased else var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``x`` to unit variance over masked elements; masked-out positions come back as 0.

    With ``shift_mean=False`` the original mean is added back, which keeps the sign balance of
    e.g. returns while still rescaling them.
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    # Zeroing padding keeps garbage out of later masked reductions that forget the mask.
    return whitened * mask.to(x.dtype)


# --------------------------------------------------------------------------- advantages


@torch.no_grad()  # advantages and returns are regression/weighting targets: they must not carry grad
def compute_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's valid tokens.

    The value after a row's last valid token is 0 (the episode ends there). Returns
    ``(advantages, returns)`` with ``returns = advantages + values``; padding is 0 in both.
    Advantages are not whitened — the caller does that with ``masked_whiten``.
    """
    _check_2d("token_rewards", token_rewards)
    _check_same_shape("token_rewards", token_rewards, "values", values)
    _check_same_shape("token_rewards", token_rewards, "response_mask", response_mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma} is out of range; accepted: 0 <= gamma <= 1")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam} is out of range; accepted: 0 <= lam <= 1")
    mask = response_mask.to(values.dtype)
    if (mask[:, 1:] > mask[:, :-1]).any():
        # The backward recursion relies on valid tokens being a prefix of each row.
        raise ValueError("response_mask is not right-padded (a 1 follows a 0 in some row); accepted: 1...1 0...0")

    batch, length = values.shape
    advantages = torch.zeros_like(values)
    last_gae = torch.zeros(batch, dtype=values.dtype, device=values.device)
    for t in reversed(range(length)):
        next_value = values[:, t + 1] * mask[:, t + 1] if t + 1 < length else torch.zeros_like(last_gae)
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        # Multiplying by mask[t] resets the carry on padding, so the last valid token starts fresh.
        last_gae = (delta + gamma * lam * last_gae) * mask[:, t]
        advantages[:, t] = last_gae
    returns = (advantages + values) * mask
    return advantages, returns


def _group_index(group_ids: Any, batch: int, device: torch.device) -> torch.Tensor:
    """Map arbitrary hashable group ids to dense ints 0..G-1, in order of first appearance."""
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1:
            raise ValueError(f"group_ids must be 1-D, got shape {tuple(group_ids.shape)}")
        ids: Sequence[Any] = group_ids.tolist()
    elif isinstance(group_ids, np.ndarray):
        if group_ids.ndim != 1:
            raise ValueError(f"group_ids must be 1-D, got shape {group_ids.shape}")
        ids = group_ids.tolist()  # numpy scalars -> Python values, so equal ids hash equal
    elif isinstance(group_ids, (list, tuple)):
        ids = group_ids
    else:
        raise ValueError(f"group_ids has type {type(group_ids).__name__}; accepted: LongTensor[B], np.ndarray, list")
    if len(ids) != batch:
        raise ValueError(f"group_ids has {len(ids)} entries but scores has {batch}; they must match")
    dense: dict[Any, int] = {}
    index = [dense.setdefault(g, len(dense)) for g in ids]
    return torch.tensor(index, dtype=torch.long, device=device)


@torch.no_grad()
def compute_grpo_advantages(
    scores: torch.Tensor,
    group_ids: Any,
    response_mask: torch.Tensor,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages: ``(score - group mean) / (group std + eps)`` on every valid token.

    ``group_ids`` marks responses to the same prompt (a LongTensor, or an array/list of hashables
    such as uid strings). The std is the unbiased sample std. A group of size 1 gets advantage 0:
    with a single sample there is nothing to compare against, so no relative signal exists (and
    the sample std is undefined). Returns ``(advantages, returns)``, equal because GRPO has no
    critic (separate tensors, so a caller may edit one without the other).
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D [B], got shape {tuple(scores.shape)}")
    _check_2d("response_mask", response_mask)
    if response_mask.shape[0] != scores.shape[0]:
        raise ValueError(f"response_mask has {response_mask.shape[0]} rows but scores has {scores.shape[0]}")
    if eps < 0:
        raise ValueError(f"eps={eps} is negative; accepted: eps >= 0")

    scores = scores.float() if not scores.is_floating_point() else scores
    index = _group_index(group_ids, scores.shape[0], scores.device)
    n_groups = int(index.max()) + 1 if index.numel() else 0
    zeros = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
    counts = zeros.index_add(0, index, torch.ones_like(scores))
    means = zeros.index_add(0, index, scores) / counts
    centered = scores - means[index]
    if norm_by_std:
        sq = zeros.index_add(0, index, centered**2)
        std = torch.sqrt(sq / (counts - 1).clamp(min=1))
        denom = std[index] + eps
        # A constant group with eps=0 would be 0/0; its centred scores are exactly 0, so keep them.
        centered = centered / torch.where(denom > 0, denom, torch.ones_like(denom))
    adv_per_row = torch.where(counts[index] > 1, centered, torch.zeros_like(centered))
    advantages = adv_per_row[:, None] * response_mask.to(scores.dtype)
    return advantages, advantages.clone()


# --------------------------------------------------------------------------- KL


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || ref) from sampled-token log-probs.

    kinds: ``k1`` = logp - ref (unbiased, high variance, can be negative); ``k2`` = 0.5 (logp-ref)^2;
    ``k3``/``low_var_kl`` = exp(ref-logp) - (ref-logp) - 1 (unbiased, >= 0, low variance), clamped
    to [-10, 10]; ``abs`` = |logp - ref|.
    """
    _check_same_shape("logp", logp, "ref_logp", ref_logp)
    diff = logp - ref_logp
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    if kind in ("k3", "low_var_kl"):
        # Clamp the exponent first: exp() of a huge log-ratio is inf in float32 and the clamp below
        # would then back-propagate 0 * inf = NaN.
        log_ratio = (-diff).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10.0, 10.0)
    if kind == "abs":
        return diff.abs()
    raise ValueError(f"unknown KL kind {kind!r}; accepted: {', '.join(KL_KINDS)}")


@torch.no_grad()  # the penalty shapes rewards, which are constants for the advantage computation
def apply_kl_penalty(
    scores: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    response_mask: torch.Tensor,
    coef: float,
    kind: str = "k1",
) -> tuple[torch.Tensor, float]:
    """Token rewards ``-coef * kl`` on valid tokens, plus each row's score on its last valid token.

    Returns ``(token_rewards [B, T], mean_kl)`` where ``mean_kl`` is the mean KL per valid token
    over the whole batch (what a KL controller consumes).
    """
    _check_2d("logp", logp)
    _check_same_shape("logp", logp, "response_mask", response_mask)
    if scores.dim() != 1 or scores.shape[0] != logp.shape[0]:
        raise ValueError(f"scores must be [B]=[{logp.shape[0]}], got shape {tuple(scores.shape)}")
    mask = response_mask.to(logp.dtype)
    lengths = mask.sum(dim=-1).long()
    if (lengths == 0).any():
        # The score would have nowhere to go and silently vanish.
        empty = torch.nonzero(lengths == 0).flatten().tolist()
        raise ValueError(f"rows {empty} have no valid response token; each row needs at least 1 to carry its score")
    kl = kl_estimate(logp, ref_logp, kind) * mask
    rewards = -coef * kl
    rows = torch.arange(logp.shape[0], device=logp.device)
    rewards[rows, lengths - 1] += scores.to(rewards.dtype)
    return rewards, float(masked_mean(kl, mask))


# --------------------------------------------------------------------------- loss aggregation


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    global_denominator: float | int | torch.Tensor | None = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar so that gradients don't depend on DP size.

    Modes:
      ``token-mean``           sum over all valid tokens / number of valid tokens.
      ``seq-mean-token-mean``  each sequence's token mean, then mean over sequences.
      ``seq-mean-token-sum``   each sequence's token sum, then mean over sequences.

    Why the denominator is global: with data parallelism each rank holds part of the mini-batch and
    gradients are averaged across ranks (all-reduce sum / ``dp_size``). If each rank divided by its
    *local* token count, ranks holding few (short) tokens would weigh as much as ranks holding many,
    and the result would change with how the batch was split. Instead pass ``global_denominator`` =
    the total number of valid tokens (``token-mean``) or of non-empty sequences (``seq-*`` modes)
    across all ranks of the mini-batch; the local loss is then ``sum(...) / global_denominator *
    dp_size``, and after the ``/ dp_size`` average the gradient equals the single-process
    full-batch gradient. The same holds for gradient accumulation over micro-batches with
    ``dp_size=1``. Without ``global_denominator`` the local count is used, which is only correct for
    ``dp_size == 1``.
    """
    _check_2d("loss_mat", loss_mat)
    _check_same_shape("loss_mat", loss_mat, "mask", mask)
    if mode not in AGG_MODES:
        raise ValueError(f"unknown agg mode {mode!r}; accepted: {', '.join(AGG_MODES)}")
    if not isinstance(dp_size, int) or isinstance(dp_size, bool) or dp_size < 1:
        raise ValueError(f"dp_size={dp_size!r} is invalid; accepted: an int >= 1")
    if global_denominator is None and dp_size != 1:
        raise ValueError(
            f"dp_size={dp_size} needs global_denominator (total valid tokens/sequences across ranks); "
            "accepted: global_denominator given, or dp_size=1"
        )
    if global_denominator is not None and float(global_denominator) <= 0:
        raise ValueError(f"global_denominator={global_denominator!r} is invalid; accepted: a number > 0")

    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        numerator = masked_sum(loss_mat, m)
        local_count = m.sum()
    else:
        tokens_per_seq = m.sum(dim=-1)
        seq_sum = masked_sum(loss_mat, m, dim=-1)
        per_seq = seq_sum / tokens_per_seq.clamp(min=1) if mode == "seq-mean-token-mean" else seq_sum
        # Rows with no valid token are padding rows, not sequences: they neither add nor count.
        numerator = per_seq.sum()
        local_count = (tokens_per_seq > 0).to(loss_mat.dtype).sum()

    if global_denominator is None:
        # An all-padding shard contributes 0 rather than NaN.
        return numerator / local_count.clamp(min=1)
    return numerator / global_denominator * dp_size


# --------------------------------------------------------------------------- PPO losses


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    global_denominator: float | int | torch.Tensor | None = None,
    dp_size: int = 1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with ratio range ``[1 - clip_low, 1 + clip_high]``.

    ``dual_clip_c`` (> 1) additionally caps the loss of negative-advantage tokens at
    ``dual_clip_c * |A|``, so a huge ratio on a bad token cannot blow up the update.
    Returns ``(loss, stats)``; stats hold ``clipfrac``, ``approx_kl`` (mean of old - new logp),
    ``ratio_mean`` and ``dual_clipfrac``, all masked token means over the local batch.
    """
    _check_2d("logp", logp)
    for name, t in (("old_logp", old_logp), ("advantages", advantages), ("response_mask", response_mask)):
        _check_same_shape("logp", logp, name, t)
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low={clip_low} is out of range; accepted: 0 <= clip_low < 1")
    if clip_high < 0.0:
        raise ValueError(f"clip_high={clip_high} is negative; accepted: clip_high >= 0")
    if dual_clip_c is not None and not dual_clip_c > 1.0:
        raise ValueError(f"dual_clip_c={dual_clip_c} is invalid; accepted: None or a number > 1")

    mask = response_mask.to(logp.dtype)
    # Clamped so a stale or padded position cannot produce inf ratios (and NaN gradients).
    log_ratio = (logp - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)
    dual_hit = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip_c is not None:
        cap = -advantages * dual_clip_c  # = c * |A| where A < 0
        dual_hit = (advantages < 0) & (loss_mat > cap)
        loss_mat = torch.where(advantages < 0, torch.minimum(loss_mat, cap), loss_mat)

    loss = agg_loss(loss_mat, mask, agg_mode, global_denominator, dp_size)
    with torch.no_grad():
        stats = {
            "clipfrac": float(masked_mean((clipped > unclipped).to(mask.dtype), mask)),
            "approx_kl": float(masked_mean(old_logp - logp, mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
            "dual_clipfrac": float(masked_mean(dual_hit.to(mask.dtype), mask)),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    clip_range: float | None = 0.2,
    agg_mode: str = "token-mean",
    global_denominator: float | int | torch.Tensor | None = None,
    dp_size: int = 1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss ``0.5 * max((v - R)^2, (clip(v, old ± clip_range) - R)^2)``.

    ``clip_range=None`` disables clipping. stats: ``vf_clipfrac`` = share of tokens where the
    clipped term is the larger one.
    """
    _check_2d("values", values)
    for name, t in (("old_values", old_values), ("returns", returns), ("response_mask", response_mask)):
        _check_same_shape("values", values, name, t)
    if clip_range is not None and clip_range < 0:
        raise ValueError(f"clip_range={clip_range} is negative; accepted: None or a number >= 0")

    mask = response_mask.to(values.dtype)
    loss_unclipped = (values - returns).square()
    if clip_range is None:
        loss_mat = 0.5 * loss_unclipped
        clip_hit = torch.zeros_like(mask)
    else:
        v_clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        loss_clipped = (v_clipped - returns).square()
        loss_mat = 0.5 * torch.maximum(loss_unclipped, loss_clipped)
        clip_hit = (loss_clipped > loss_unclipped).to(mask.dtype)
    loss = agg_loss(loss_mat, mask, agg_mode, global_denominator, dp_size)
    return loss, {"vf_clipfrac": float(masked_mean(clip_hit.detach(), mask))}


# --------------------------------------------------------------------------- logits helpers


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: ``logsumexp(z) - sum(p * z)``; ``[B,T,V] -> [B,T]``."""
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last (vocab) dim, got shape {tuple(logits.shape)}")
    # Shift by the max first: with logits near 1000, float32 logsumexp(z) - sum(p z) subtracts two
    # numbers ~1000 and loses ~1e-4 absolute; after the shift both terms are O(log V).
    shifted = logits - logits.amax(dim=-1, keepdim=True).detach()
    probs = torch.softmax(shifted, dim=-1)
    return torch.logsumexp(shifted, dim=-1) - (probs * shifted).sum(dim=-1)


CHUNK_ELEMENTS = 1 << 24   # logits handled at once by logprobs_from_logits: 64 MiB in float32


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, chunk_rows: int | None = None) -> torch.Tensor:
    """Log-prob of ``labels`` under ``logits``; ``[B,T,V], [B,T] -> [B,T]``.

    Works ``chunk_rows`` rows at a time (by default as many as fit in CHUNK_ELEMENTS) and keeps
    only the label's logit plus a logsumexp, so no full ``[B,T,V]`` log_softmax is ever held for a
    large vocabulary, while a small one is not split into per-row kernel launches. The result is
    at least float32: bf16 log-probs are too coarse for PPO ratios.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)}; accepted: logits.shape[:-1] = {tuple(logits.shape[:-1])}"
        )
    if chunk_rows is None:
        chunk_rows = max(1, CHUNK_ELEMENTS // max(1, logits.shape[1] * logits.shape[2]))
    elif chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} is invalid; accepted: an int >= 1")
    compute_dtype = torch.promote_types(logits.dtype, torch.float32)
    out = []
    for part, part_labels in zip(logits.split(chunk_rows), labels.split(chunk_rows)):
        part = part.to(compute_dtype)
        # Subtracting the max keeps both terms O(log V); otherwise z[label] - logsumexp(z) cancels
        # two large numbers and float32 loses ~1e-4 at logits near 1000.
        part = part - part.amax(dim=-1, keepdim=True).detach()
        picked = part.gather(-1, part_labels.long().unsqueeze(-1)).squeeze(-1)
        out.append(picked - torch.logsumexp(part, dim=-1))
    return torch.cat(out, dim=0)


# --------------------------------------------------------------------------- KL controllers


class FixedKLController:
    """KL coefficient that never changes."""

    def __init__(self, coef: float) -> None:
        if coef < 0:
            raise ValueError(f"coef={coef} is negative; accepted: coef >= 0")
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op, so trainers can call ``update`` regardless of controller type."""


class AdaptiveKLController:
    """Proportional controller steering measured KL toward ``target`` (Ziegler et al., 2019).

    Each update multiplies the coefficient by ``1 + e * n_steps / horizon`` where
    ``e = clip(current_kl / target - 1, -0.2, 0.2)``; the clip keeps one noisy estimate from
    swinging the coefficient.
    """

    def __init__(self, init_coef: float, target: float, horizon: float) -> None:
        if init_coef < 0:
            raise ValueError(f"init_coef={init_coef} is negative; accepted: init_coef >= 0")
        if target <= 0:
            raise ValueError(f"target={target} is invalid; accepted: target > 0")
        if horizon <= 0:
            raise ValueError(f"horizon={horizon} is invalid; accepted: horizon > 0")
        self.value = float(init_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjust ``value`` after ``n_steps`` samples at measured KL ``current_kl``."""
        if n_steps < 0:
            raise ValueError(f"n_steps={n_steps} is negative; accepted: n_steps >= 0")
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
