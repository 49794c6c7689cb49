"""Attention: score every source position against a query, softmax over the real ones, mix.

For a query q (the decoder's state) and the encoder's outputs h_1 .. h_S:
    e_j = score(q, h_j)                        how well source position j matches the query
    α_j = exp(e_j) / Σ_k exp(e_k)              the attention weights, over real positions only
    c   = Σ_j α_j h_j                          the context vector the decoder reads
Bahdanau et al. (2015) score with a small feed-forward net (AdditiveAttention), Luong et al.
(2015) also with products: dot qᵀh_j, general qᵀ W h_j, and concat (additive with a bias). All of
these are global: every real source position may be attended. Luong's local attention
(LocalAttention) lets each query attend only a window of positions around a centre p_t.

Every kind follows one protocol:
    keys = attention.project_keys(memory)          # once per sentence: [B, S, K] -> [B, S, A]
    context, weights = attention(query, keys, values, mask, positions)
with query [B, T, Q], values [B, S, V] (the encoder outputs h), mask [B, S] (True = real token),
positions [B, T] the target position t of each query, from 1 (read by local attention only, given
when `needs_positions`); context is [B, T, V] and weights [B, T, S]. T is 1 when decoding step by step and the whole
target when the decoder can attend for all steps at once. Nothing is stored on the module
between calls, so one model can serve concurrent requests.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from ...seam import Probe


class Attention(nn.Module):
    """Masked softmax over scores, then the weighted sum of values; subclasses give the scores."""

    returns_weights = True   # False for the baseline without attention
    needs_positions = False  # True for local attention: the decoder passes each query's target position
    formula = ""             # the score as the model computes it, for learners (attnmt explain)

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def span(self, query: torch.Tensor, mask: torch.Tensor, positions: Optional[torch.Tensor]
             ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Where each query may attend, [B, T or 1, S], and a factor for the weights there ([B, T, S];
        None: 1). Global attention: every real source position, unscaled."""
        return mask[:, None, :], None

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        positions: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        scores = self.score(query, keys)                             # [B, T, S]  e_j
        allowed, factor = self.span(query, mask, positions)
        scores = scores.masked_fill(~allowed, float("-inf"))         # pads: exp(-inf) = exactly 0
        weights = torch.softmax(scores, dim=-1)                      # [B, T, S]  α_j
        if factor is not None:
            weights = weights * factor
        context = torch.bmm(weights, values)                         # [B, T, V]  c = Σ α_j h_j
        return context, weights


