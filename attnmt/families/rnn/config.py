"""The RNN family's settings: model.arch rnn, its keys beside the shared ones, and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...config import Config, ModelConfig, moved_key, ranged
from ...errors import AttnmtError


@dataclass
class RNNConfig(ModelConfig):
    """The encoder-decoder RNN with attention (Bahdanau et al. 2015, Luong et al. 2015)."""

    arch: str = "rnn"
    # The cell of encoder and decoder.
    rnn: Literal["gru", "lstm"] = "gru"
    # The encoder's state width per direction (its outputs are enc_hidden x directions wide).
    enc_hidden: int = ranged(256, "[1, 65536]")
    bidirectional: bool = True
    # The decoder's state width.
    dec_hidden: int = ranged(512, "[1, 65536]")
    # The score of decoder state s and encoder output h: bahdanau v^T tanh(W_q s + W_k h);
    # concat v^T tanh(W[s; h] + b); dot s^T h; scaled_dot s^T h / sqrt(d); general s^T W h; none, plain seq2seq. local_m and
    # local_p are Luong's local attention: model.local_score inside a window of source positions
    # around p_t = t (local_m) or a predicted p_t, Gaussian-weighted (local_p).
    attention: Literal["bahdanau", "dot", "scaled_dot", "general", "concat", "local_m", "local_p", "none"] = "bahdanau"
    # local_m / local_p: the window's half width D (positions p_t - D .. p_t + D; Luong: 10) and
    # the score inside it.
    local_window: int = ranged(10, "[1, 10000]")
    local_score: Literal["dot", "scaled_dot", "general", "concat"] = "general"
    # The width of the additive (bahdanau, concat) score's hidden layer.
    attn_dim: int = ranged(256, "[1, 65536]")
    # bahdanau attends with the previous state, then runs the RNN; luong runs the RNN first, then
    # attends.
    decoder: Literal["bahdanau", "luong"] = "bahdanau"
    # luong order: feed the previous attentional vector into the RNN with the embedding.
    input_feeding: bool = False
    # The decoder's first state from the encoder's last: tanh(W h), h as is, or zeros.
    bridge: Literal["linear", "copy", "zero"] = "linear"
    # In training, the chance that a step is fed the gold previous token rather than the model's own
    # (below 1: scheduled sampling, step by step).
    teacher_forcing: float = ranged(1.0, "[0, 1]")

    @property
    def encoder_output_size(self) -> int:
        return self.enc_hidden * (2 if self.bidirectional else 1)

    @classmethod
    def moved_keys(cls, values: dict) -> dict:
        # train.teacher_forcing, before scheduled sampling was the RNN's own
        return moved_key(values, "teacher_forcing", "train", "model")

    def without_attention(self) -> str:
        return "model.attention none"

    def check(self, config: Config) -> None:
        super().check(config)
        enc_out = self.encoder_output_size
        local = self.attention in ("local_m", "local_p")
        dot = (f"model.attention={self.attention}" if self.attention in ("dot", "scaled_dot") else
               f"model.local_score={self.local_score}" if local and self.local_score in ("dot", "scaled_dot") else None)
        if dot and enc_out != self.dec_hidden:
            raise AttnmtError(f"{dot} needs encoder outputs ({enc_out}) as wide as model.dec_hidden ({self.dec_hidden})")
        if self.bridge == "copy" and enc_out != self.dec_hidden:
            raise AttnmtError(f"model.bridge=copy needs encoder outputs ({enc_out}) == model.dec_hidden "
                              f"({self.dec_hidden})")
        if self.input_feeding and self.decoder != "luong":
            raise AttnmtError("model.input_feeding applies to model.decoder=luong only (bahdanau feeds the context "
                              "already)")
