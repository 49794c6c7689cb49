"""The one check of an attention view (family.AttentionView: which map, layer and head) against the
maps a model has: `attnmt plot`, `attnmt align` and `attnmt explain`, and the Python and HTTP calls
behind them, refuse a layer or head the model lacks in the same line."""

from __future__ import annotations

from .errors import AttnmtError
from .family import AttentionView


def check_view(view: AttentionView, shapes: dict[str, tuple[int, int]]) -> None:
    """Refuse, in one line, a layer or head of `view` (from 1) outside the model's map of its kind;
    `shapes`: name -> (layers, heads), as Model.map_shapes gives them. A kind the model lacks is
    left to the caller, which says in its own words what it offers instead (plot lists the maps;
    explain's family says why a step has no such attention)."""
    if view.kind not in shapes:
        return
    layers, heads = shapes[view.kind]
    if view.layer is not None and not 1 <= view.layer <= layers:
        raise AttnmtError(f"layer {view.layer}: this model's {view.kind} attention has layers 1 to {layers}")
    if view.head is not None and not 1 <= view.head <= heads:
        raise AttnmtError(f"head {view.head}: this model's {view.kind} attention has heads 1 to {heads}")
