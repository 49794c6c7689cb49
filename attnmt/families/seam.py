"""The seam between a model family and the rest of attnmt: what search, translate, serve, compile
and int8 may ask of a model, its encoder memory and its decoder state. Nothing outside a family
knows a tensor layout; each family (model.arch) implements these in its folder and is registered
in families/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Protocol, TypeVar, overload

import torch

from ..config import ModelConfig
from ..errors import AttnmtError

if TYPE_CHECKING:
    from typing_extensions import Self


class Memory(Protocol):
    """What the decoder reads of the source, computed once per sentence; rows are sentences or beams."""

    @property
    def length(self) -> int: ...                            # source positions held

    @property
    def dtype(self) -> torch.dtype: ...

    def select(self, rows: torch.Tensor) -> Self: ...       # rows `rows` [n], repeated as listed

    def rows(self, start: int, end: Optional[int] = None) -> Self: ...

    def narrow(self, length: int) -> Self: ...              # the first `length` source positions

    def pad(self, length: int) -> Self: ...                 # padded to `length` positions, masked

    def put(self, rows: torch.Tensor, source: Self) -> None: ...  # in place

    def dims(self) -> list[tuple[int, int]]: ...            # per tensor: (row dim, source dim)

    def __iter__(self) -> Iterator[torch.Tensor]: ...        # its tensors, in a fixed order

    def like(self, tensors: list[torch.Tensor]) -> Self: ...  # this structure, from its tensors


class State(Protocol):
    """The decoder's state between steps; rows are sentences or beams."""

    def select(self, index: torch.Tensor) -> Self: ...

    # select(index) where index [rows] names rows of this state, as beam search follows its beams at
    # every step: may reuse this state's tensors, so this state is not to be read again.
    def reorder(self, index: torch.Tensor) -> Self: ...

    def put(self, index: torch.Tensor, source: Self) -> None: ...  # in place

    def tensors(self) -> list[torch.Tensor]: ...

    def like(self, tensors: list[torch.Tensor]) -> Self: ...  # this structure, from tensors()

    def dims(self) -> list[tuple[int, Optional[int]]]: ...  # per tensor: (row dim, dim of decoded positions or None)

    def make_room(self, positions: int) -> Self: ...       # room to write `positions` more positions per row


MemoryT = TypeVar("MemoryT", bound=Memory)
StateT = TypeVar("StateT", bound=State)