class AdditiveAttention(Attention):
    """Bahdanau's score, also Luong's `concat`: score(q, h_j) = vᵀ tanh(W_q q + W_k h_j).

    W_k h_j is computed once per sentence (`project_keys`); Bahdanau's W_q has no bias, concat's
    W_a [q; h_j] + b does (its W_q part carries b). fast_attention.py computes the same weights faster.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, bias: bool):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)          # W_k
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=bias)       # W_q (+ b)
        self.v = nn.Linear(attn_dim, 1, bias=False)                       # vᵀ
        self.formula = "vᵀ tanh(W_q q + W_k h_j" + (" + b)" if bias else ")")

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.key_proj(memory)                                      # [B, S, A] = W_k h

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.query_proj(query)                                        # [B, T, A] = W_q q
        hidden = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1))           # [B, T, S, A]
        return self.v(hidden).squeeze(-1)                                 # [B, T, S]


class DotAttention(Attention):
    """Luong `dot`: score = qᵀ h (query and encoder outputs of the same width)."""

    formula = "q · h_j"

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return torch.bmm(query, keys.transpose(1, 2))                # [B, T, S]


class ScaledDotAttention(DotAttention):
    """Scaled dot product (the Transformer's score, Vaswani et al. 2017): score = qᵀ h / √d, which keeps
    the scores' spread from growing with the width d."""

    formula = "q · h_j / √d"

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super().score(query, keys) / math.sqrt(query.shape[-1])   # [B, T, S]


class GeneralAttention(DotAttention):
    """Luong `general`: score = qᵀ W h, with W h computed once per sentence."""

    formula = "q · W h_j"

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.key_proj(memory)                                 # [B, S, Q]


class LocalAttention(Attention):
    """Luong's local attention (§3.2): the score of a global kind (dot, general or concat) inside
    the window [p_t - D, p_t + D] of source positions, weight exactly 0 outside it.

    Positions are numbered from 1 as in the paper: source s = 1 .. S (S the sentence's real length),
    target t = 1, 2, ...
      local-m (monotonic): p_t = t, the softmax over the window. p_t is capped at S, so a target
        longer than its source still attends the source's end (the paper leaves that case open).
      local-p (predictive): p_t = S · sigmoid(v_pᵀ tanh(W_p q)), and the softmax over the window is
        multiplied by exp(-(s - p_t)² / 2σ²), σ = D/2, favouring positions near p_t (the weights then
        sum to less than 1, as in the paper).
    """

    needs_positions = True

    def __init__(self, scorer: Attention, half_width: int, predictive: bool, query_dim: int, attn_dim: int):
        super().__init__()
        self.scorer = scorer                # the score inside the window
        self.half_width = half_width        # D
        self.predictive = predictive
        if predictive:
            self.position_proj = nn.Linear(query_dim, attn_dim, bias=False)   # W_p
            self.position_v = nn.Linear(attn_dim, 1, bias=False)              # v_pᵀ
        centre = "p_t = S · sigmoid(v_pᵀ tanh(W_p q)), Gaussian σ = D/2" if predictive else "p_t = t"
        self.formula = f"{scorer.formula} for |j - p_t| ≤ {half_width}, else excluded ({centre})"

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.scorer.project_keys(memory)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.scorer.score(query, keys)

    def centres(self, query: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """p_t [B, T], float32."""
        lengths = mask.sum(-1, keepdim=True).float()                                  # [B, 1] = S
        if self.predictive:
            fraction = torch.sigmoid(self.position_v(torch.tanh(self.position_proj(query)))).squeeze(-1)
            return lengths * fraction.float()                                         # [B, T]
        return torch.minimum(positions.float(), lengths)                              # [B, T]

    def span(self, query: torch.Tensor, mask: torch.Tensor, positions: Optional[torch.Tensor]
             ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        if positions is None:
            raise ValueError("local attention needs the target positions of its queries")
        source = torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=torch.float32)  # [S] = s
        distance = source - self.centres(query, mask, positions).unsqueeze(-1)                 # [B, T, S]
        allowed = (distance.abs() <= self.half_width) & mask[:, None, :]
        if not self.predictive:
            return allowed, None
        sigma = self.half_width / 2
        return allowed, torch.exp(-distance.square() / (2 * sigma * sigma)).to(query.dtype)


class NoAttention(Attention):
    """The plain seq2seq baseline: an empty context, so the decoder sees only its own state."""

    returns_weights = False

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory[..., :0]                                       # [B, S, 0]

    def forward(self, query, keys, values, mask, positions=None):
        return values.new_zeros(query.shape[0], query.shape[1], 0), None  # [B, T, 0]


class AttentionProbe(nn.Module):
    """An attention module as attnmt explain runs it: the same scores, its numbers kept by `probe`
    (and the weights uniform while `probe.uniform` is set)."""

    returns_weights = True

    def __init__(self, attention: Attention, probe: Probe):
        super().__init__()
        self.attention, self.probe = attention, probe

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.attention.project_keys(memory)

    @property
    def needs_positions(self) -> bool:
        return self.attention.needs_positions

    @property
    def formula(self) -> str:
        return self.attention.formula

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                positions: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.attention.score(query, keys).unsqueeze(1)                   # [B, 1, T, S], one "head"
        allowed, factor = self.attention.span(query, mask, positions)
        weights = self.probe.weigh(scores, allowed.unsqueeze(1), values.unsqueeze(1), record=True, over_source=True,
                                   factor=None if factor is None else factor.unsqueeze(1)).squeeze(1)  # [B, T, S]
        return torch.bmm(weights, values), weights


# The global scores by the name model.attention (and model.local_score) gives them: query, key and
# additive-layer widths and the additive scores' class -> the module and the width of its context.
# RNNConfig's choices name the same kinds (the config loads without torch); a test holds the two together.
GLOBAL_SCORES: dict[str, Callable[[int, int, int, type[AdditiveAttention]], tuple[Attention, int]]] = {
    "bahdanau": lambda query_dim, key_dim, attn_dim, additive: (additive(query_dim, key_dim, attn_dim, bias=False), key_dim),
    "concat": lambda query_dim, key_dim, attn_dim, additive: (additive(query_dim, key_dim, attn_dim, bias=True), key_dim),
    "dot": lambda query_dim, key_dim, attn_dim, additive: (DotAttention(), key_dim),
    "scaled_dot": lambda query_dim, key_dim, attn_dim, additive: (ScaledDotAttention(), key_dim),
    "general": lambda query_dim, key_dim, attn_dim, additive: (GeneralAttention(query_dim, key_dim), key_dim),
    "none": lambda query_dim, key_dim, attn_dim, additive: (NoAttention(), 0),
}


def make_attention(kind: str, query_dim: int, key_dim: int, attn_dim: int, local_score: str = "general",
                   local_window: int = 10, additive: type[AdditiveAttention] = AdditiveAttention) -> tuple[Attention, int]:
    """The attention module and the width of the context it returns; `additive`: the class of the
    additive scores (a fast path's, or the reference)."""
    if kind in ("local_m", "local_p"):
        scorer, width = make_attention(local_score, query_dim, key_dim, attn_dim, additive=additive)
        return LocalAttention(scorer, local_window, kind == "local_p", query_dim, attn_dim), width
    if kind not in GLOBAL_SCORES:
        raise ValueError(f"unknown attention kind {kind!r}")
    return GLOBAL_SCORES[kind](query_dim, key_dim, attn_dim, additive)
