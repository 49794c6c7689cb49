"""The whole network: encoder, bridge, attention and decoder, built from a ModelConfig."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .attention import make_attention
from .config import ModelConfig
from .decoder import Decoder, DecoderState, Memory
from .encoder import Encoder, EncoderOutput, RNNState
from .vocab import PAD_ID


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` picks the GPU when there is one."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """`bf16`: matrix products in bfloat16 (weights, optimizer state and loss stay fp32); `fp32`: off.

    CPUs with AVX512-BF16 or AMX, and GPUs from Ampere on, multiply bfloat16 several times faster.
    """
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class Seq2Seq(nn.Module):
    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        self.config = config
        self.encoder = Encoder(src_vocab_size, config.emb_dim, config.enc_hidden, config.enc_layers,
                               config.bidirectional, config.rnn, config.dropout)
        attention, context_dim = make_attention(config.attention, config.dec_hidden,
                                                self.encoder.output_size, config.attn_dim)
        self.decoder = Decoder(tgt_vocab_size, config.emb_dim, config.dec_hidden, config.dec_layers,
                               config.rnn, attention, context_dim, config.decoder,
                               config.input_feeding, config.dropout, config.tie_embeddings)
        self.bridge = (nn.Linear(self.encoder.output_size, config.dec_hidden)
                       if config.bridge == "linear" else None)
        if config.init_uniform > 0:
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -config.init_uniform, config.init_uniform)
            with torch.no_grad():  # padding embeddings stay zero, as nn.Embedding makes them
                self.encoder.embedding.weight[PAD_ID].zero_()
                self.decoder.embedding.weight[PAD_ID].zero_()

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[Memory, DecoderState]:
        """Run the encoder once; return what the decoder attends to and its first state."""
        encoded = self.encoder(src, src_lengths)
        keys = self.decoder.attention.project_keys(encoded.outputs)          # [B, S, A]
        memory = Memory(keys, encoded.outputs, encoded.mask)
        return memory, self.decoder.initial_state(self._bridge(encoded), src.shape[0])

    def _bridge(self, encoded: EncoderOutput) -> RNNState:
        """The decoder's initial hidden state from the encoder's final top-layer state."""
        layers = self.config.dec_layers

        def convert(final: torch.Tensor) -> torch.Tensor:                  # [enc_layers, B, D]
            top = final[-1]                                                 # [B, D]
            if self.config.bridge == "zero":
                top = top.new_zeros(top.shape[0], self.config.dec_hidden)
            elif self.bridge is not None:
                top = torch.tanh(self.bridge(top))                          # [B, H]
            return top.unsqueeze(0).repeat(layers, 1, 1).contiguous()      # [dec_layers, B, H]

        final = encoded.final
        return tuple(map(convert, final)) if isinstance(final, tuple) else convert(final)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                teacher_forcing: float = 1.0, classify_at: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Logits [B, T, V] ([N, V] at `classify_at`, see Decoder.forward) and attention weights [B, T, S]."""
        memory, state = self.encode(src, src_lengths)
        return self.decoder(tgt_in, state, memory, teacher_forcing, classify_at)
