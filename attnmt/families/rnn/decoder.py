"""The decoder, in the order of either paper, with any attention kind.

bahdanau order (Bahdanau et al. 2015): attend with the previous state s_{t-1}, feed
    [embedding; context] to the RNN, classify the deep output tanh(W_o [s_t; context; embedding]).
luong order (Luong et al. 2015): run the RNN on the embedding (plus, with input feeding, the
    previous attentional vector), attend with the new state h_t, combine
    h~_t = tanh(W_c [context; h_t]) and classify h~_t.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from ...precision import run_rnn
from ...vocab import PAD_ID
from ..seam import SourceMemory
from .attention import Attention, AttentionProbe
from .encoder import RNN_CLASSES, RNNState, as_state, as_torch_state


class RNNMemory(SourceMemory):
    """What the decoder attends to, computed once per sentence; rows are sentences (or beams)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor):
        super().__init__(keys, values, mask)
        self.keys = keys      # [B, S, A] projected for the attention kind
        self.values = values  # [B, S, D] encoder outputs h_j
        self.mask = mask      # [B, S] True at real tokens


class RNNDecoderState(NamedTuple):
    """The decoder's state between steps; rows are sentences (or beams)."""

    hidden: tuple[torch.Tensor, ...]      # (h,) for a GRU, (h, c) for an LSTM, each [layers, B, H]
    attn_vector: Optional[torch.Tensor]   # [B, O] previous h~_t, for input feeding (luong order)
    position: Optional[torch.Tensor] = None  # [B] long: t of the next step, from 1 (for local attention)

    def _extras(self) -> list[torch.Tensor]:
        return [t for t in (self.attn_vector, self.position) if t is not None]

    def tensors(self) -> list[torch.Tensor]:
        """The state as a flat list: the hidden tensors, then the attentional vector and the position if kept."""
        return [*self.hidden, *self._extras()]

    def dims(self) -> list[tuple[int, Optional[int]]]:
        """For each of `tensors()`: the dimension that indexes rows, and None (no decoded positions kept)."""
        rows: list[tuple[int, Optional[int]]] = [(1, None)] * len(self.hidden)
        return rows + [(0, None)] * len(self._extras())

    def make_room(self, positions: int) -> "RNNDecoderState":
        return self  # its tensors keep no positions: a step never grows them

    def like(self, tensors: list[torch.Tensor]) -> "RNNDecoderState":
        """A state of this one's structure from a flat list as `tensors()` gives it."""
        rest = iter(tensors[len(self.hidden):])
        return RNNDecoderState(tuple(tensors[: len(self.hidden)]), None if self.attn_vector is None else next(rest),
                            None if self.position is None else next(rest))

    def select(self, index: torch.Tensor) -> "RNNDecoderState":
        """Keep (or repeat) the rows `index`, e.g. to follow beams."""
        return self.like([t.index_select(dim, index) for t, (dim, _) in zip(self.tensors(), self.dims())])

    def reorder(self, index: torch.Tensor) -> "RNNDecoderState":
        """select(index): a few small tensors, copied."""
        return self.select(index)

    def put(self, index: torch.Tensor, source: "RNNDecoderState") -> None:
        """Overwrite the rows `index` in place with the rows of `source`."""
        for mine, theirs, (dim, _) in zip(self.tensors(), source.tensors(), self.dims()):
            mine.index_copy_(dim, index, theirs)


def top_layer(hidden: RNNState) -> torch.Tensor:
    return hidden[0][-1]                                                # [B, H], h of the top layer


