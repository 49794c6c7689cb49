"""int8 decoding on CPUs: the matrix products of decoding in int8 (decode.precision int8; replaces
the bfloat16 products of those layers).

Each family lists the layers it runs in int8 (`Int8Layers`). The Transformer runs every product in
int8 but the embeddings': each encoder and decoder layer's attention projections and feed-forward
pair, and the output layer (as CTranslate2 does). The RNN runs the products of a decoding step in
int8 (its decoder RNN's input and recurrent weights, the attention's query projection, the combine
layer and the output layer); its bidirectional encoder, the bridge and the source's keys stay
bfloat16. The attention's own arithmetic (scores, softmax, weighted sums) stays bfloat16 in both.
"""

from __future__ import annotations

import copy
import functools
from typing import Optional, Protocol, Union

import torch
from torch import nn

from ..errors import AttnmtError
from ..precision import TorchRNNState
from ..seam import Model, require
from .gru import gru_cell

INT8_MAX = 127
TINY = torch.finfo(torch.float32).tiny  # the scale of an all-zero row: any positive number will do


class Int8Linear(nn.Module):
    """x Wᵀ + b with W in int8, one scale per output, and x quantized to int8 per row at each call.

    The int8 x int8 product accumulates exactly in int32 (VNNI or AMX kernels on recent CPUs;
    speeds in docs/speed.md) and is scaled back to float32, returned as `out_dtype`.
    Symmetric scales (absmax / 127) keep zero exact and need no offsets.
    """

    weight_t: torch.Tensor  # the buffers __init__ registers
    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], out_dtype: torch.dtype = torch.float32):
        super().__init__()
        weight = weight.detach().float()                                               # [N, K]
        scale = weight.abs().amax(dim=1).clamp(min=TINY) / INT8_MAX                     # [N]
        quantized = (weight / scale.unsqueeze(1)).round().to(torch.int8)
        self.register_buffer("weight_t", quantized.t().contiguous())                   # [K, N]
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias.detach().float() if bias is not None else torch.zeros_like(scale))
        self.out_dtype = out_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()                                       # [M, K]
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=TINY) / INT8_MAX     # [M, 1]
        quantized = rows.div(row_scale).round_().to(torch.int8)
        product = torch._int_mm(quantized, self.weight_t)                               # [M, N] int32
        out = product.float().mul_(row_scale).mul_(self.scale).add_(self.bias)
        return out.view(*x.shape[:-1], out.shape[-1]).to(self.out_dtype)


def lstm_cell(gi: torch.Tensor, gh: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An LSTM's new state and cell [B, H] from its gates' input and recurrent parts [B, 4H] (i, f, g, o)."""
    i, f, g, o = (gi + gh).chunk(4, dim=1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


class Int8RNN(nn.Module):
    """A one-direction, batch-first nn.GRU or nn.LSTM for decoding, its products in int8.

    Called like the module it copies: input [B, T, I] and state [layers, B, H] (a pair for LSTM).
    Each layer's input gates take one product for all T steps, its recurrent gates one per step;
    the gate arithmetic is float32, and the outputs and states come back in the given state's dtype.
    """

    def __init__(self, rnn: Union[nn.GRU, nn.LSTM]):
        super().__init__()
        if rnn.bidirectional or not rnn.batch_first:
            raise ValueError("Int8RNN copies one-direction, batch-first RNNs")
        self.mode = rnn.mode                                    # "GRU" or "LSTM", as nn.RNNBase says
        layers = range(rnn.num_layers)
        self.input_gates = nn.ModuleList(
            Int8Linear(getattr(rnn, f"weight_ih_l{k}"), getattr(rnn, f"bias_ih_l{k}")) for k in layers)
        self.recurrent_gates = nn.ModuleList(
            Int8Linear(getattr(rnn, f"weight_hh_l{k}"), getattr(rnn, f"bias_hh_l{k}")) for k in layers)

    def forward(self, x: torch.Tensor, state: TorchRNNState) -> tuple[torch.Tensor, TorchRNNState]:
        h0, c0 = state if isinstance(state, tuple) else (state, None)                  # c0: LSTMs only
        dtype = h0.dtype
        final_h: list[torch.Tensor] = []
        final_c: list[torch.Tensor] = []
        for k, (input_gates, recurrent_gates) in enumerate(zip(self.input_gates, self.recurrent_gates)):
            gi = input_gates(x)                                                        # [B, T, G]
            h, c = h0[k].float(), (None if c0 is None else c0[k].float())              # [B, H]
            outputs = []
            for t in range(x.shape[1]):
                gh = recurrent_gates(h)                                                 # [B, G]
                if c is None:
                    h = gru_cell(gi[:, t], gh, h)
                else:
                    h, c = lstm_cell(gi[:, t], gh, c)
                outputs.append(h)
            x = torch.stack(outputs, dim=1).to(dtype)                                  # [B, T, H]
            final_h.append(h)
            if c is not None:
                final_c.append(c)
        hidden = torch.stack(final_h).to(dtype)                                        # [layers, B, H]
        return x, (hidden if c0 is None else (hidden, torch.stack(final_c).to(dtype)))


def int8_layer(layer: nn.Module, out_dtype: torch.dtype) -> nn.Module:
    """The int8 replacement of an nn.Linear, nn.GRU or nn.LSTM."""
    if isinstance(layer, nn.Linear):
        return Int8Linear(layer.weight, layer.bias, out_dtype)
    if isinstance(layer, (nn.GRU, nn.LSTM)):
        return Int8RNN(layer)
    raise TypeError(f"no int8 replacement for {type(layer).__name__}")


@functools.lru_cache(maxsize=1)
def int8_products_exact() -> bool:
    """Whether torch._int_mm gives the exact int32 product on this CPU. oneDNN's int8 kernels
    without VNNI (seen with ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU) sum pairs in saturating
    int16 and return wrong products for large values."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-INT8_MAX, INT8_MAX + 1, (32, 256), dtype=torch.int8, generator=generator)
    b = torch.randint(-INT8_MAX, INT8_MAX + 1, (256, 32), dtype=torch.int8, generator=generator)
    return torch.equal(torch._int_mm(a, b), a.int() @ b.int())


class Int8Layers(Protocol):
    """What int8 decoding asks of a family's network (seam.py: a capability, not every family's)."""

    def int8_layers(self) -> list[tuple[nn.Module, torch.dtype]]:
        """The nn.Linear, nn.GRU and nn.LSTM layers to run in int8, each with the dtype its output keeps."""
        ...


def int8_decoding_copy(model: Model) -> Model:
    """A bfloat16 copy of `model` for decoding on a CPU, the layers Int8Layers.int8_layers names in int8
    (module docstring), quantized from their float32 weights."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise AttnmtError(f"decode precision int8 runs on CPUs only; use bf16 on {device}")
    quantizable: Int8Layers = require(model, Int8Layers, "decode precision int8 (use bf16 or fp32)")
    layers = quantizable.int8_layers()
    if not int8_products_exact():
        raise AttnmtError("decode precision int8: this CPU's int8 matrix products (oneDNN without VNNI "
                          "kernels) are not exact here; use bf16 or fp32")
    copies: dict[int, nn.Module] = {}                       # deepcopy's memo: id(original) -> its copy
    decoding = copy.deepcopy(model, copies).to(torch.bfloat16).eval()
    replacements = {id(copies[id(layer)]): int8_layer(layer, out_dtype) for layer, out_dtype in layers}
    for parent in list(decoding.modules()):
        for name, child in parent.named_children():
            if id(child) in replacements:
                setattr(parent, name, replacements[id(child)])
    return decoding
