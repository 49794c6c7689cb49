"""Decoding: from source ids to output ids, with the attention weights of every step.

Both searches run their sentences through one batch of at most `batch_size` sentences
(`DecodingBatch`): when a sentence ends, a waiting one takes over its rows, so the batch stays full
instead of thinning out to the last long sentence of every group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .seam import Model, Rows
from .vocab import EOS_ID, SOS_ID

# A model's step for one token: (prev_tokens [B, 1], state, memory) -> (logits [B, 1, V], state,
# weights [B, 1, S] or None). The searches take any such step, e.g. a compiled one (compiled.py).
Step = Callable[[torch.Tensor, Rows, Rows], tuple[torch.Tensor, Rows, Optional[torch.Tensor]]]

# (x [b, n], k) -> the k highest entries of each row and their positions, as torch.topk(dim=1).
TopK = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def reference_top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k highest entries of each row of x [b, n] and their positions, highest first."""
    return x.topk(k, dim=1)


def block_top_k(x: torch.Tensor, k: int, block: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast path of reference_top_k (tests/test_fast.py checks it against it): x.topk(k, dim=1) for a wide
    x [b, n], through block maxima: the same values, and positions up to ties.

    On CPUs topk and argmax are slow scalar passes while amax is vectorized, so: the maximum of
    every block of `block` entries, the k blocks with the highest maxima (they hold the k highest
    entries: each of those lies in a block whose maximum is at least as high), then topk over
    those k blocks' entries only.
    """
    b, n = x.shape
    blocks = n // block
    if blocks < 4 * k:
        return reference_top_k(x, k)
    maxima = x[:, : blocks * block].view(b, blocks, block).amax(2)             # [b, blocks]
    if blocks * block < n:                                                     # the short last block
        maxima = torch.cat([maxima, x[:, blocks * block :].amax(1, keepdim=True)], dim=1)
    best_blocks = maxima.topk(k, dim=1).indices                                # [b, k]
    positions = (best_blocks.unsqueeze(2) * block + torch.arange(block, device=x.device)).view(b, -1)  # [b, k*block]
    outside = positions >= n                                                   # past the short last block
    positions.clamp_(max=n - 1)
    values = x.gather(1, positions).masked_fill_(outside, float("-inf"))
    top_values, top = values.topk(k, dim=1)                                    # [b, k]
    return top_values, positions.gather(1, top)


def top_k(enabled: bool = True) -> TopK:
    """The searches' top-k: block_top_k (decode.fast_paths), or torch.topk itself."""
    return block_top_k if enabled else reference_top_k


@dataclass(frozen=True)
class Symbols:
    """The tokens (ids of the target vocabulary) every output starts from and ends with, and those it
    never writes: their log-probability is -inf after the softmax at every step, as Hugging Face's
    bad_words_ids does it (decode.never_generate)."""

    start: int = SOS_ID
    end: int = EOS_ID
    never: tuple[int, ...] = ()

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Each row's log-probabilities [b, V], in float32, those of the tokens never written -inf."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        if self.never:
            log_probs[:, list(self.never)] = float("-inf")
        return log_probs


@dataclass
class Hypothesis:
    ids: list[int]                       # output ids, without EOS
    log_prob: float                      # sum of the log-probabilities of ids and the final EOS
    score: float                         # log_prob with the length penalty, what the beam ranks by
    attention: Optional[torch.Tensor]    # [len(ids), source length] weights of the steps that produced ids


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016); alpha 0 ranks by plain log-probability."""
    return ((5.0 + length) / 6.0) ** alpha


class GNMTScoring:
    """GNMT's beam rules (decode.beam_scoring gnmt, attnmt's default): a finished hypothesis scores log P / GNMT's
    length penalty; the first beam_size to finish are kept; a sentence is done once no live hypothesis
    can still enter its n-best."""

    @staticmethod
    def score(log_prob: float, length: int, alpha: float) -> float:
        """The score of a finished hypothesis of `length` tokens, its end included."""
        return log_prob / length_penalty(length, alpha)

    @staticmethod
    def keep(finished: list[Hypothesis], hypothesis: Hypothesis, beam_size: int) -> None:
        if len(finished) < beam_size:
            finished.append(hypothesis)

    @staticmethod
    def settled(finished: list[Hypothesis], beam_size: int, n_best: int, best_live: float, produced: int,
                max_length: int, alpha: float) -> bool:
        """Whether a sentence's search can stop: beam_size hypotheses have finished, or none still live
        can enter the n-best. A live hypothesis's log-probability only falls as it grows, and the length
        penalty grows with length, so its best reachable score is best_live / lp(max_length)."""
        if len(finished) >= beam_size:
            return True
        if len(finished) < n_best:
            return False
        nth_best = sorted((h.score for h in finished), reverse=True)[n_best - 1]
        return nth_best >= best_live / length_penalty(max_length, alpha)


class LengthPowerScoring:
    """Scores divided by a power of the length (decode.beam_scoring length_power; transformers' generate
    with early_stopping false): a finished hypothesis scores log P / |Y|^alpha; the best beam_size finished
    are kept; a sentence is done once beam_size have finished and the best live one, scored at its length so
    far, is no better than the worst kept (a heuristic: a longer live hypothesis might still have beaten it)."""

    @staticmethod
    def score(log_prob: float, length: int, alpha: float) -> float:
        return log_prob / length ** alpha

    @staticmethod
    def keep(finished: list[Hypothesis], hypothesis: Hypothesis, beam_size: int) -> None:
        finished.append(hypothesis)
        finished.sort(key=lambda h: -h.score)                   # stable: of equal scores, the earlier stays
        del finished[beam_size:]

    @staticmethod
    def settled(finished: list[Hypothesis], beam_size: int, n_best: int, best_live: float, produced: int,
                max_length: int, alpha: float) -> bool:
        if len(finished) < beam_size:
            return False
        return not best_live / max(produced, 1) ** alpha > min(h.score for h in finished)


class LengthPowerEarlyScoring(LengthPowerScoring):
    """LengthPowerScoring's scores, stopped early (decode.beam_scoring length_power_early; generate with
    early_stopping true): a sentence is done as soon as beam_size hypotheses have finished, however good
    the live ones still are (CTranslate2's rule too, with its patience 1): fewer steps."""

    @staticmethod
    def settled(finished: list[Hypothesis], beam_size: int, n_best: int, best_live: float, produced: int,
                max_length: int, alpha: float) -> bool:
        return len(finished) >= beam_size


SCORINGS: dict[str, type[GNMTScoring] | type[LengthPowerScoring]] = {
    "gnmt": GNMTScoring, "length_power": LengthPowerScoring, "length_power_early": LengthPowerEarlyScoring}


@dataclass(frozen=True)
class SearchSettings:
    """How one search runs (greedy, or beam search for beam_size > 1): what a caller asks for
    (TextTranslator.settings chooses the config's where it says nothing), and the engine's parts (its
    end tokens, top-k and decoder step)."""

    beam_size: int = 1                  # hypotheses kept per sentence; 1: greedy
    alpha: float = 0.0                  # the length penalty's exponent (beam search)
    n_best: int = 1                     # hypotheses returned per sentence, best first; at most beam_size
    scoring: str = "gnmt"               # how beam search scores and finishes hypotheses: SCORINGS' keys
    batch_size: Optional[int] = None    # sentences decoded at once (None: all)
    symbols: Symbols = Symbols()        # the start and end tokens, and those never written
    top_k: TopK = block_top_k           # torch.topk, or its fast path
    step: Optional[Step] = None         # replaces the model's decoder step (a compiled one); None: the model's


def rows_to_keep(live: torch.Tensor) -> Optional[torch.Tensor]:
    """The batch slots to go on with once some have ended, or None to keep the batch as it is.

    The live slots, plus as many ended ones as round the batch up to a multiple of 8: batch
    shapes then repeat, and bfloat16 matrix products, whose kernels are built and cached per
    shape, keep hitting the cache.
    """
    count = int(live.sum())
    size = count if count <= 8 else -(-count // 8) * 8
    if size >= live.shape[0]:
        return None
    return torch.cat([live.nonzero().squeeze(1), (~live).nonzero().squeeze(1)[: size - count]])


class DecodingBatch:
    """The sentences being decoded, `beam_size` rows each (one per live hypothesis: K below), and those waiting.

    Sentences join in the order given (longest first is best: similar lengths share the batch,
    and the memory narrows as they get shorter), encoded `batch_size` at a time. Once an eighth
    of the slots hold ended sentences, waiting sentences take them over; when none wait, ended
    sentences leave the batch (`rows_to_keep`). Per row it keeps the decoder's memory and state,
    the next input token, the log-probability so far and the tokens and attention weights since
    the row's sentence joined. Each step runs the settings' step (default: the model's own step).
    """

    def __init__(self, model: Model, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor,
                 settings: SearchSettings):
        self.model, self.beam_size, self.start = model, settings.beam_size, settings.symbols.start
        self.step = settings.step or model.step
        self.src, self.lengths = src, src_lengths.to(src.device)
        self.max_lengths = max_lengths.to(src.device).clamp(min=1)
        self.batch_size = settings.batch_size or src.shape[0]
        self.encoded = 0                                  # sentences encoded so far
        self.pool: Optional[tuple[torch.Tensor, Rows, Rows]] = None  # encoded, not yet joined
        sentences, memory, state = self._take(self.batch_size)
        slots, device = sentences.shape[0], src.device
        rows = torch.arange(slots, device=device).repeat_interleave(self.beam_size)
        self.memory = memory.select(rows)                                  # b*K rows
        self.state = state.select(rows)
        self.sentence = sentences                                         # [b] the sentence in each slot
        self.live = torch.ones(slots, dtype=torch.bool, device=device)    # [b] slots whose sentence decodes
        self.first = torch.zeros(slots, dtype=torch.long, device=device)  # [b] history column of its first token
        self.scores = self._start_scores(slots)                           # [b, K] log-probability of each row
        self.tokens = torch.full((slots * self.beam_size,), self.start, dtype=torch.long, device=device)  # [b*K] next input
        self.history = torch.zeros(slots * self.beam_size, 0, dtype=torch.long, device=device)       # [b*K, w] outputs
        # [b*K, w, S] weights, from the first step that returns them (none for a model without attention)
        self.attention: Optional[torch.Tensor] = None

    def _start_scores(self, slots: int) -> torch.Tensor:
        scores = torch.full((slots, self.beam_size), float("-inf"), device=self.src.device)
        scores[:, 0] = 0.0                            # one real start per sentence, not K copies of it
        return scores

    def _waiting(self) -> bool:
        return self.pool is not None or self.encoded < self.src.shape[0]

    def _take(self, count: int) -> tuple[torch.Tensor, Rows, Rows]:
        """Up to `count` waiting sentences, encoded: their indices [n], memory and first decoder state."""
        if self.pool is None:
            start, end = self.encoded, min(self.encoded + self.batch_size, self.src.shape[0])
            lengths = self.lengths[start:end]
            memory, state = self.model.encode(self.src[start:end, : int(lengths.max())], lengths)
            self.pool = (torch.arange(start, end, device=self.src.device), memory, state)
            self.encoded = end
        sentences, memory, state = self.pool
        n = min(count, sentences.shape[0])
        self.pool = None
        if n < sentences.shape[0]:
            self.pool = (sentences[n:], memory.slice(n), state.slice(n))
        return sentences[:n], memory.slice(0, n), state.slice(0, n)

    def decoding(self) -> bool:
        return bool(self.live.any())

    def decode(self) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One decoder step for every row: logits [b*K, V] and attention weights [b*K, S] (None for `none`)."""
        logits, self.state, weights = self.step(self.tokens.unsqueeze(1), self.state, self.memory)
        if weights is not None and self.attention is None:       # the first step: none kept yet
            self.attention = weights.new_zeros(*self.history.shape, self.memory.length, dtype=self.memory.dtype)
        return logits[:, -1], None if weights is None else weights[:, -1]

    def at_limit(self) -> torch.Tensor:
        """[b*K] True for rows whose next token is their sentence's last (its max length)."""
        return (self.max_lengths[self.sentence] <= self.produced() + 1).repeat_interleave(self.beam_size)

    def produced(self) -> torch.Tensor:
        """[b] the tokens each slot's rows have written so far."""
        return self.history.shape[1] - self.first

    def hypothesis(self, row: int, log_prob: float) -> Hypothesis:
        """The tokens of `row` so far, ended here by EOS of total log-probability `log_prob` (its score
        that too: beam search applies its length penalty)."""
        slot = row // self.beam_size
        first, sentence = int(self.first[slot]), int(self.sentence[slot])
        ids = self.history[row, first:].tolist()
        attention = None
        if self.attention is not None:
            attention = self.attention[row, first:, : int(self.lengths[sentence])].clone()
        return Hypothesis(ids, log_prob, log_prob, attention)

    def choose(self, rows: Optional[torch.Tensor], tokens: torch.Tensor, scores: torch.Tensor,
               weights: Optional[torch.Tensor]) -> None:
        """Extend the rows `rows` [b*K] (None: each row itself) by `tokens` [b*K]; their log-probabilities
        are now `scores` [b, K]."""
        history = self.history if rows is None else self.history.index_select(0, rows)
        self.history = torch.cat([history, tokens.unsqueeze(1)], dim=1)       # [b*K, w+1]
        if self.attention is not None:
            assert weights is not None, "a model that returns attention returns it at every step"
            attention = self.attention if rows is None else self.attention.index_select(0, rows)
            weights = weights if rows is None else weights.index_select(0, rows)
            self.attention = torch.cat([attention, weights.unsqueeze(1).to(attention.dtype)], dim=1)  # [b*K, w+1, S]
        if rows is not None:
            self.state = self.state.reorder(rows)
        self.tokens, self.scores = tokens, scores

    def retire(self, ended: torch.Tensor) -> None:
        """Mark the slots `ended` [b] as done; refill or shrink the batch."""
        self.live &= ~ended
        if self._waiting():
            if int((~self.live).sum()) < max(1, self.live.shape[0] // 8):
                return
            self._refill()
        else:
            keep = rows_to_keep(self.live)
            if keep is None:
                return
            self._keep(keep)
        if self.live.any():
            self._fit()

    def _fit(self) -> None:
        """Cut what no live sentence uses: history from before the oldest joined, and source
        positions past the longest (once they are an eighth of the memory)."""
        start = int(self.first[self.live].min())
        self.history = self.history[:, start:]
        self.attention = None if self.attention is None else self.attention[:, start:]
        self.first -= start
        longest = int(self.lengths[self.sentence[self.live]].max())
        if longest <= self.memory.length * 7 // 8:
            self.memory = self.memory.narrow(longest)
            self.attention = None if self.attention is None else self.attention[..., :longest]

    def _rows(self, slots: torch.Tensor) -> torch.Tensor:
        return (slots.unsqueeze(1) * self.beam_size + torch.arange(self.beam_size, device=slots.device)).view(-1)

    def _keep(self, slots: torch.Tensor) -> None:
        rows = self._rows(slots)
        self.sentence, self.live, self.first, self.scores = (
            self.sentence[slots], self.live[slots], self.first[slots], self.scores[slots])
        self.tokens, self.history = self.tokens[rows], self.history[rows]
        self.attention = None if self.attention is None else self.attention.index_select(0, rows)
        self.memory = self.memory.select(rows)
        self.state = self.state.select(rows)

    def _refill(self) -> None:
        """Waiting sentences take over the slots of ended ones, in place."""
        free = (~self.live).nonzero().squeeze(1)
        while free.numel() and self._waiting():
            sentences, memory, state = self._take(free.shape[0])
            slots, free = free[: sentences.shape[0]], free[sentences.shape[0]:]
            self._put(slots, sentences, memory, state)

    def _put(self, slots: torch.Tensor, sentences: torch.Tensor, memory: Rows, state: Rows) -> None:
        rows = self._rows(slots)
        source_rows = torch.arange(slots.shape[0], device=slots.device).repeat_interleave(self.beam_size)
        if memory.length > self.memory.length:
            self._widen(memory.length)
        self.memory.put(rows, memory.select(source_rows))
        self.state.put(rows, state.select(source_rows))
        self.sentence[slots] = sentences
        self.live[slots] = True
        self.first[slots] = self.history.shape[1]
        self.scores[slots] = self._start_scores(slots.shape[0])
        self.tokens[rows] = self.start

    def _widen(self, length: int) -> None:
        """Pad the memory (and the attention history) to `length` source positions."""
        if self.attention is not None:
            self.attention = F.pad(self.attention, (0, length - self.memory.length))
        self.memory = self.memory.pad(length)


@torch.inference_mode()
def greedy(model: Model, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor,
           settings: SearchSettings = SearchSettings()) -> list[Hypothesis]:
    """The most likely token at each step, until EOS or the sentence's own `max_lengths` [N].

    src [N, S] and src_lengths [N] hold all the sentences; at most the settings' batch_size (default: all)
    decode at once, with their step, top-k and symbols (their beam, alpha and n-best are beam search's).
    Returns one hypothesis per sentence.
    """
    symbols, top_k = settings.symbols, settings.top_k
    batch = DecodingBatch(model, src, src_lengths, max_lengths, replace(settings, beam_size=1))
    results: dict[int, Hypothesis] = {}                                         # by sentence
    while batch.decoding():
        logits, weights = batch.decode()                                        # [b, V], [b, S]
        # A sentence at its length limit ends here, as if it had produced EOS.
        log_probs = symbols.log_probs(logits)                                   # [b, V]
        _, tokens = top_k(log_probs, 1)                                         # [b, 1]
        tokens = tokens.squeeze(1).masked_fill_(batch.at_limit(), symbols.end)  # [b]
        scores = batch.scores[:, 0] + log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1)  # [b]
        ended = (tokens == symbols.end) & batch.live
        for row in ended.nonzero().squeeze(1).tolist():
            results[int(batch.sentence[row])] = batch.hypothesis(row, float(scores[row]))
        batch.choose(None, tokens, scores.unsqueeze(1), weights)
        batch.retire(ended)
    return [results[i] for i in range(src.shape[0])]                            # every sentence ends


@torch.inference_mode()
def beam_search(model: Model, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor,
                settings: SearchSettings) -> list[list[Hypothesis]]:
    """The settings' n_best best hypotheses per sentence, best first, by batched beam search.

    Each sentence keeps beam_size (K) live hypotheses. At every step the best 2K extensions are
    ranked; an EOS among the first K finishes that hypothesis, the best K others live on. Which
    finished hypotheses are kept and when a sentence is done is the settings' scoring's (SCORINGS:
    decode.beam_scoring); a sentence at its max length ends too (there only EOS may follow). At most
    batch_size sentences (default: all) decode at once, with the settings' step and top-k.
    """
    beam_size, alpha, n_best, symbols = settings.beam_size, settings.alpha, settings.n_best, settings.symbols
    rules, top_k = SCORINGS[settings.scoring], settings.top_k
    batch = DecodingBatch(model, src, src_lengths, max_lengths, settings)
    finished: list[list[Hypothesis]] = [[] for _ in range(src.shape[0])]
    while batch.decoding():
        logits, weights = batch.decode()                                            # [b*K, V]
        vocab = logits.shape[-1]
        candidates = symbols.log_probs(logits).add_(batch.scores.view(-1, 1))     # [b*K, V]
        at_limit = batch.at_limit()
        if at_limit.any():  # at the length limit only EOS may follow
            not_eos = torch.arange(vocab, device=logits.device) != symbols.end
            candidates.masked_fill_(at_limit.unsqueeze(1) & not_eos, float("-inf"))
        b = candidates.shape[0] // beam_size
        top_scores, top_ids = top_k(candidates.view(b, beam_size * vocab), min(2 * beam_size, beam_size * vocab))  # [b, 2K]
        from_row = top_ids // vocab + torch.arange(b, device=logits.device).unsqueeze(1) * beam_size   # rows of b*K
        next_token = top_ids % vocab
        is_eos = (next_token == symbols.end) & torch.isfinite(top_scores)

        for i, j in is_eos[:, :beam_size].nonzero().tolist():  # EOS among the best K: a finished hypothesis
            if batch.live[i]:
                done = batch.hypothesis(int(from_row[i, j]), float(top_scores[i, j]))
                score = rules.score(done.log_prob, len(done.ids) + 1, alpha)
                rules.keep(finished[int(batch.sentence[i])], replace(done, score=score), beam_size)

        live_scores = top_scores.masked_fill(next_token == symbols.end, float("-inf"))
        scores, pick = live_scores.topk(beam_size, dim=1)                                   # [b, K]
        batch.choose(from_row.gather(1, pick).view(-1), next_token.gather(1, pick).view(-1), scores, weights)

        limits, produced = batch.max_lengths[batch.sentence], batch.produced()
        ended = at_limit.view(b, beam_size)[:, 0] | torch.tensor(
            [rules.settled(finished[s], beam_size, n_best, live, made, limit, alpha) for s, live, made, limit
             in zip(batch.sentence.tolist(), scores[:, 0].tolist(), produced.tolist(), limits.tolist())],
            device=logits.device)
        batch.retire(ended & batch.live)
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]
