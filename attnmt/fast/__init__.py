"""Fast paths: faster ways to compute what the reference modules compute, each beside the piece it
replaces, each tested against it (tests/test_fast.py). Those of one model family live in its folder
(families/rnn/fast_attention.py, fast_recurrence.py; families/transformer/fast.py); these serve all:

    layers.py      RandDropout and BlockedLinear: a cheaper dropout mask on CPUs, the output layer's
                   float32 decoding product in blocks (`use_fast_layers`)
    gru.py         a GRU cell's equations in place, forward and hand-written backward (RNN training, int8)
    int8.py        decode.precision int8: every product of a decoding step in int8
    compiled.py    --compile: the decoding step compiled ahead of time for this CPU
    process.py     the allocator and oneDNN cache settings training runs best with (entry points only)

A family's network chooses its fast classes where it is built (its constructor's `fast`; train.fast_paths
/ decode.fast_paths false, `--reference` on the decoding commands, build the reference), each only
where the model's settings let its code run. Every fast class names the class it replaces
(`replaces`) and says where its own code runs (`runs(device)`: in training or decoding, on which
devices), so `fast_paths_in` can say which run.
"""

from __future__ import annotations

from ..seam import Model


def fast_paths_in(network: Model) -> list[str]:
    """The fast classes whose own code runs in `network` as it stands, each with the class it replaces
    ("FusedDecoder for Decoder"), in the order first met: those of its training steps when it is in
    training mode, of decoding when not, on the device of its weights; empty for a network of
    reference modules."""
    device = next(network.parameters()).device
    named = [f"{type(m).__name__} for {getattr(m, 'replaces').__name__}" for m in network.modules()
             if hasattr(m, "replaces") and getattr(m, "runs")(device)]
    return list(dict.fromkeys(named))
