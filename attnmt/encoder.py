"""The encoder: embeddings and a (bidirectional, multi-layer) GRU or LSTM over the source."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .recurrence import GRULayer
from .vocab import PAD_ID

# GRU: (h,); LSTM: (h, c); each [layers, B, H].
RNNState = tuple[torch.Tensor, ...]

RNN_CLASSES = {"gru": nn.GRU, "lstm": nn.LSTM}


class Dropout(nn.Dropout):
    """nn.Dropout, with the mask drawn by torch.rand on CPUs, where it is twice as fast as bernoulli_."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return super().forward(x)
        keep = torch.rand(x.shape, device=x.device) >= self.p
        return x * keep * (1 / (1 - self.p))


class EncoderOutput(NamedTuple):
    outputs: torch.Tensor  # [B, S, D] every position's state, D = hidden x directions; pads are 0
    final: RNNState        # per layer, both directions' last states side by side: (h,) or (h, c), [layers, B, D]
    mask: torch.Tensor     # [B, S] True at real tokens


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, layers: int,
                 bidirectional: bool, rnn: str, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = Dropout(dropout)
        self.rnn = RNN_CLASSES[rnn](emb_dim, hidden, layers, batch_first=True,
                                    bidirectional=bidirectional, dropout=dropout if layers > 1 else 0.0)
        self.lstm = rnn == "lstm"
        self.directions = 2 if bidirectional else 1
        self.output_size = hidden * self.directions

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """src [B, S] ids, lengths [B] (all >= 1)."""
        embedded = self.dropout(self.embedding(src))                        # [B, S, E]
        if isinstance(self.rnn, nn.GRU) and torch.is_grad_enabled() and src.device.type == "cpu":
            # On CPUs nn.GRU's backward runs autograd through every step's small products; on
            # GPUs cuDNN's fused kernels are faster still.
            outputs, final = self._gru_layers(embedded, lengths.cpu())
        else:
            outputs, final = self._packed_rnn(embedded, lengths.cpu())
        outputs = self.dropout(outputs)                                     # [B, S, D]
        final = tuple(map(self._join_directions, final if self.lstm else (final,)))
        positions = torch.arange(src.shape[1], device=src.device)
        mask = positions.unsqueeze(0) < lengths.to(src.device).unsqueeze(1)  # [B, S], from lengths like packing
        return EncoderOutput(outputs, final, mask)

    def _packed_rnn(self, x: torch.Tensor, lengths: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """self.rnn over x [B, S, E]: outputs [B, S, D], zeros at pads, and its final state (h, or (h, c))."""
        # Packing keeps pads out of the states; the backward direction starts at the real end.
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed_out, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=x.shape[1])
        return outputs, final

    def _gru_layers(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What _packed_rnn returns for a GRU, layer by layer through GRULayer (recurrence.py)."""
        finals = []
        for layer in range(self.rnn.num_layers):
            if layer > 0:
                x = self.dropout(x)                                         # nn.GRU's dropout between layers
            names = [f"l{layer}", f"l{layer}_reverse"][: self.directions]

            def stacked(kind: str) -> torch.Tensor:
                return torch.stack([getattr(self.rnn, f"{kind}_{name}") for name in names])

            x, final = GRULayer.apply(x, lengths, stacked("weight_ih"), stacked("bias_ih"),
                                      stacked("weight_hh"), stacked("bias_hh"))
            finals.append(final)
        return x, torch.cat(finals)

    def _join_directions(self, state: torch.Tensor) -> torch.Tensor:
        layers_x_dirs, batch, hidden = state.shape                          # [layers*dirs, B, H]
        state = state.view(layers_x_dirs // self.directions, self.directions, batch, hidden)
        return state.transpose(1, 2).reshape(-1, batch, self.directions * hidden)  # [layers, B, D]
