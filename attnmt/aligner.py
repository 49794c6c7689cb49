"""A word aligner trained on a frozen translation model (`attnmt align --method aligner`).

A translation model's cross-attention says where its decoder looked while writing a target piece,
not which source piece that target piece translates (docs/recipes.md measures how far apart the
two are). The aligner adds what alignment needs and keeps the model as it is: a lexical model,
p(y | the source piece i and its neighbours), and a prior over the source positions built from
the model's own attention heads and the relative position, trained together to explain each
target piece as a mixture over the source positions plus NULL (IBM Model 1's form, Brown et al.
1993, with the network's attention as its alignment prior; cf. Zenkel et al. 2019, Alkhouli et
al. 2018):

    p(y_j | x, y_<j) = Σ_i a_ij · p_lex(y_j | x_{i-w..i+w})          i over S source pieces and NULL
    a_ij = softmax_i(Σ_k w_k · log attn_k[j, i] + d[bucket((i + ½)/S − (j + ½)/T)])

where attn_k runs over every layer and head of the cross-attention, read at the step that writes
y_j and at the step that reads it (none for a model without attention: then the relative position
alone is the prior, as in IBM Model 2). A target piece's alignment is the posterior given the piece
itself, post_ij ∝ a_ij · p_lex(y_j | x_i±w): it knows the word written (as shift-att does) and
the lexical correspondence (as statistical aligners do). Pieces merge to words as attention's do
(align.to_words); a target word whose NULL share beats every source word's gets no link.

The aligner's weights travel in the model file beside the network's (`aligner.*`, with its
settings in the metadata), so `attnmt align MODEL --method aligner` needs nothing else.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from .batch import batch_indices, pad
from .errors import AttnmtError
from .families.seam import Model
from .modelfile import load_file, save_file
from .vocab import PAD_ID, SOS_ID

if TYPE_CHECKING:
    from .translate import Translator

BATCH_TOKENS = 4096           # target pieces per training batch
PREFIX = "aligner."           # its tensors' names in a model file; its metadata's key is "aligner"


@dataclass
class AlignerConfig:
    """The aligner's shape; stored in the model file's metadata under "aligner"."""
    features: int             # attention maps read: layers × heads × 2 steps
    window: int = 1           # source neighbours on each side the lexical model reads
    hidden: int = 256
    buckets: int = 21         # relative-position buckets over [-1, 1]


class Aligner(nn.Module):
    """The prior and the lexical model of the module's docstring."""

    def __init__(self, config: AlignerConfig, src_embeddings: nn.Embedding, tgt_vocab: int):
        super().__init__()
        self.config = config
        self.src_embeddings = src_embeddings           # the translation model's, frozen (not stored twice)
        width = src_embeddings.embedding_dim * (2 * config.window + 1)
        self.head_weights = nn.Parameter(torch.full((config.features,), 1.0 / max(config.features, 1)))
        self.distortion = nn.Parameter(torch.zeros(config.buckets))
        self.null_prior = nn.Parameter(torch.zeros(()))
        self.lexical = nn.Sequential(nn.Linear(width, config.hidden), nn.Tanh(), nn.Linear(config.hidden, tgt_vocab))
        self.null_lexical = nn.Parameter(torch.zeros(tgt_vocab))

    def stored_state(self) -> dict[str, torch.Tensor]:
        """Its own weights, without the model's embeddings."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("src_embeddings.")}

    def log_prior(self, attention: torch.Tensor, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor) -> torch.Tensor:
        """log a [B, T, S + 1] (the last column NULL) from the attention maps [B, K, T, S]."""
        features = torch.log(attention.clamp_min(1e-6))                         # [B, K, T, S]
        scores = torch.einsum("bkts,k->bts", features, self.head_weights)
        batch, targets, sources = scores.shape
        i = (torch.arange(sources, device=scores.device) + 0.5) / src_lengths[:, None].to(scores)      # [B, S]
        j = (torch.arange(targets, device=scores.device) + 0.5) / tgt_lengths[:, None].to(scores)      # [B, T]
        relative = (i[:, None, :] - j[:, :, None]).clamp(-1, 1)                 # [B, T, S]
        bucket = ((relative + 1) / 2 * (self.config.buckets - 1)).round().long()
        scores = scores + self.distortion[bucket]
        padding = torch.arange(sources, device=scores.device)[None, :] >= src_lengths[:, None].to(scores.device)
        scores = scores.masked_fill(padding[:, None, :], float("-inf"))
        null = self.null_prior.expand(batch, targets, 1)
        return torch.log_softmax(torch.cat([scores, null], 2), 2)

    def log_lexical(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """log p_lex(y_j | x_i±w) [B, T, S + 1] of each target piece tgt [B, T] from each source
        position of src [B, S] and from NULL (the last column)."""
        embedded = self.src_embeddings(src).detach()                            # [B, S, d]
        w = self.config.window
        padded = nn.functional.pad(embedded, (0, 0, w, w))                      # [B, S + 2w, d]
        windows = torch.cat([padded[:, k : k + src.shape[1]] for k in range(2 * w + 1)], 2)  # [B, S, (2w+1)d]
        log_probs = torch.log_softmax(self.lexical(windows), 2)                 # [B, S, V]
        chosen = torch.gather(log_probs, 2, tgt[:, None, :].expand(-1, src.shape[1], -1))     # [B, S, T]
        null = torch.log_softmax(self.null_lexical, 0)[tgt]                     # [B, T]
        return torch.cat([chosen.transpose(1, 2), null[:, :, None]], 2)

    def joint(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor, tgt_lengths: torch.Tensor,
              attention: torch.Tensor) -> torch.Tensor:
        """log a_ij + log p_lex(y_j | i) [B, T, S + 1]: the log-likelihood's terms, the posterior unnormalized."""
        return self.log_prior(attention, src_lengths, tgt_lengths) + self.log_lexical(src, tgt)


