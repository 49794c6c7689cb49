"""The seam between a model family and the rest of attnmt: the five things every family gives
(`Model`), and `Rows`, the memory and state its decoding steps pass around, whose row operations
are written here once. Nothing outside a family knows a tensor layout.

What only some consumers need is not here: each such capability is a small protocol owned by the
code that asks for it (explain.Explainable, translate.AttentionMaps, aligner.TokenEmbeddings,
fast.int8.Int8Layers), and a family without it is refused in one line where it is asked
(`require`). AttentionView and Probe are the words of attnmt explain's capability that a family's
network needs to speak it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Protocol, TypeVar

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .errors import AttnmtError

if TYPE_CHECKING:
    from typing_extensions import Self

# Of one tensor: the dimension that indexes rows (sentences or beams), and the one that indexes
# positions (the source's in a memory, the decoded ones in a state), or None.
Dims = tuple[int, Optional[int]]


class Rows:
    """Named tensors with one row per sentence or beam: an encoder's memory or a decoder's state.
    A family's subclass sets `tensors` (name -> tensor, in a fixed order) and `dims` (name -> Dims,
    in the same order) and names its tensors for its own code; the operations below are
    every family's, overridden only for speed (the Transformer's in-place caches)."""

    tensors: dict[str, torch.Tensor]
    dims: dict[str, Dims]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.tensors.values())

    def like(self, tensors: list[torch.Tensor]) -> Self:
        """This structure holding `tensors`, in the order of iteration (compiled steps pass them flat)."""
        new = copy.copy(self)
        new.tensors = dict(zip(self.tensors, tensors, strict=True))
        return new

    def _map(self, change) -> Self:
        """`change(tensor, row dim, position dim)` applied to every tensor."""
        return self.like([change(t, *self.dims[name]) for name, t in self.tensors.items()])

    @property
    def length(self) -> int:
        """Positions held: those of the first tensor that has positions."""
        return next(t.shape[pos] for name, t in self.tensors.items() if (pos := self.dims[name][1]) is not None)

    @property
    def dtype(self) -> torch.dtype:
        return next(t.dtype for t in self.tensors.values() if t.is_floating_point())

    def select(self, rows: torch.Tensor) -> Self:
        """The rows `rows` [n], repeated as listed (to follow beams, or to keep some)."""
        return self._map(lambda t, row, _: t.index_select(row, rows))

    def reorder(self, rows: torch.Tensor) -> Self:
        """select(rows) where rows [all rows] names rows of this one, as beam search follows its beams at
        every step: may reuse this one's tensors, so this one is not to be read again."""
        return self.select(rows)

    def slice(self, start: int, end: Optional[int] = None) -> Self:
        """Rows start..end-1."""
        return self._map(lambda t, row, _: t.narrow(row, start, (t.shape[row] if end is None else end) - start))

    def narrow(self, length: int) -> Self:
        """The first `length` positions."""
        return self._map(lambda t, _, pos: t if pos is None else t.narrow(pos, 0, length).contiguous())

    def pad(self, length: int) -> Self:
        """Grown to `length` positions; the new ones are zeros (False in a mask: nothing attends to them)."""
        def grow(t: torch.Tensor, _: int, pos: Optional[int]) -> torch.Tensor:
            if pos is None:
                return t
            return F.pad(t, (0, 0) * (t.dim() - 1 - pos) + (0, length - t.shape[pos]))
        return self._map(grow)

    def put(self, rows: torch.Tensor, source: Self) -> None:
        """Overwrite the rows `rows` in place with those of `source`, which may hold fewer positions (a
        mask is False past them)."""
        for name, mine in self.tensors.items():
            theirs, (row, pos) = source.tensors[name], self.dims[name]
            if mine.dtype == torch.bool:
                mine.index_fill_(row, rows, False)
            if pos is not None:
                mine = mine.narrow(pos, 0, theirs.shape[pos])
            mine.index_copy_(row, rows, theirs)

    def make_room(self, positions: int) -> Self:
        """Room to write `positions` more positions per row: itself, unless a step writes positions in place."""
        return self


MemoryT = TypeVar("MemoryT", bound=Rows)
StateT = TypeVar("StateT", bound=Rows)


class Model(Protocol[MemoryT, StateT]):
    """A model family's network, an nn.Module: what training, the searches and the model file ask of it."""

    @property
    def config(self) -> ModelConfig: ...                     # its family's config (a ModelConfig subclass)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[MemoryT, StateT]:
        """src [B, S], src_lengths [B] -> what the decoder reads of the source, and its first state."""
        ...

    def step(self, prev_tokens: torch.Tensor, state: StateT, memory: MemoryT
             ) -> tuple[torch.Tensor, StateT, Optional[torch.Tensor]]:
        """One decoding step: prev_tokens [B, T] -> logits [B, T, V], the new state, and the attention
        weights over the source [B, T, S] that heatmaps show (None for a model without attention)."""
        ...

    def features(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The teacher-forced pass training takes: what the output layer reads at every target position,
        [B, T, O], given the target `<sos> y1 .. yn` [B, T], and the weights over the source [B, T, S] (or None)."""
        ...

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """features [.., O] -> logits [.., V]."""
        ...

    def describe(self) -> dict[str, int | str | bool]:
        """What /model, `attnmt info` and the explorer say of the network: "summary", one line naming
        the family and its kinds, then its sizes and kinds by name."""
        ...

    # nn.Module's, as training, decoding and the model file use them.
    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def modules(self) -> Iterator[torch.nn.Module]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> object: ...

    def to(self, *args: Any, **kwargs: Any) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


def forced_logits(model: Model, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of the teacher-forced pass over tgt_in [B, T] (step.TeacherForced, which training
    runs, computes those at the positions a loss reads only)."""
    features, _ = model.features(src, src_lengths, tgt_in)
    return model.output_layer(features)


def _missing(model: object, capability: Any) -> list[str]:
    """The members of the protocol `capability` that `model` lacks. Not isinstance: a runtime protocol's
    answer is cached per class (ABCMeta), where this looks at the object itself each time."""
    members = {name for kind in capability.__mro__[:-1] for name in vars(kind) if not name.startswith("_")}
    return sorted(name for name in members if not hasattr(model, name))


def gives(model: object, capability: Any) -> bool:
    """Whether `model` has every member of the protocol `capability`."""
    return not _missing(model, capability)


def require(model: object, capability: Any, doing: str) -> Any:
    """`model`, if it has `capability` (a protocol: the caller annotates what it gets as one), or one line
    saying its family cannot do `doing` and which members it lacks."""
    missing = _missing(model, capability)
    if not missing:
        return model
    arch = getattr(getattr(model, "config", None), "arch", type(model).__name__)
    raise AttnmtError(f"{doing}: model.arch {arch} does not give it (its network has no {', '.join(missing)})")


@dataclass(frozen=True)
class AttentionView:
    """Which attention to look at: cross (output over source) or decoder self-attention, and for a
    Transformer the layer and head (from 1; None: the last layer, the first head)."""

    kind: str = "cross"
    layer: Optional[int] = None
    head: Optional[int] = None

    def check(self, shapes: dict[str, tuple[int, int]]) -> None:
        """Refuse, in one line, a layer or head (from 1) outside the model's map of this kind; `shapes`:
        name -> (layers, heads), as AttentionMaps.map_shapes gives them. Every front (plot, align, explain;
        CLI, Python, HTTP) asks this. A kind the model lacks is left to the caller, which says in its own
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
