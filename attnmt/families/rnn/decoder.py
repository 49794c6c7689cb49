"""The decoder, in the order of either paper, with any attention kind.

bahdanau order (Bahdanau et al. 2015): attend with the previous state s_{t-1}, feed
    [embedding; context] to the RNN, classify the deep output tanh(W_o [s_t; context; embedding]).
luong order (Luong et al. 2015): run the RNN on the embedding (plus, with input feeding, the
    previous attentional vector), attend with the new state h_t, combine
    h~_t = tanh(W_c [context; h_t]) and classify h~_t.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ...seam import Rows
from ...vocab import PAD_ID
from .attention import Attention, AttentionProbe
from .encoder import RNN_CLASSES, RNNState


class RNNMemory(Rows):
    """What the decoder attends to, computed once per sentence; rows are sentences (or beams)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor):
        # keys [B, S, A] projected for the attention kind; values [B, S, D], the encoder outputs h_j;
        # mask [B, S], True at real tokens.
        self.tensors = {"keys": keys, "values": values, "mask": mask}
        self.dims = {"keys": (0, 1), "values": (0, 1), "mask": (0, 1)}

    @property
    def keys(self) -> torch.Tensor:
        return self.tensors["keys"]

    @property
    def values(self) -> torch.Tensor:
        return self.tensors["values"]

    @property
    def mask(self) -> torch.Tensor:
        return self.tensors["mask"]


class RNNDecoderState(Rows):
    """The decoder's state between steps; rows are sentences (or beams)."""

    def __init__(self, hidden: RNNState, attn_vector: Optional[torch.Tensor], position: Optional[torch.Tensor] = None):
        # hidden: (h,) for a GRU, (h, c) for an LSTM, each [layers, B, H]; attn_vector [B, O], the
        # previous h~_t, for input feeding (luong order); position [B] long: t of the next step, from
        # 1 (for local attention).
        named = {"h": hidden[0], "c": hidden[1] if len(hidden) > 1 else None, "attn_vector": attn_vector,
                 "position": position}
        self.tensors = {name: t for name, t in named.items() if t is not None}
        self.dims = {name: ((1, None) if name in ("h", "c") else (0, None)) for name in self.tensors}

    @property
    def hidden(self) -> RNNState:
        return tuple(self.tensors[name] for name in ("h", "c") if name in self.tensors)

    @property
    def attn_vector(self) -> Optional[torch.Tensor]:
        return self.tensors.get("attn_vector")

    @property
    def position(self) -> Optional[torch.Tensor]:
        return self.tensors.get("position")


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
        self.attention: Attention | AttentionProbe = attention  # an AttentionProbe in the copy attnmt explain probes (fit_probe)
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

    def step_features(self, prev_tokens: torch.Tensor, state: RNNDecoderState, memory: RNNMemory
                      ) -> tuple[torch.Tensor, RNNDecoderState, Optional[torch.Tensor]]:
        """Decode T steps given the previous tokens [B, T] (T > 1 only when `parallel`): the features
        [B, T, O] the output layer reads, the new state and the attention weights [B, T, S] (None for `none`)."""
        return self._features(self.embed(prev_tokens), state, memory)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(tokens))                         # [B, T, E]

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [.., V] from features [.., O]."""
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
        output, new = self.rnn(inputs, hidden if self.rnn.mode == "LSTM" else hidden[0])  # nn.LSTM takes (h, c), nn.GRU h
        return output, new if isinstance(new, tuple) else (new,)

    def features(self, tgt_in: torch.Tensor, state: RNNDecoderState, memory: RNNMemory, teacher_forcing: float = 1.0
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Features [B, T, O] and weights [B, T, S] for the whole target, `<sos> y1 .. yn` [B, T].

        With teacher_forcing < 1 (scheduled sampling), each step feeds each sentence its gold previous
        token with that probability and its own previous prediction otherwise.
        """
        if teacher_forcing >= 1.0 and self.parallel:
            features, _, weights = self._features(self.embed(tgt_in), state, memory)
            return features, weights
        return self.features_step_by_step(tgt_in, state, memory, teacher_forcing)

    def features_step_by_step(self, tgt_in: torch.Tensor, state: RNNDecoderState, memory: RNNMemory,
                              teacher_forcing: float = 1.0) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """`features` for any configuration, one `_features` call per step."""
        # Under full teacher forcing the inputs are known: embed them once.
        forced = teacher_forcing >= 1.0
        embedded = self.embed(tgt_in) if forced else None                   # [B, T, E]
        outputs: list[torch.Tensor] = []
        all_weights: list[torch.Tensor] = []                                # none without attention
        tokens = tgt_in[:, :1]                                              # [B, 1]
        for t in range(tgt_in.shape[1]):
            step_input = self.embed(tokens) if embedded is None else embedded[:, t : t + 1]
            features, state, weights = self._features(step_input, state, memory)
            outputs.append(features)
            if weights is not None:
                all_weights.append(weights)
            if not forced and t + 1 < tgt_in.shape[1]:
                with torch.no_grad():                                       # a choice: no gradient flows through it
                    own = self.output_layer(features).argmax(-1)            # [B, 1]
                use_gold = torch.rand(own.shape, device=own.device) < teacher_forcing
                tokens = torch.where(use_gold, tgt_in[:, t + 1 : t + 2], own)
        weights = torch.cat(all_weights, dim=1) if all_weights else None
        return torch.cat(outputs, dim=1), weights                           # [B, T, O], [B, T, S]
