"""The decoding step compiled ahead of time for this CPU (AOTInductor), cached on disk: replaces
the model's eager step in the searches (`--compile`).

A decoding step is a hundred or more small tensor operations (an RNN cell's gates or a
Transformer layer's projections and norms, the attention's scores, softmax and mix, the output
layer); run eagerly, each pays Python and dispatch overhead and its own pass over memory.
Compiled, the elementwise work fuses into a few loops around the matrix products (measured in
docs/speed.md).

`compiled_step(model)` exports the model's step for one token with the batch rows, the source
length and the room for decoded positions (a Transformer's caches) left dynamic, so one program
serves greedy and beam search at every batch size and length; what a step writes into its state's
room it writes in place. Compiling takes a C++ compiler and tens of seconds, once per model,
precision, CPU kind, thread count and torch and attnmt version: the program is kept as
$ATTNMT_CACHE/compiled/step-<key>.pt2, and later processes load it in seconds, mostly spent
importing torch's compiler.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from ..errors import AttnmtError, first_line
from ..files import cache_dir
from ..seam import Model, Rows
from ..vocab import UNK_ID


class StepProgram(nn.Module):
    """A model's step for one token over flat tensors, the form torch.export takes.

    Inputs: tokens [B, 1], the memory's tensors, then the state's, shaped as those of `memory` and
    `state`. Outputs: logits [B, V], the new state's tensors, and the attention weights [B, S] if
    the model returns them.
    """

    def __init__(self, model: Model, memory: Rows, state: Rows):
        super().__init__()
        self.model, self.memory_fields = model, len(memory.tensors)
        self.memory_like, self.state_like = memory.like, state.like

    def forward(self, tokens: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory = self.memory_like(list(tensors[: self.memory_fields]))
        state = self.state_like(list(tensors[self.memory_fields :]))
        logits, new_state, weights = self.model.step(tokens, state, memory)
        weights_out = [] if weights is None else [weights[:, -1]]
        return (logits[:, -1], *new_state, *weights_out)


class CompiledStep:
    """Called like a model's step for one token: (prev_tokens [B, 1], state, memory) -> logits
    [B, 1, V], the new state and weights [B, 1, S] (None without attention)."""

    def __init__(self, program: Callable):
        self.program = program

    def __call__(self, prev_tokens: torch.Tensor, state: Rows, memory: Rows
                 ) -> tuple[torch.Tensor, Rows, Optional[torch.Tensor]]:
        state = state.make_room(prev_tokens.shape[1])   # the program writes the new positions in place
        # The program reads each input as laid out at export, contiguous: it would read a view (a
        # column of a matrix of tokens) at the wrong strides, i.e. other rows' values.
        inputs = [t.contiguous() for t in (prev_tokens, *memory, *state)]
        outputs = list(self.program(*inputs))
        logits = outputs.pop(0)
        # What is left past the state's tensors is the attention weights (a model that returns them).
        weights = outputs.pop().unsqueeze(1) if len(outputs) > len(state.tensors) else None
        return logits.unsqueeze(1), state.like(outputs), weights


def _program_key(model: Model) -> str:
    """What the compiled program depends on: the model's weights and configuration, the code,
    the CPU kind, the thread count (compiled into its loops) and the torch version."""
    digest = hashlib.sha256()
    facts = {"config": dataclasses.asdict(model.config), "torch": torch.__version__,
             "cpu": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
             "threads": torch.get_num_threads()}
    digest.update(json.dumps(facts, sort_keys=True).encode())
    for source in sorted(Path(__file__).parents[1].rglob("*.py")):   # all of attnmt
        digest.update(source.read_bytes())
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def _export(model: Model) -> torch.export.ExportedProgram:
    # Example inputs of two sentences of three and two tokens, two steps decoded: export then keeps
    # the rows, the source length and the room for decoded positions symbolic (an example size of
    # 0 or 1 would be specialized).
    device = next(model.parameters()).device
    src = torch.full((2, 3), UNK_ID, dtype=torch.long, device=device)
    memory, state = model.encode(src, torch.tensor([3, 2], device=device))
    tokens = torch.full((2, 1), UNK_ID, dtype=torch.long, device=device)
    for _ in range(2):
        _, state, _ = model.step(tokens, state, memory)
    state = state.make_room(1)
    rows, length = torch.export.Dim("rows", min=1), torch.export.Dim("source_length", min=1)
    decoded = torch.export.Dim("decoded_positions", min=1)
    memory_shapes = tuple({row: rows} if position is None else {row: rows, position: length}
                          for row, position in memory.dims.values())
    state_shapes = tuple({row: rows} if position is None else {row: rows, position: decoded}
                         for row, position in state.dims.values())
    return torch.export.export(StepProgram(model, memory, state), (tokens, *memory, *state),
                               dynamic_shapes=({0: rows}, (*memory_shapes, *state_shapes)))


def compiled_step(model: Model) -> CompiledStep:
    """`model`'s decoding step, compiled for this CPU: loaded from the cache, or compiled and cached."""
    import torch._inductor  # noqa: F401  (seconds to import: only here)

    if not hasattr(torch._inductor, "aoti_compile_and_package"):
        raise AttnmtError(f"--compile needs torch 2.6 or later (this is {torch.__version__})")
    if next(model.parameters()).device.type != "cpu":
        raise AttnmtError("--compile compiles the decoding step for CPUs; on a GPU leave it off")
    path = cache_dir() / "compiled" / f"step-{_program_key(model)}.pt2"
    if not path.exists():
        _compile(model, path)
    try:
        program = torch._inductor.aoti_load_package(str(path))
    except Exception as err:
        raise AttnmtError(f"{path}: cannot load the compiled decoding step ({first_line(err)}); "
                          f"delete it to compile again") from None
    return CompiledStep(program)


def _compile(model: Model, path: Path) -> None:
    compiler = os.environ.get("CXX", "g++")  # the compiler torch's inductor calls
    if shutil.which(compiler) is None:
        raise AttnmtError(f"--compile needs a C++ compiler to build the decoding step once, and {compiler} "
                          f"is not on PATH; install g++ (or set CXX), or leave --compile off")
    print(f"attnmt: compiling the decoding step for this CPU, once per model (10-60 s), into {path}",
          file=sys.stderr, flush=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A temporary name in the same folder, then a rename: no reader sees half a program.
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.pt2")
    except OSError as err:
        raise AttnmtError(f"{path.parent}: cannot write the compiled decoding step: {err.strerror or err}") from None
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")  # torch's own deprecations, nothing a user can act on
            torch._inductor.aoti_compile_and_package(_export(model), package_path=partial)
        os.replace(partial, path)
    except Exception as err:
        raise AttnmtError(f"compiling the decoding step failed: {first_line(err)}") from None
    finally:
        Path(partial).unlink(missing_ok=True)
