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
/ decode.fast_paths false, `--reference` on the decoding commands, build the reference). Every fast
class names the class it replaces (`replaces`), so `fast_paths_in` can say which run.
"""

from __future__ import annotations

from ..seam import Model


def fast_paths_in(network: Model) -> list[str]:
    """The fast classes that run in `network`, each with the class it replaces ("FusedDecoder for
    Decoder"), in the order first met; empty for a network of reference modules."""
    named = [f"{type(m).__name__} for {getattr(m, 'replaces').__name__}" for m in network.modules() if hasattr(m, "replaces")]
    return list(dict.fromkeys(named))
