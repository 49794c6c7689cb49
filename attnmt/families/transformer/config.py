"""The Transformer family's settings: model.arch transformer, its keys beside the shared ones, and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...config import Config, ModelConfig, moved_key, ranged
from ...errors import AttnmtError


@dataclass
class TransformerConfig(ModelConfig):
    """The Transformer (Vaswani et al. 2017); emb_dim is its model width d."""

    arch: str = "transformer"
    # Attention heads (emb_dim must divide by them), the feed-forward width, its activation (silu
    # is the "swish" of Marian and OPUS-MT models), dropout on attention weights and inside the
    # feed-forward block, where the LayerNorm goes (pre: each block's input, and the stack's output;
    # post: after each residual sum, as in the paper), and position encodings (sinusoidal, or
    # learned for max_positions positions; later ones share the last).
    heads: int = ranged(4, "[1, 1024]")
    ff_dim: int = ranged(1024, "[1, 1000000]")
    activation: Literal["relu", "gelu", "silu"] = "relu"
    attn_dropout: float = ranged(0.0, "[0, 1)")
    act_dropout: float = ranged(0.0, "[0, 1)")
    norm: Literal["pre", "post"] = "pre"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = ranged(1024, "[1, 1000000]")
    # How the sinusoids' dimensions are laid out: interleaved, as the paper writes them (sin, cos,
    # sin, cos, ..), or halves, all the sines then all the cosines (tensor2tensor's, fairseq's and
    # Marian's: what an imported OPUS-MT model was trained with). The same frequencies either way.
    sinusoid_layout: Literal["interleaved", "halves"] = "interleaved"
    # How the weights start: xavier (Xavier-uniform weights, PyTorch's biases) or fairseq's (the query,
    # key and value projections at 1/√2 of Xavier's bound, the other layers' biases zero), from which
    # post-norm layers train much faster. Embeddings are N(0, d^-1/2) either way; init_uniform above 0
    # replaces xavier and refuses fairseq.
    init: Literal["xavier", "fairseq"] = "xavier"

    @classmethod
    def moved_keys(cls, values: dict) -> dict:
        # train.teacher_forcing of files that kept it for every family: 1.0, what a Transformer trains with
        return moved_key(values, "teacher_forcing", "train", "model", dropped=1.0)

    def check(self, config: Config) -> None:
        super().check(config)
        if self.init == "fairseq" and self.init_uniform > 0:
            raise AttnmtError(f"model.init fairseq and model.init_uniform {self.init_uniform:g} each say how the weights "
                              f"start: keep one (init_uniform 0 for fairseq's)")
        if self.emb_dim % self.heads:
            raise AttnmtError(f"model.emb_dim ({self.emb_dim}) must be a multiple of model.heads ({self.heads}): "
                              f"each head gets emb_dim / heads dimensions")