def attention_features(model: Model, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Every cross-attention map of the frozen model's teacher-forced pass, at the step that writes
    each target piece and at the step that reads it: [B, 2 × layers × heads, T, S]."""
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], SOS_ID), tgt], 1)            # [B, T + 1]: the step after the last reads it
    with torch.inference_mode():
        maps = model.attention_maps(src, src_lengths, tgt_in)
    if "cross" not in maps:       # a model without attention: the prior is the relative position's alone
        return torch.zeros(src.shape[0], 0, tgt.shape[1], src.shape[1], device=src.device)
    cross = maps["cross"].float()                                                # [B, L, H, T + 1, S]
    cross = cross.flatten(1, 2)                                                  # [B, L·H, T + 1, S]
    return torch.cat([cross[:, :, :-1], cross[:, :, 1:]], 1).clone()             # [B, 2·L·H, T, S]


def feature_count(translator: Translator) -> int:
    """How many attention maps attention_features returns for this model."""
    one = torch.tensor([[SOS_ID]], device=translator.device)
    return attention_features(translator.model.eval(), one, torch.tensor([1]), one).shape[1]


def piece_tensors(pairs: list[tuple[list[int], list[int]]], rows: list[int], device: torch.device
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pairs `rows` of (source ids, target ids) as padded tensors on `device` with their lengths
    (on the CPU, where an RNN's packing wants them): src [B, S], src lengths [B], tgt [B, T] (no SOS
    or EOS), tgt lengths [B]."""
    src = pad([pairs[i][0] for i in rows]).to(device)
    tgt = pad([pairs[i][1] for i in rows]).to(device)
    return (src, torch.tensor([len(pairs[i][0]) for i in rows]), tgt, torch.tensor([len(pairs[i][1]) for i in rows]))


def train_aligner(translator: Translator, sources: list[str], targets: list[str], epochs: int = 1, lr: float = 3e-3,
                  batch_tokens: int = BATCH_TOKENS, seed: int = 1, log: Callable[[str], None] = print) -> Aligner:
    """An aligner for the translator's model, trained on sentence pairs (plain text) with the model frozen."""
    torch.manual_seed(seed)
    text = translator.tokenization
    pairs = [(text.src_vocab.encode(translator.src_tokenizer.tokenize(s)),
              text.tgt_vocab.encode(translator.tgt_tokenizer.tokenize(t))) for s, t in zip(sources, targets, strict=True)]
    pairs = [p for p in pairs if p[0] and p[1]]
    if not pairs:
        raise AttnmtError("no sentence pairs with words on both sides to train the aligner on")
    lengths = np.array([(len(t), len(s)) for s, t in pairs], dtype=np.int64)   # batched by target length
    model = translator.model.eval()
    src_embeddings, _ = model.token_embeddings()
    aligner = Aligner(AlignerConfig(features=feature_count(translator)), src_embeddings, len(text.tgt_vocab))
    aligner.to(translator.device)
    trained = [p for name, p in aligner.named_parameters() if not name.startswith("src_embeddings.")]
    optimizer = torch.optim.Adam(trained, lr=lr)
    rng = random.Random(seed)
    for epoch in range(1, epochs + 1):
        total, count = 0.0, 0
        batches = batch_indices(lengths, batch_tokens, "tokens", shuffle=True, rng=rng)
        for number, rows in enumerate(batches, start=1):
            src, src_lengths, tgt, tgt_lengths = piece_tensors(pairs, rows.tolist(), translator.device)
            attention = attention_features(model, src, src_lengths, tgt)
            joint = aligner.joint(src, src_lengths, tgt, tgt_lengths, attention)        # [B, T, S + 1]
            real = tgt != PAD_ID
            loss = -(torch.logsumexp(joint, 2) * real).sum() / real.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * int(real.sum()), count + int(real.sum())
            if number % 100 == 0 or number == len(batches):
                log(f"aligner epoch {epoch}: batch {number}/{len(batches)}, "
                    f"perplexity {math.exp(total / count):.1f}")
    return aligner.eval()


def write_aligner(model_path: str | Path, out: str | Path, aligner: Aligner, trained: dict[str, Any]) -> None:
    """Write the model file at `model_path` to `out` (atomically) with `aligner` in it, and how it was
    trained (`trained`, for `attnmt info`); any aligner the file held is replaced, the network's
    weights are copied unchanged."""
    tensors, meta = load_file(model_path)
    tensors = {name: t for name, t in tensors.items() if not name.startswith(PREFIX)}
    tensors.update({PREFIX + name: t for name, t in aligner.stored_state().items()})
    meta = {k: v for k, v in meta.items() if k not in ("format", "format_version", "sha256")}
    meta["aligner"] = {"config": asdict(aligner.config), **trained}
    save_file(out, tensors, meta)


def read_aligner(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any], model: Model,
                 tgt_vocab: int) -> Optional[Aligner]:
    """The aligner a model file holds, on the model's device, or None."""
    if "aligner" not in meta:
        return None
    try:
        aligner = Aligner(AlignerConfig(**meta["aligner"]["config"]), model.token_embeddings()[0], tgt_vocab)
        aligner.load_state_dict({name[len(PREFIX):]: t for name, t in tensors.items() if name.startswith(PREFIX)},
                                strict=False)
    except (KeyError, TypeError, RuntimeError) as err:
        raise AttnmtError(f"{path}: the aligner in this model file does not match its model ({err})") from None
    missing = set(aligner.stored_state()) - {name[len(PREFIX):] for name in tensors if name.startswith(PREFIX)}
    if missing:
        raise AttnmtError(f"{path}: the aligner in this model file lacks {', '.join(sorted(missing))}")
    return aligner.to(next(model.parameters()).device).eval()