class Model(Protocol[MemoryT, StateT]):
    """A model family's network: an nn.Module, of which the rest of attnmt uses the members below;
    its steps take the memory and state of its own encode."""

    # Its modules' fast classes by reference class (fast.use_fast_paths switches them); may be empty.
    fast_classes: dict[type, type]

    @property
    def config(self) -> ModelConfig: ...                     # its family's config (a ModelConfig subclass)

    @property
    def returns_attention(self) -> bool: ...  # decoding steps return weights over the source

    def int8_layers(self) -> list[tuple[torch.nn.Module, torch.dtype]]:
        """The nn.Linear, nn.GRU and nn.LSTM layers of a decoding step, each with the dtype its output
        keeps, for decode.precision int8 (fast/int8.py); empty: the family does not support int8."""
        ...

    def describe(self) -> dict[str, int | str | bool]:
        """What /model, `attnmt info` and the explorer say of the network: "summary", one line naming
        the family and its kinds, then its sizes and kinds by name."""
        ...

    def map_shapes(self) -> dict[str, tuple[int, int]]:
        """The maps attention_maps gives, name -> (layers, heads); empty for a model without attention."""
        ...

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[MemoryT, StateT]: ...

    def token_embeddings(self) -> tuple[torch.nn.Embedding, torch.nn.Embedding]:
        """The source's and the target's token embeddings (one module where they are shared), each
        called once per pass on the very tensor of tokens given: attribution.py replaces their output."""
        ...

    def step(self, prev_tokens: torch.Tensor, state: StateT, memory: MemoryT
             ) -> tuple[torch.Tensor, StateT, Optional[torch.Tensor]]:
        """prev_tokens [B, T] -> logits [B, T, V], the new state, weights [B, T, S] (or None)."""
        ...

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                teacher_forcing: float = 1.0, classify_at: Optional[torch.Tensor] = None
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]: ...

    def attention_maps(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Every attention map of the teacher-forced pass, name -> [B, layers, heads, queries, keys]:
        "cross" (target over source), and "encoder" / "decoder" self-attention where the family has them."""
        ...

    def probed(self, view: "AttentionView") -> tuple["Model", "Probe", "AttentionView"]:
        """A copy of the network (reference modules, eval mode) whose attention `view` records its
        numbers into the probe at each step, and whose attention over the source turns uniform
        while `probe.uniform` is set (attnmt explain); and the view with its defaults filled in.
        Refuses a view the family lacks in one line."""
        ...

    def score_function(self, view: "AttentionView") -> str:
        """The score of `view` as the model computes it, in one line, for learners."""
        ...

    # nn.Module's, as training, decoding and the model file use them.
    def __call__(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                 teacher_forcing: float = 1.0, classify_at: Optional[torch.Tensor] = None
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]: ...   # forward

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def modules(self) -> Iterator[torch.nn.Module]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> object: ...

    @overload
    def to(self, device: torch.device) -> "Model": ...

    @overload
    def to(self, dtype: torch.dtype) -> "Model": ...

    def train(self, mode: bool = True) -> "Model": ...

    def eval(self) -> "Model": ...


@dataclass(frozen=True)
class AttentionView:
    """Which attention to look at: cross (output over source) or decoder self-attention, and for a
    Transformer the layer and head (from 1; None: the last layer, the first head)."""

    kind: str = "cross"
    layer: Optional[int] = None
    head: Optional[int] = None

    def check(self, shapes: dict[str, tuple[int, int]]) -> None:
        """Refuse, in one line, a layer or head (from 1) outside the model's map of this kind; `shapes`:
        name -> (layers, heads), as Model.map_shapes gives them. Every front (plot, align, explain; CLI,
        Python, HTTP) asks this. A kind the model lacks is left to the caller, which says in its own
        words what it offers instead (plot lists the maps; explain's family says why a step has no
        such attention)."""
        if self.kind not in shapes:
            return
        layers, heads = shapes[self.kind]
        if self.layer is not None and not 1 <= self.layer <= layers:
            raise AttnmtError(f"layer {self.layer}: this model's {self.kind} attention has layers 1 to {layers}")
        if self.head is not None and not 1 <= self.head <= heads:
            raise AttnmtError(f"head {self.head}: this model's {self.kind} attention has heads 1 to {heads}")


@dataclass
class ProbeRecord:
    """One step's numbers of the probed attention, each [B, heads, T, keys] (heads 1 for an RNN)."""

    scores: torch.Tensor    # e_j; -inf where masked (pads, the future)
    weights: torch.Tensor   # α_j = softmax(e)_j
    shares: torch.Tensor    # |α_j v_j| / Σ_k |α_k v_k|: how much of the context vector comes from j
    factors: Optional[torch.Tensor] = None  # local-p's Gaussian: α_j = softmax(e)_j × factor_j


class Probe:
    """Shared by a probed network's attention modules: computes their weights, records the chosen
    one's numbers, and makes the attention over the source uniform on request (the counterfactual
    attnmt explain shows: the context as the plain average of the encoder states)."""

    def __init__(self) -> None:
        self.uniform = False
        self.record: Optional[ProbeRecord] = None

    def weigh(self, scores: torch.Tensor, allowed: torch.Tensor, values: torch.Tensor, record: bool,
              over_source: bool, factor: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Weights [B, h, T, K] from scores [B, h, T, K] where `allowed` (broadcast to them) is True,
        times `factor` (local-p's Gaussian) if given; values [B, h, K, d]. Uniform over the allowed
        keys when asked to and this attends the source."""
        allowed = allowed.expand_as(scores)
        scores = scores.masked_fill(~allowed, float("-inf"))
        if self.uniform and over_source:
            weights = allowed.to(scores.dtype) / allowed.sum(-1, keepdim=True)
        else:
            weights = torch.softmax(scores, dim=-1)
            if factor is not None:
                weights = weights * factor
        if record and not self.uniform:
            parts = (weights.unsqueeze(-1) * values.unsqueeze(2)).norm(dim=-1)        # [B, h, T, K] |α_j v_j|
            self.record = ProbeRecord(scores, weights, parts / parts.sum(-1, keepdim=True).clamp_min(1e-30), factor)
        return weights


class SourceMemory:
    """A Memory made of tensors laid out [rows, ...] with the source positions at the dimension
    `dims` gives (1 unless a subclass says otherwise), the first a bool mask [rows, S] (True at real
    tokens): every Memory operation, for any family whose memory is such tensors. Subclasses name
    the tensors; the constructor takes them in iteration order."""

    def __init__(self, *tensors: torch.Tensor):
        self.tensors = tensors

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.tensors)

    @property
    def length(self) -> int:
        return self.tensors[0].shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return next(t.dtype for t in self.tensors if t.is_floating_point())

    def dims(self) -> list[tuple[int, int]]:
        return [(0, 1)] * len(self.tensors)

    def like(self, tensors: list[torch.Tensor]) -> Self:
        return type(self)(*tensors)

    def select(self, rows: torch.Tensor) -> Self:
        return self.like([t.index_select(0, rows) for t in self.tensors])

    def rows(self, start: int, end: Optional[int] = None) -> Self:
        return self.like([t[start:end] for t in self.tensors])

    def _positions(self) -> list[int]:
        return [position for _, position in self.dims()]

    def narrow(self, length: int) -> Self:
        return self.like([t.narrow(dim, 0, length).contiguous() for t, dim in zip(self.tensors, self._positions())])

    def pad(self, length: int) -> Self:
        """New positions are zeros: False in the mask, so nothing attends to them."""
        padded = []
        for t, dim in zip(self.tensors, self._positions()):
            grown = t.new_zeros(*t.shape[:dim], length, *t.shape[dim + 1:])
            grown.narrow(dim, 0, t.shape[dim]).copy_(t)
            padded.append(grown)
        return self.like(padded)

    def put(self, rows: torch.Tensor, source: Self) -> None:
        for mine, theirs, dim in zip(self.tensors, source.tensors, self._positions()):
            if mine.dtype == torch.bool:
                mine.index_fill_(0, rows, False)  # positions past the source's length: masked
            mine.narrow(dim, 0, source.length).index_copy_(0, rows, theirs)
