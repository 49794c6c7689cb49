"""A neural word aligner trained for a model (`attnmt align --method aligner`): a hidden Markov
model of alignment whose word translation probabilities come from a small network.

A translation model's cross-attention says where its decoder looked while writing a target piece,
not which source piece that piece translates (docs/recipes.md measures how far apart the two are).
Statistical aligners (IBM models, HMM, fast_align, eflomal) model the alignment itself: each
target word is written by one source word or by NULL, the word written depends on that word
alone, and where the next target word comes from depends on where the last one came from (the
HMM of Vogel et al. 1996, with Och & Ney 2003's NULL states). This module is that model with its
lexical table replaced by a network (a neural HMM, as in Wang et al. 2018), trained on sentence
pairs by the exact likelihood, in both directions:

    p(y | x) = Σ_a Π_j p(a_j | a_j-1) · p(y_j | x_{a_j - w .. a_j + w})      a_j ∈ source pieces ∪ {NULL}

    lexical   p(y | x_i±w): the piece x_i and its w neighbours on each side (none by default:
              with neighbours the posteriors spread over them, docs/recipes.md), embedded
              (initialised from the model's embeddings), through a hidden layer to a softmax over
              the other side's vocabulary; NULL writes from its own distribution
    jump      p(a_j = i | a_j-1 = r) = (1 - p0) · softmax_i(jumps[d] + leaving[x_r, d]), d = clamp(i - r,
              -M, M): a score learned per jump, and one per jump and piece jumped from (word-dependent
              transitions, He 2007: from an article to the next piece, from German "nicht" back); a_j = NULL
              with probability p0, after which the next jump starts from r again
              (a NULL remembers the position before it); the first piece jumps from position 0,
              before the sentence's first piece (numbered from 1)
    posterior the forward-backward algorithm gives each piece's P(a_j = i | x, y) exactly, with the
              jumps' scores weighted by jump_weight (the trained model at 1; below 1 the words
              count for more); pieces merge to words as attention's do (align.to_words)
    both ways the aligner holds a second HMM writing the source from the target; `attnmt align`
              links the word pairs whose two posteriors average one half or more (align.averaged),
              or combines each direction's best links (align.aligner_links, align.symmetrize)

Nothing of the model's network runs: the aligner shares its tokenization, starts from its
embeddings, and its weights travel in the same model file (`aligner.*`, its settings in the
metadata), so `attnmt align MODEL --method aligner` needs nothing else.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from ..batch import batch_indices, pad
from ..choices import ALIGNER_MAX_EPOCHS
from ..errors import AttnmtError, first_line
from ..modelfile import load_file, read_metadata, save_file
from ..seam import Model, require
from ..translate import Translator
from ..vocab import PAD_ID

BATCH_TOKENS = 16384          # target pieces per training batch: the larger, the fewer distinct pieces a piece
                              # shares its softmax with (chosen on the RWTH dev pairs, docs/recipes.md)
HELD_OUT = 2000               # pairs kept out of training to say when to stop (at most a twentieth)
STOP_GAIN = 0.002             # an epoch that lowers the held-out perplexity by less than this share is the last
PREFIX = "aligner."           # its tensors' names in a model file; its metadata's key is "aligner"
IMPOSSIBLE = -1e9             # the log-score of a padded position: finite, so that no sum turns NaN


class TokenEmbeddings(Protocol):
    """What the aligner and the attributions ask of a family's network (seam.py: a capability, not every family's)."""

    def token_embeddings(self) -> tuple[torch.nn.Embedding, torch.nn.Embedding]:
        """The source's and the target's token embeddings (one module where they are shared), each
        called once per pass on the very tensor of tokens given: the attributions replace their output."""
        ...


@dataclass
class AlignerConfig:
    """The aligner's shape; stored in the model file's metadata under "aligner"."""
    dim: int                  # the embeddings' width (the model's)
    window: int = 0           # neighbours on each side the lexical model reads (0: the piece alone)
    hidden: int = 256         # 256 rather than 128: 0.011 better on the RWTH dev pairs after each epoch, for a
                              # seventh more CPU, and no worse on the Hansards trial pairs (docs/recipes.md)
    max_jump: int = 15        # jumps further than this share their side's last bucket; 15 rather than 7 for
                              # long sentences (Hansards trial pairs 0.073 against 0.087, RWTH dev level: docs/recipes.md)
    jump_weight: float = 0.75  # the jumps' weight against the words when links are read (posteriors): their
                               # scores times this, renormalized; training uses 1. Chosen on the dev pairs
                               # (docs/recipes.md): 0.75 gained on the Hansards' and changed nothing on RWTH's


class LexicalModel(nn.Module):
    """log p(a piece written | a piece given, with its neighbours), and log p(a piece | NULL)."""

    def __init__(self, config: AlignerConfig, given_vocab: int, written_vocab: int):
        super().__init__()
        self.window = config.window
        self.embeddings = nn.Embedding(given_vocab, config.dim, padding_idx=PAD_ID)
        self.hidden = nn.Linear(config.dim * (2 * config.window + 1), config.hidden)
        self.output = nn.Linear(config.hidden, written_vocab)
        self.null = nn.Parameter(torch.zeros(written_vocab))

    def forward(self, given: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
        """log p(written_j | given_i±w) for each written piece [B, T] and given position [B, S]:
        [B, T, S + 1], the last column NULL's."""
        chosen = self.by_piece(given, written) if self.window == 0 else self.by_position(given, written)  # [B, S, T]
        null = torch.log_softmax(self.null, 0)[written]                         # [B, T]
        return torch.cat([chosen.transpose(1, 2), null[:, :, None]], 2)

    def by_position(self, given: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
        """log p(written_j | given_i±w) [B, S, T]: a softmax over the vocabulary at every given position."""
        embedded = self.embeddings(given)                                       # [B, S, d]; PAD embeds as 0
        w = self.window
        padded = nn.functional.pad(embedded, (0, 0, w, w))                      # [B, S + 2w, d]
        windows = torch.cat([padded[:, k : k + given.shape[1]] for k in range(2 * w + 1)], 2)  # [B, S, (2w+1)d]
        log_probs = torch.log_softmax(self.output(torch.tanh(self.hidden(windows))), 2)        # [B, S, V]
        return torch.gather(log_probs, 2, written[:, None, :].expand(-1, given.shape[1], -1))

    def by_piece(self, given: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
        """by_position without neighbours (window 0), where a position's distribution is its piece's: one
        softmax per distinct piece of the batch instead of one per position (fast path; tested against
        by_position). The softmax over the vocabulary is most of training's work."""
        distinct, where = torch.unique(given, return_inverse=True)              # [U], [B, S]
        log_probs = torch.log_softmax(self.output(torch.tanh(self.hidden(self.embeddings(distinct)))), 1)  # [U, V]
        return log_probs[where[:, :, None], written[:, None, :]]                # [B, S, T]


class HiddenMarkovAligner(nn.Module):
    """One direction: the written side's pieces from the given side's (the module's docstring)."""

    def __init__(self, config: AlignerConfig, given_vocab: int, written_vocab: int):
        super().__init__()
        self.max_jump = config.max_jump
        self.lexical = LexicalModel(config, given_vocab, written_vocab)
        jumps = torch.arange(-config.max_jump, config.max_jump + 1, dtype=torch.float32)
        self.jumps = nn.Parameter(-0.5 * (jumps - 1).abs())         # starts out preferring the next piece
        # Each given piece's own leaning, added to the jump's score from where it stands; zeros to
        # start (and in a file from before they were learned): the jumps alone.
        self.leaving = nn.Embedding(given_vocab, len(jumps), padding_idx=PAD_ID)
        nn.init.zeros_(self.leaving.weight)
        self.null_logit = nn.Parameter(torch.tensor(-2.0))          # p0 = sigmoid: 0.12 to start

    def log_jumps(self, given: torch.Tensor, given_lengths: torch.Tensor, weight: float = 1.0) -> torch.Tensor:
        """log p(a_j = i | a_j-1 = r) [B, S + 1, S] without NULL's share, for the given pieces [B, S]:
        from r = 0 (before the first piece) .. S (after piece r) to each piece i (numbered from 1
        here, from 0 in the tensor's last axis); with the scores times `weight` (below 1: flatter,
        the words count for more)."""
        batch, positions = given.shape
        device = self.jumps.device
        before = torch.arange(positions + 1, device=device)[:, None]            # [S + 1, 1]
        to = torch.arange(1, positions + 1, device=device)[None, :]             # [1, S]
        jump = (to - before).clamp(-self.max_jump, self.max_jump) + self.max_jump  # [S + 1, S]: the jump's bucket
        leaving = torch.cat([self.leaving.weight.new_zeros(batch, 1, self.leaving.embedding_dim),
                             self.leaving(given)], 1)                            # [B, S + 1, 2M + 1]: r = 0 leans nowhere
        scores = self.jumps[jump][None] + torch.gather(leaving, 2, jump[None].expand(batch, -1, -1))  # [B, S + 1, S]
        padding = torch.arange(positions, device=device)[None, :] >= given_lengths.to(device)[:, None]  # [B, S]
        return torch.log_softmax((weight * scores).masked_fill(padding[:, None, :], IMPOSSIBLE), 2)

    def forward_backward(self, log_emission: torch.Tensor, given: torch.Tensor, given_lengths: torch.Tensor,
                         written_lengths: torch.Tensor, jump_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """log p(written | given) [B] summed over every alignment, from log_emission [B, T, S + 1]
        (LexicalModel's) and the given pieces [B, S], and each piece's P(a_j = i | both sides) [B, T, S + 1] (the last column
        NULL's): the plain reference in logs; the jumps weighted by `jump_weight` (log_jumps).

        The state after piece j is where the next jump starts: position r in 0..S (r = i + 1 after
        piece i, or the position a NULL remembers). alpha[r] sums the paths that write pieces 0..j
        and end in r, split by how: by a piece (`real`, r >= 1) or by NULL (`null`)."""
        batch, pieces, width = log_emission.shape
        positions = width - 1
        jump = self.log_jumps(given, given_lengths, jump_weight)                 # [B, S + 1, S]
        log_real, log_null = nn.functional.logsigmoid(-self.null_logit), nn.functional.logsigmoid(self.null_logit)
        written = torch.arange(pieces, device=log_emission.device)[None, :] < written_lengths.to(log_emission.device)[:, None]
        alpha = torch.full((batch, positions + 1), IMPOSSIBLE, device=log_emission.device)
        alpha[:, 0] = 0.0                                                        # before the first piece
        reals, nulls = [], []
        for j in range(pieces):
            real = torch.logsumexp(alpha[:, :, None] + jump, 1) + log_real + log_emission[:, j, :positions]  # [B, S]
            null = alpha + log_null + log_emission[:, j, positions:]                                      # [B, S + 1]
            reals.append(real)
            nulls.append(null)
            step = torch.cat([null[:, :1], torch.logaddexp(null[:, 1:], real)], 1)
            alpha = torch.where(written[:, j, None], step, alpha)               # padded pieces change nothing
        log_likelihood = torch.logsumexp(alpha, 1)                               # [B]
        # beta[r]: log p(pieces j+1.. | the state after piece j is r): 0 after a sentence's last piece.
        beta = torch.zeros(batch, positions + 1, device=log_emission.device)
        shares = [torch.empty(0)] * pieces
        for j in reversed(range(pieces)):
            share = torch.cat([reals[j] + beta[:, 1:], torch.logsumexp(nulls[j] + beta, 1, keepdim=True)], 1)
            shares[j] = torch.exp(share - log_likelihood[:, None]) * written[:, j, None]          # [B, S + 1]
            through_piece = torch.logsumexp(jump + (log_real + log_emission[:, j, None, :positions]
                                                    + beta[:, None, 1:]), 2)     # [B, S + 1]
            through_null = log_null + log_emission[:, j, positions:] + beta
            beta = torch.where(written[:, j, None], torch.logaddexp(through_piece, through_null), 0.0)
        return log_likelihood, torch.stack(shares, 1)

    def log_likelihood(self, log_emission: torch.Tensor, given: torch.Tensor, given_lengths: torch.Tensor,
                       written_lengths: torch.Tensor) -> torch.Tensor:
        """forward_backward's log p(written | given) [B] alone, by the scaled forward algorithm: in
        probabilities, a vector-matrix product per piece instead of a log-sum-exp over every pair of
        positions, the state rescaled to sum to one at each piece (fast path for training; tested
        against forward_backward)."""
        batch, pieces, width = log_emission.shape
        positions = width - 1
        device = log_emission.device
        jump = self.log_jumps(given, given_lengths).exp()                        # [B, S + 1, S]
        p_null = torch.sigmoid(self.null_logit)
        # Each piece's emissions over their largest, which is added back in the log: no underflow. A
        # constant, as log p = c + log(p / e^c) for any c.
        peak = log_emission.detach().amax(2, keepdim=True)                       # [B, T, 1]
        emission = torch.exp(log_emission - peak)                                # [B, T, S + 1]
        written = torch.arange(pieces, device=device)[None, :] < written_lengths.to(device)[:, None]
        alpha = torch.zeros(batch, positions + 1, device=device)
        alpha[:, 0] = 1.0                                                        # before the first piece
        log_likelihood = peak[:, :, 0].masked_fill(~written, 0.0).sum(1)         # [B]
        for j in range(pieces):
            real = torch.bmm(alpha[:, None, :], jump)[:, 0] * (1 - p_null) * emission[:, j, :positions]  # [B, S]
            null = alpha * p_null * emission[:, j, positions:]                                           # [B, S + 1]
            step = torch.cat([null[:, :1], null[:, 1:] + real], 1)
            scale = torch.where(written[:, j, None], step.sum(1, keepdim=True), 1.0)                     # [B, 1]
            alpha = torch.where(written[:, j, None], step / scale, alpha)       # padded pieces change nothing
            log_likelihood = log_likelihood + scale[:, 0].log()
        return log_likelihood


class Aligner(nn.Module):
    """Both directions: target pieces written from source pieces, and source pieces from target pieces."""

    def __init__(self, config: AlignerConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.config = config
        self.epochs = 0               # epochs trained (train_aligner), kept in the model file's metadata
        self.source_to_target = HiddenMarkovAligner(config, src_vocab, tgt_vocab)
        self.target_to_source = HiddenMarkovAligner(config, tgt_vocab, src_vocab)

    @classmethod
    def for_model(cls, model: Model, src_vocab: int, tgt_vocab: int, window: int = 0,
                  hidden: int = AlignerConfig.hidden, max_jump: int = AlignerConfig.max_jump) -> Aligner:
        """A new aligner whose embeddings start as the model's (each side's, PAD's as zeros)."""
        embedded: TokenEmbeddings = require(model, TokenEmbeddings, "attnmt train-aligner")
        src_embeddings, tgt_embeddings = embedded.token_embeddings()
        config = AlignerConfig(dim=src_embeddings.embedding_dim, window=window, hidden=hidden, max_jump=max_jump)
        aligner = cls(config, src_vocab, tgt_vocab)
        with torch.no_grad():
            for direction, given in ((aligner.source_to_target, src_embeddings), (aligner.target_to_source, tgt_embeddings)):
                direction.lexical.embeddings.weight.copy_(given.weight)
                direction.lexical.embeddings.weight[PAD_ID] = 0.0
        return aligner.to(src_embeddings.weight.device)

    def directions(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor, tgt_lengths: torch.Tensor
                   ) -> list[tuple[HiddenMarkovAligner, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Each direction, target from source then source from target, with its log emissions
        (LexicalModel's), the side it reads and its lengths, and the lengths of the side it writes."""
        return [(direction, direction.lexical(given, written), given, given_lengths, written_lengths)
                for direction, given, given_lengths, written, written_lengths in (
                    (self.source_to_target, src, src_lengths, tgt, tgt_lengths),
                    (self.target_to_source, tgt, tgt_lengths, src, src_lengths))]

    def log_likelihood(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor,
                       tgt_lengths: torch.Tensor) -> torch.Tensor:
        """log p(tgt | src) + log p(src | tgt) [B]."""
        forward, backward = (direction.log_likelihood(*inputs)
                             for direction, *inputs in self.directions(src, src_lengths, tgt, tgt_lengths))
        return forward + backward

    def posteriors(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor, tgt_lengths: torch.Tensor,
                   jump_weight: Optional[float] = None) -> list[torch.Tensor]:
        """Each target piece's P(source piece i | both sentences) [B, T, S + 1] and each source
        piece's P(target piece j | both) [B, S, T + 1], the last column NULL's, with the jumps
        weighted by `jump_weight` (default: the config's)."""
        weight = self.config.jump_weight if jump_weight is None else jump_weight
        return [direction.forward_backward(emission, given, given_lengths, written_lengths, weight)[1]
                for direction, emission, given, given_lengths, written_lengths
                in self.directions(src, src_lengths, tgt, tgt_lengths)]


def piece_tensors(pairs: list[tuple[list[int], list[int]]], rows: list[int], device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pairs `rows` of (source ids, target ids) as padded tensors on `device` with their lengths
    (on the CPU): src [B, S], src lengths [B], tgt [B, T] (no SOS or EOS), tgt lengths [B]."""
    src = pad([pairs[i][0] for i in rows]).to(device)
    tgt = pad([pairs[i][1] for i in rows]).to(device)
    return (src, torch.tensor([len(pairs[i][0]) for i in rows]), tgt, torch.tensor([len(pairs[i][1]) for i in rows]))


def held_out_rows(count: int, rng: random.Random) -> list[int]:
    """The pairs kept out of training to say when to stop: a twentieth of them, at most HELD_OUT,
    none where there are too few pairs to spare twenty."""
    return sorted(rng.sample(range(count), min(HELD_OUT, count // 20)))


def piece_lengths(pairs: list[tuple[list[int], list[int]]], rows: Iterable[int]) -> np.ndarray:
    """[len(rows), 2]: each pair's target and source lengths, as batch_indices batches by them."""
    return np.array([(len(pairs[i][1]), len(pairs[i][0])) for i in rows], dtype=np.int64)


def perplexity(aligner: Aligner, pairs: list[tuple[list[int], list[int]]], rows: list[int], batch_tokens: int,
               device: torch.device) -> float:
    """The aligner's perplexity per piece, both directions, on the pairs `rows`."""
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batch_indices(piece_lengths(pairs, rows), batch_tokens, "tokens"):
            src, src_lengths, tgt, tgt_lengths = piece_tensors(pairs, [rows[k] for k in batch], device)
            total -= float(aligner.log_likelihood(src, src_lengths, tgt, tgt_lengths).sum())
            count += int(src_lengths.sum() + tgt_lengths.sum())
    return math.exp(total / count)


def piece_pairs(translator: Translator, sources: list[str], targets: list[str]) -> list[tuple[list[int], list[int]]]:
    """The sentence pairs as the model's (source ids, target ids), those with pieces on both sides."""
    text = translator.tokenization
    pairs = [(text.src_vocab.encode(translator.src_tokenizer.tokenize(s)),
              text.tgt_vocab.encode(translator.tgt_tokenizer.tokenize(t))) for s, t in zip(sources, targets, strict=True)]
    pairs = [p for p in pairs if p[0] and p[1]]
    if not pairs:
        raise AttnmtError("no sentence pairs with words on both sides to train the aligner on")
    return pairs


def train_epoch(aligner: Aligner, optimizer: torch.optim.Optimizer, pairs: list[tuple[list[int], list[int]]],
                batches: list[list[int]], device: torch.device, desc: str) -> float:
    """One epoch over `batches` (rows of `pairs`), one Adam step each: the perplexity per piece, both
    directions, that training saw. A bar on a terminal (the epoch's time left), as training shows one."""
    aligner.train()
    total, count = 0.0, 0
    bar = tqdm(total=len(batches), desc=desc, unit="batch", disable=None, leave=False)
    for rows in batches:
        src, src_lengths, tgt, tgt_lengths = piece_tensors(pairs, rows, device)
        pieces = int(src_lengths.sum() + tgt_lengths.sum())
        loss = -aligner.log_likelihood(src, src_lengths, tgt, tgt_lengths).sum() / pieces
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total, count = total + loss.item() * pieces, count + pieces
        bar.set_postfix_str(f"perplexity {math.exp(total / count):.1f}", refresh=False)
        bar.update()
    bar.close()
    return math.exp(total / count)


def train_aligner(translator: Translator, sources: list[str], targets: list[str], epochs: int = ALIGNER_MAX_EPOCHS,
                  lr: float = 1e-2, batch_tokens: int = BATCH_TOKENS, seed: int = 1, window: int = 0,
                  log: Callable[[str], None] = print, aligner: Optional[Aligner] = None,
                  hold_out: bool = True) -> Aligner:
    """An aligner for the translator's model, trained on sentence pairs (plain text) by the
    likelihood of both directions, starting from `aligner` (default: the one the translator's model
    file holds, read_aligner), trained further (`window` is then its own), or where there is none
    from the model's embeddings, reading `window` neighbours of each piece on each side. The model
    itself is left unchanged.

    Training stops after `epochs`, or sooner: after each epoch the pairs held out of training
    (held_out_rows) are scored, and once an epoch lowers their perplexity by less than STOP_GAIN,
    training stops, keeping the epoch whose perplexity was lowest (with fewer than 40 pairs, or
    `hold_out` False, nothing is held out and every epoch runs)."""
    torch.manual_seed(seed)
    text = translator.tokenization
    pairs = piece_pairs(translator, sources, targets)
    rng = random.Random(seed)
    held_out = held_out_rows(len(pairs), rng) if hold_out else []
    training = np.setdiff1d(np.arange(len(pairs)), held_out)
    lengths = piece_lengths(pairs, training)
    aligner = aligner or read_aligner(translator) or Aligner.for_model(translator.model, len(text.src_vocab),
                                                                       len(text.tgt_vocab), window)
    optimizer = torch.optim.Adam(aligner.parameters(), lr=lr)
    best: tuple[float, dict[str, torch.Tensor], int] = (math.inf, {}, 0)     # held-out perplexity, weights, epoch
    started, cpu_started = time.monotonic(), time.process_time()
    for epoch in range(1, epochs + 1):
        batches = batch_indices(lengths, batch_tokens, "tokens", shuffle=True, rng=rng)
        trained = train_epoch(aligner, optimizer, pairs, [training[batch].tolist() for batch in batches],
                              translator.device, f"aligner epoch {epoch}/{epochs}")
        aligner.epochs += 1
        line = f"aligner epoch {epoch}/{epochs}: perplexity {trained:.1f} per piece (both directions)"
        stop, kept = False, epoch
        if held_out:
            held = perplexity(aligner.eval(), pairs, held_out, batch_tokens, translator.device)
            stop = held >= best[0] * (1 - STOP_GAIN)
            line += f", {held:.2f} on {len(held_out):,} held-out pairs"
            if held < best[0]:
                best = (held, {name: t.clone() for name, t in aligner.state_dict().items()}, epoch)
            kept = best[2]
        minutes = (time.monotonic() - started) / 60
        cpu_per_100k = (time.process_time() - cpu_started) / 60 / epoch / len(training) * 100_000
        line += (f", {len(batches)} batches; {minutes:.1f} min so far ({cpu_per_100k:.1f} CPU-min per 100,000 pairs "
                 f"an epoch)")
        if stop:
            if kept < epoch:
                aligner.load_state_dict(best[1])
                aligner.epochs -= epoch - kept
            log(f"{line}; held-out perplexity falls by less than {STOP_GAIN:.1%}: stopped, keeping epoch {kept}")
            break
        log(line + (f", at most {minutes / epoch * (epochs - epoch):.1f} min left" if epoch < epochs else ""))
    return aligner.eval()


def write_aligner(model_path: str | Path, out: str | Path, aligner: Aligner, trained: dict[str, Any]) -> None:
    """Write the model file at `model_path` to `out` (atomically) with `aligner` in it, its epochs and
    how else it was trained (`trained`, for `attnmt info`); any aligner the file held is replaced,
    the network's weights are copied unchanged."""
    tensors, meta = load_file(model_path)
    tensors = {name: t for name, t in tensors.items() if not name.startswith(PREFIX)}
    tensors.update({PREFIX + name: t for name, t in aligner.state_dict().items()})
    meta = {k: v for k, v in meta.items() if k not in ("format", "format_version", "sha256")}
    meta["aligner"] = {"config": asdict(aligner.config), "epochs": aligner.epochs, **trained}
    save_file(out, tensors, meta)


def read_aligner(translator: Translator) -> Optional[Aligner]:
    """The aligner the translator's model file holds, on its device, or None: the file holds none, or
    the translator was made in memory. Its weights are read only where the metadata names one."""
    path = translator.path
    if path is None or "aligner" not in read_metadata(path):
        return None
    tensors, meta = load_file(path)
    text = translator.tokenization
    try:
        aligner = Aligner(AlignerConfig(**meta["aligner"]["config"]), len(text.src_vocab), len(text.tgt_vocab))
        # An aligner written before the jumps learned the piece they leave has none of `leaving`:
        # it keeps its zeros, which make it the aligner it was.
        missing, unexpected = aligner.load_state_dict(
            {name[len(PREFIX):]: t for name, t in tensors.items() if name.startswith(PREFIX)}, strict=False)
        if unexpected or any(not name.endswith(".leaving.weight") for name in missing):
            raise RuntimeError(f"tensors missing: {missing}, not the aligner's: {unexpected}")
        aligner.epochs = int(meta["aligner"].get("epochs", 0))
    except (KeyError, TypeError, RuntimeError) as err:
        raise AttnmtError(f"{path}: the aligner in this model file does not match its model ({first_line(err)}); "
                          f"train it again with `attnmt train-aligner`") from None
    return aligner.to(translator.device).eval()
