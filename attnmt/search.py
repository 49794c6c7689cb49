"""Decoding: from source ids to output ids, with the attention weights of every step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .decoder import Memory, select
from .model import Seq2Seq
from .vocab import EOS_ID, PAD_ID, SOS_ID


def rows_to_keep(alive: torch.Tensor) -> Optional[torch.Tensor]:
    """The batch entries to go on with once some have ended, or None to keep the batch as it is.

    The live entries, plus as many ended ones as round the batch up to a multiple of 8: batch
    shapes then repeat from batch to batch, and bfloat16 matrix products, whose kernels are
    built and cached per shape, keep hitting the cache.
    """
    live = int(alive.sum())
    size = live if live <= 8 else -(-live // 8) * 8
    if size >= alive.shape[0]:
        return None
    return torch.cat([alive.nonzero().squeeze(1), (~alive).nonzero().squeeze(1)[: size - live]])


@torch.inference_mode()
def greedy(model: Seq2Seq, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor
           ) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """Most likely token at each step, until EOS or the sentence's own `max_lengths` [B].

    Returns ids [B, T] (EOS included where produced, PAD after it), weights [B, T, S]
    (zero after a sentence's EOS; None for attention `none`) and the log-probability of each
    output, EOS included [B]. Ended sentences leave the batch (`rows_to_keep`), so the others
    run on a smaller one.
    """
    memory, state = model.encode(src, src_lengths)
    batch, device = src.shape[0], src.device
    max_lengths = max_lengths.to(device).clamp(min=1)
    steps = int(max_lengths.max())
    ids = torch.full((batch, steps), PAD_ID, dtype=torch.long, device=device)
    weights: Optional[torch.Tensor] = None                                     # [B, T, S] once known
    log_prob = torch.zeros(batch, device=device)
    rows = torch.arange(batch, device=device)                                  # the sentence of each batch row
    alive = torch.ones(batch, dtype=torch.bool, device=device)                 # rows still decoding
    tokens = torch.full((batch, 1), SOS_ID, dtype=torch.long, device=device)
    for t in range(steps):
        logits, state, step_weights = model.decoder.step(tokens, state, memory)
        step_log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)     # [b, V]
        next_tokens = step_log_probs.argmax(-1)                                # [b]
        # A sentence at its length limit ends here, as if it had produced EOS.
        next_tokens = next_tokens.masked_fill(max_lengths[rows] <= t + 1, EOS_ID)
        live_rows = rows[alive]
        log_prob[live_rows] += step_log_probs[alive].gather(1, next_tokens[alive].unsqueeze(1)).squeeze(1)
        ids[live_rows, t] = next_tokens[alive]
        if step_weights is not None:
            if weights is None:
                weights = step_weights.new_zeros(batch, steps, step_weights.shape[-1])
            weights[live_rows, t] = step_weights[alive, -1]
        alive &= next_tokens != EOS_ID
        if not alive.any():
            break
        keep = rows_to_keep(alive)
        if keep is not None:
            rows, alive, next_tokens = rows[keep], alive[keep], next_tokens[keep]
            memory = Memory(*(m.index_select(0, keep) for m in memory))
            state = select(state, keep)
        tokens = next_tokens.unsqueeze(1)
    used = t + 1
    return ids[:, :used], None if weights is None else weights[:, :used], log_prob


@dataclass
class Hypothesis:
    ids: list[int]                       # output ids, without EOS
    log_prob: float                      # sum of the log-probabilities of ids and the final EOS
    score: float                         # log_prob / GNMT length penalty, what the beam ranks by
    attention: Optional[torch.Tensor]    # [len(ids), S] weights of the steps that produced ids


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); alpha 0 ranks by plain log-probability."""
    return ((5.0 + length) / 6.0) ** alpha


def settled(hypotheses: list[Hypothesis], beam_size: int, n_best: int, best_live: float, max_length: int,
            alpha: float) -> bool:
    """Whether a sentence's search can stop: beam_size hypotheses have finished, or none still live can
    enter the n-best.

    A live hypothesis's log-probability only falls as it grows, and the length penalty grows
    with length, so its best reachable score is best_live / lp(max_length).
    """
    if len(hypotheses) >= beam_size:
        return True
    if len(hypotheses) < n_best:
        return False
    nth_best = sorted((h.score for h in hypotheses), reverse=True)[n_best - 1]
    return nth_best >= best_live / length_penalty(max_length, alpha)


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor,
                beam_size: int, alpha: float = 0.0, n_best: int = 1) -> list[list[Hypothesis]]:
    """The `n_best` best hypotheses per sentence, best first, by batched beam search.

    Each sentence keeps `beam_size` live hypotheses. At every step the best 2 x beam_size
    extensions are ranked; an EOS among the first beam_size finishes that hypothesis, the best
    beam_size others live on. A sentence is done when it has beam_size finished hypotheses or
    reaches its max length (where only EOS is allowed), or as soon as no live hypothesis can
    still enter its n-best (`settled`); it then leaves the batch, so the remaining sentences run
    on a smaller one.
    """
    k = beam_size
    memory, state = model.encode(src, src_lengths)
    batch, device = src.shape[0], src.device
    rows = torch.arange(batch, device=device).repeat_interleave(k)                 # [B*K]
    memory = Memory(*(t.index_select(0, rows) for t in memory))
    state = select(state, rows)
    active = torch.arange(batch, device=device)                                    # the sentence of each entry
    done = torch.zeros(batch, dtype=torch.bool, device=device)                     # entries that only pad the batch
    max_lengths = max_lengths.to(device).clamp(min=1)
    scores = torch.full((batch, k), float("-inf"), device=device)                  # [b, K] live log-probs
    scores[:, 0] = 0.0                                                             # one real start per sentence
    tokens = torch.full((batch * k,), SOS_ID, dtype=torch.long, device=device)     # [b*K]
    history = torch.zeros(batch * k, 0, dtype=torch.long, device=device)           # [b*K, t]
    attn_history: Optional[torch.Tensor] = None                                    # [b*K, t, S]
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    for t in range(int(max_lengths.max())):
        logits, state, weights = model.decoder.step(tokens.unsqueeze(1), state, memory)
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)               # [b*K, V]
        vocab = log_probs.shape[-1]
        at_limit = (max_lengths[active] <= t + 1).repeat_interleave(k)             # [b*K]
        if at_limit.any():  # at the length limit only EOS may follow
            eos_only = torch.full_like(log_probs[0], float("-inf"))
            eos_only[EOS_ID] = 0.0
            log_probs = torch.where(at_limit.unsqueeze(1), log_probs + eos_only, log_probs)
        steps_attn = None if weights is None else weights[:, -1]                   # [b*K, S]
        if steps_attn is not None:
            attn_history = (steps_attn.unsqueeze(1) if attn_history is None
                            else torch.cat([attn_history, steps_attn.unsqueeze(1)], dim=1))  # [b*K, t+1, S]

        b = active.shape[0]
        candidates = (scores.unsqueeze(2) + log_probs.view(b, k, vocab)).view(b, k * vocab)  # [b, K*V]
        top_scores, top_ids = candidates.topk(min(2 * k, k * vocab), dim=1)        # [b, 2K]
        from_row = top_ids // vocab + torch.arange(b, device=device).unsqueeze(1) * k  # [b, 2K] rows of b*K
        next_token = top_ids % vocab
        is_eos = (next_token == EOS_ID) & torch.isfinite(top_scores)

        for i, j in (is_eos[:, :k]).nonzero().tolist():  # EOS among the best K: a finished hypothesis
            sentence = int(active[i])
            if done[i] or len(finished[sentence]) >= k:
                continue
            row = int(from_row[i, j])
            ids = history[row].tolist()
            log_prob = float(top_scores[i, j])
            attention = None if attn_history is None else attn_history[row, :-1]
            finished[sentence].append(Hypothesis(ids, log_prob, log_prob / length_penalty(len(ids) + 1, alpha),
                                                 attention))

        live_scores = top_scores.masked_fill(next_token == EOS_ID, float("-inf"))
        scores, pick = live_scores.topk(k, dim=1)                                  # [b, K]
        chosen_rows = from_row.gather(1, pick).view(-1)                            # [b*K]
        tokens = next_token.gather(1, pick).view(-1)
        history = torch.cat([history.index_select(0, chosen_rows), tokens.unsqueeze(1)], dim=1)
        if attn_history is not None:
            attn_history = attn_history.index_select(0, chosen_rows)
        state = select(state, chosen_rows)

        best_live = scores[:, 0].tolist()
        limits = max_lengths[active].tolist()
        done |= torch.tensor([settled(finished[int(s)], k, n_best, live, limit, alpha)
                              for s, live, limit in zip(active.tolist(), best_live, limits)], device=device)
        done |= max_lengths[active] <= t + 1
        if done.all():
            break
        keep = rows_to_keep(~done)
        if keep is not None:  # drop finished sentences from the batch
            keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            active, done, scores = active[keep], done[keep], scores[keep]
            tokens, history = tokens[keep_rows], history[keep_rows]
            attn_history = None if attn_history is None else attn_history.index_select(0, keep_rows)
            memory = Memory(*(m.index_select(0, keep_rows) for m in memory))
            state = select(state, keep_rows)
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]