class Decoder(nn.Module):
    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, layers: int, rnn: str,
                 attention: Attention, context_dim: int, order: str, input_feeding: bool, dropout: float,
                 tie_embeddings: bool = False):
        super().__init__()
        self.order = order
        self.input_feeding = input_feeding
        # The vector the classifier reads (h~_t); as wide as the embeddings when they are tied.
        self.output_size = emb_dim if tie_embeddings else hidden
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.attention: Attention | AttentionProbe = attention  # an AttentionProbe in RNNEncoderDecoder.probed's copy
        if order == "bahdanau":
            rnn_input = emb_dim + context_dim
            combine_input = hidden + context_dim + emb_dim  # the paper's deep output over [s_t; c_t; y_{t-1}]
        else:
            rnn_input = emb_dim + (self.output_size if input_feeding else 0)
            combine_input = context_dim + hidden            # [c_t; h_t]
        self.rnn = RNN_CLASSES[rnn](rnn_input, hidden, layers, batch_first=True,
                                    dropout=dropout if layers > 1 else 0.0)
        self.combine = nn.Linear(combine_input, self.output_size)
        self.classifier = nn.Linear(self.output_size, vocab_size)
        if tie_embeddings:
            self.classifier.weight = self.embedding.weight

    @property
    def parallel(self) -> bool:
        """True when, given the gold target, every step can be computed in one call."""
        return self.order == "luong" and not self.input_feeding

    def initial_state(self, hidden: RNNState, batch_size: int) -> RNNDecoderState:
        top = top_layer(hidden)
        attn_vector = top.new_zeros(batch_size, self.output_size) if self.input_feeding else None
        position = (torch.ones(batch_size, dtype=torch.long, device=top.device)
                    if self.attention.needs_positions else None)
        return RNNDecoderState(hidden, attn_vector, position)

    def step(self, prev_tokens: torch.Tensor, state: RNNDecoderState, memory: RNNMemory
             ) -> tuple[torch.Tensor, RNNDecoderState, Optional[torch.Tensor]]:
        """Decode T steps given the previous tokens [B, T]; T > 1 only when `parallel`.

        Returns logits [B, T, V], the new state and the attention weights [B, T, S] (None for `none`).
        """
        features, state, weights = self._features(self.embed(prev_tokens), state, memory)
        return self.classify(features), state, weights

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(tokens))                         # [B, T, E]

    def classify(self, features: torch.Tensor, at: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits [B, T, V] from features [B, T, O]; [N, V] for the N positions where `at` [B, T] is True."""
        if at is not None:
            features = features[at]                                         # [N, O]
        return self.classifier(self.dropout(features))

    def _features(self, embedded: torch.Tensor, state: RNNDecoderState, memory: RNNMemory
                  ) -> tuple[torch.Tensor, RNNDecoderState, Optional[torch.Tensor]]:
        """The decoding step of either paper: the vector the classifier reads, [B, T, O], for T steps
        given their input embeddings y [B, T, E] (T > 1 only when `parallel`); h_j are the encoder's outputs."""
        steps = embedded.shape[1]
        positions = None if state.position is None else (  # [B, T]: t of each step, for local attention
            state.position[:, None] + torch.arange(steps, device=embedded.device))
        if self.order == "bahdanau":
            # c_i = Σ_j α_ij h_j, α_i = attention(s_{i-1}, h);  s_i = RNN([y_{i-1}; c_i], s_{i-1});
            # t_i = tanh(W_o [s_i; c_i; y_{i-1}])  (the deep output, before the classifier)
            query = top_layer(state.hidden).unsqueeze(1)                     # [B, 1, H] = s_{i-1}
            context, weights = self.attention(query, memory.keys, memory.values, memory.mask, positions)  # [B, 1, D] = c_i
            output, hidden = self._recur(torch.cat([embedded, context], dim=-1), state.hidden)  # [B, 1, H] = s_i
            combined = torch.cat([output, context, embedded], dim=-1)       # [B, 1, H + D + E]
        else:
            # h_t = RNN([y_{t-1}; h~_{t-1}], h_{t-1})  (h~_{t-1} only with input feeding);
            # c_t = Σ_j α_tj h_j, α_t = attention(h_t, h);  h~_t = tanh(W_c [c_t; h_t])
            rnn_input = embedded
            if state.attn_vector is not None:                               # input feeding
                rnn_input = torch.cat([embedded, state.attn_vector.unsqueeze(1)], dim=-1)  # [B, 1, E + O]
            output, hidden = self._recur(rnn_input, state.hidden)           # [B, T, H] = h_t
            context, weights = self.attention(output, memory.keys, memory.values, memory.mask, positions)  # c_t [B, T, D]
            combined = torch.cat([context, output], dim=-1)                 # [B, T, D + H]
        features = torch.tanh(self.combine(combined))                       # [B, T, O] = t_i or h~_t
        attn_vector = features[:, -1] if self.input_feeding else None
        position = None if state.position is None else state.position + steps
        return features, RNNDecoderState(hidden, attn_vector, position), weights

    def _recur(self, inputs: torch.Tensor, hidden: RNNState) -> tuple[torch.Tensor, RNNState]:
        """The RNN over inputs [B, T, I]: its outputs [B, T, H] and the new hidden state."""
        output, new = run_rnn(self.rnn, inputs, as_torch_state(self.rnn, hidden))
        return output, as_state(new)

    def forward(self, tgt_in: torch.Tensor, state: RNNDecoderState, memory: RNNMemory, teacher_forcing: float = 1.0,
                classify_at: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Logits [B, T, V] and weights [B, T, S] for the whole target, `<sos> y1 .. yn` [B, T].

        With teacher_forcing < 1, each step feeds each sentence its gold previous token with that
        probability and its own previous prediction otherwise. Given `classify_at` [B, T] (True
        where a loss will read the logits), the logits are only those positions', [N, V]: under
        full teacher forcing the classifier, the largest layer, then skips the pads.
        """
        if teacher_forcing >= 1.0 and self.parallel:
            features, _, weights = self._features(self.embed(tgt_in), state, memory)
            return self.classify(features, classify_at), weights
        return self.forward_step_by_step(tgt_in, state, memory, teacher_forcing, classify_at)

    def forward_step_by_step(self, tgt_in: torch.Tensor, state: RNNDecoderState, memory: RNNMemory,
                             teacher_forcing: float = 1.0, classify_at: Optional[torch.Tensor] = None
                             ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """`forward` for any configuration, one `_features` call per step."""
        # Under full teacher forcing the inputs are known: embed them once, and run the classifier,
        # the largest layer, once over all steps afterwards (one big matrix product, not T small ones).
        forced = teacher_forcing >= 1.0
        embedded = self.embed(tgt_in) if forced else None                   # [B, T, E]
        outputs: list[torch.Tensor] = []
        all_weights: list[torch.Tensor] = []                                # none without attention
        tokens = tgt_in[:, :1]                                              # [B, 1]
        for t in range(tgt_in.shape[1]):
            step_input = self.embed(tokens) if embedded is None else embedded[:, t : t + 1]
            features, state, weights = self._features(step_input, state, memory)
            if weights is not None:
                all_weights.append(weights)
            if forced:
                outputs.append(features)
                continue
            logits = self.classify(features)
            outputs.append(logits)
            if t + 1 < tgt_in.shape[1]:
                own = logits.argmax(-1)                                     # [B, 1]
                use_gold = torch.rand(own.shape, device=own.device) < teacher_forcing
                tokens = torch.where(use_gold, tgt_in[:, t + 1 : t + 2], own)
        stacked = torch.cat(outputs, dim=1)                                 # [B, T, H] or [B, T, V]
        if forced:
            logits = self.classify(stacked, classify_at)
        else:
            logits = stacked if classify_at is None else stacked[classify_at]
        weights = torch.cat(all_weights, dim=1) if all_weights else None
        return logits, weights
