"""The encoder: embeddings and a (bidirectional, multi-layer) GRU or LSTM over the source.

Bahdanau et al. (2015): a bidirectional RNN reads the sentence forwards and backwards, and each
position's annotation h_j = [→h_j; ←h_j] joins both directions' states, so it summarises the words
around x_j on both sides. Those annotations are what attention reads.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ...precision import FallbackLSTM
from ...vocab import PAD_ID

# GRU: (h,); LSTM: (h, c); each [layers, B, H].
RNNState = tuple[torch.Tensor, ...]

# An LSTM in bf16 runs in fp32 on a CPU whose oneDNN has no bf16 kernel for it (precision.py).
RNN_CLASSES = {"gru": nn.GRU, "lstm": FallbackLSTM}


class EncoderOutput(NamedTuple):
    outputs: torch.Tensor  # [B, S, D] every position's annotation h_j, D = hidden x directions; pads are 0
    final: RNNState        # per layer, both directions' last states side by side: (h,) or (h, c), [layers, B, D]
    mask: torch.Tensor     # [B, S] True at real tokens


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, layers: int,
                 bidirectional: bool, rnn: str, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CLASSES[rnn](emb_dim, hidden, layers, batch_first=True,
                                    bidirectional=bidirectional, dropout=dropout if layers > 1 else 0.0)
        self.directions = 2 if bidirectional else 1
        self.output_size = hidden * self.directions

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """src [B, S] ids, lengths [B] (all >= 1)."""
        embedded = self.dropout(self.embedding(src))                        # [B, S, E]
        outputs, final = self.run_rnn(embedded, lengths.cpu())             # [B, S, D]
        outputs = self.dropout(outputs)
        final = tuple(map(self._join_directions, final))
        positions = torch.arange(src.shape[1], device=src.device)
        mask = positions.unsqueeze(0) < lengths.to(src.device).unsqueeze(1)  # [B, S], from lengths like packing
        return EncoderOutput(outputs, final, mask)

    def run_rnn(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, RNNState]:
        """The RNN over x [B, S, E]: outputs [B, S, D], zeros at pads, and its final state, (h,) or
        (h, c), each [layers x directions, B, H]."""
        # Packing keeps pads out of the states; the backward direction starts at the real end.
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed_out, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=x.shape[1])
        return outputs, final if isinstance(final, tuple) else (final,)   # nn.LSTM's (h, c), nn.GRU's h

    def _join_directions(self, state: torch.Tensor) -> torch.Tensor:
        layers_x_dirs, batch, hidden = state.shape                          # [layers*dirs, B, H]
        state = state.view(layers_x_dirs // self.directions, self.directions, batch, hidden)
        return state.transpose(1, 2).reshape(-1, batch, self.directions * hidden)  # [layers, B, D]
