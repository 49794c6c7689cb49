"""Which number format runs where: `auto` is bf16 where the device computes it natively, fp32 elsewhere.

CPUs multiply bfloat16 natively with AVX512-BF16 or AMX; without them oneDNN converts to float32
and back around every product, so bf16 runs slower than fp32, and some of its bf16 kernels (the
LSTM's under autocast) do not exist at all: such an LSTM runs in fp32 (`FallbackLSTM`). GPUs from Ampere
on compute bf16 natively. Native is not always faster: some CPUs' bf16 units train slower than
fp32 (docs/speed.md), so training under `auto` on a CPU times both (`faster_precision`).
"""

from __future__ import annotations

import functools
import math
import os
import time
from typing import Callable, Iterable, Literal, Mapping, Optional, TypeVar

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from .errors import AttnmtError

# An RNN's state as nn.GRU (h) and nn.LSTM ((h, c)) take and return it.
TorchRNNState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
# What an RNN reads: a batch [B, T, I] or a packed one.
RNNInput = TypeVar("RNNInput", torch.Tensor, PackedSequence)

# oneDNN's instruction set caps (ONEDNN_MAX_CPU_ISA) below AVX512_CORE_BF16: under them oneDNN
# multiplies bf16 without the native instructions, whatever the CPU has.
ISAS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


@functools.cache
def cpu_bf16_features() -> tuple[str, ...]:
    """The names of this CPU's native bf16 instruction sets that oneDNN may use (empty: none)."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    if cap in ISAS_WITHOUT_BF16:
        return ()
    checks = {"AVX512-BF16": "_is_avx512_bf16_supported", "AMX": "_is_amx_tile_supported"}
    return tuple(name for name, check in checks.items() if getattr(torch.cpu, check, lambda: False)())


def native_bf16(device: torch.device) -> bool:
    """True when `device` computes bfloat16 products natively (faster than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and bool(cpu_bf16_features())


def resolve(precision: str, device: torch.device) -> str:
    """`auto` as bf16 or fp32 for `device`; any other precision as it is."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


# bf16 is taken only when it is at least this much faster: its coarser rounding is a cost, and a
# smaller gain is within what two short timings on a busy machine can tell apart.
BF16_AT_MOST = 0.9


def faster_precision(run: Callable[[str], None], repeats: int = 3,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[Literal["fp32", "bf16"], dict[str, float]]:
    """fp32 or bf16, whichever runs `run(precision)` faster, and each one's best seconds.

    Each format runs once untimed (kernels built, memory mapped), then `repeats` times, the two
    alternating so that a program starting or stopping beside this one slows both alike. The best
    time counts, not the mean: another program can only add time to a run, so each format's fastest
    run is the nearest to its own speed."""
    best = {"fp32": math.inf, "bf16": math.inf}
    for precision in best:
        run(precision)
    for _ in range(repeats):
        for precision in best:
            started = clock()
            run(precision)
            best[precision] = min(best[precision], clock() - started)
    return ("bf16" if best["bf16"] < BF16_AT_MOST * best["fp32"] else "fp32"), best


def _device_words(device: torch.device) -> str:
    if device.type == "cpu":
        features = cpu_bf16_features()
        return f"this CPU has {' and '.join(features)}" if features else "this CPU has no AVX512-BF16 or AMX"
    return f"{device} computes bf16 {'natively' if native_bf16(device) else 'only by emulation'}"


def precision_note(settings: Mapping[str, str], device: torch.device, lstm: bool = False) -> Optional[str]:
    """One line on the precision chosen for each part named in `settings` (e.g. {"decode.precision":
    "auto"}) when any is `auto`, or a warning when bf16 is asked of a device without native bf16
    (with what `auto` chose beside it); None when there is nothing to say. `lstm`: the model has an
    LSTM, which runs in fp32 where oneDNN refuses it in bf16 (`lstm_in_fp32`)."""
    resolved = {name: resolve(value, device) for name, value in settings.items()}
    chosen = ", ".join(f"{name} {value}" for name, value in resolved.items())
    asked = [name for name, value in settings.items() if value == "bf16"]
    if asked and not native_bf16(device):
        kinds = {"autocast" if name.startswith("train.") else "bf16" for name in asked}
        fallback = ("; its LSTMs run in fp32 (oneDNN has no bf16 LSTM kernel for this CPU)"
                    if lstm and device.type == "cpu" and any(lstm_in_fp32(kind) for kind in kinds) else "")
        auto = ", ".join(f"{name} {resolved[name]}" for name, value in settings.items() if value == "auto")
        return (f"warning: bf16 asked for ({', '.join(f'{name} bf16' for name in asked)}), but "
                f"{_device_words(device)}: bf16 is emulated and slower than fp32 here{fallback}; "
                f"precision auto picks fp32 on such a device{f' (it chose {auto})' if auto else ''}")
    if "auto" in settings.values():
        return f"precision: {chosen} ({_device_words(device)})"
    return None


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """`bf16` (or `auto` on a device with native bf16): matrix products in bfloat16, while weights,
    optimizer state and loss stay fp32; `fp32`: off."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=resolve(precision, device) == "bf16")


# The start of oneDNN's message when it has no kernel for a call (torch raises it as a RuntimeError).
ONEDNN_REFUSAL = "could not create a primitive descriptor"

# The kinds of bf16 LSTM call ("autocast": under CPU autocast, training; "bf16": bfloat16 weights,
# decoding's copy) that oneDNN refused at a call although `cpu_bf16_lstm` passed: the next ones run
# in fp32 at once.
_refused_at_call: set[str] = set()


@functools.cache
def cpu_bf16_lstm(kind: str) -> bool:
    """True if a bf16 nn.LSTM of `kind` ("autocast" or "bf16", as in `_refused_at_call`) runs on this
    CPU, for each input torch may hand to oneDNN: unpacked (the decoder's), a packed batch (the
    encoder's) and a packed batch whose sentences are all of one length, which torch gives oneDNN's
    kernel whole. Without AVX-512, oneDNN has no such kernel under autocast: the unpacked call fails
    (issue 20), and so does the packed batch of one length (issue 58: found on a real AVX2-only AMD
    EPYC; ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU did not reproduce it)."""
    lstm = nn.LSTM(4, 4, batch_first=True, bidirectional=True)
    x = torch.zeros(2, 3, 4, requires_grad=kind == "autocast")
    if kind == "bf16":
        lstm, x = lstm.bfloat16(), x.bfloat16()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=kind == "autocast"), torch.enable_grad():
            for inputs in (x, *(pack_padded_sequence(x, torch.tensor(n), batch_first=True) for n in ([3, 3], [3, 2]))):
                output, _ = lstm(inputs)
                if kind == "autocast":  # training: the backward too
                    (output.data if isinstance(output, PackedSequence) else output).float().sum().backward()
    except RuntimeError:
        return False
    return True


def has_lstm(modules: Iterable[nn.Module]) -> bool:
    """True if a network's `modules` hold an LSTM, which precision_note names where it runs in fp32 (`lstm_in_fp32`)."""
    return any(isinstance(module, nn.LSTM) for module in modules)


def lstm_in_fp32(kind: str) -> bool:
    """True where a bf16 LSTM of `kind` ("autocast" or "bf16") runs in fp32 on this CPU (`FallbackLSTM`)."""
    return kind in _refused_at_call or not cpu_bf16_lstm(kind)


class FallbackLSTM(nn.LSTM):
    """nn.LSTM that, in bf16 on a CPU, under autocast or with bfloat16 weights, runs in fp32 where
    oneDNN has no kernel for it (`cpu_bf16_lstm`, or a refusal at this call, remembered) instead of
    failing; its outputs then in fp32 under autocast, in bf16 for bf16 weights. Elsewhere it is
    nn.LSTM itself. The RNN family builds its LSTMs as this class."""

    def forward(self, inputs: RNNInput, state: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # type: ignore[override]
                ) -> tuple[RNNInput, TorchRNNState]:
        kind = _bf16_lstm_kind(self, inputs)
        if kind is None:
            return super().forward(inputs, state)
        if not lstm_in_fp32(kind):
            try:
                return super().forward(inputs, state)
            except RuntimeError as err:
                if ONEDNN_REFUSAL not in str(err):
                    raise
                _refused_at_call.add(kind)
        fp32_state = None if state is None else (state[0].float(), state[1].float())
        with torch.autocast("cpu", enabled=False):
            if kind == "autocast":
                return super().forward(inputs.float(), fp32_state)
            weights = {name: weight.float() for name, weight in self.named_parameters()}
            output, (h, c) = functional_call(self, weights, (inputs.float(), fp32_state))
        return output.to(torch.bfloat16), (h.bfloat16(), c.bfloat16())


def _bf16_lstm_kind(rnn: nn.Module, inputs: RNNInput) -> Optional[str]:
    """"autocast" or "bf16" for an LSTM on a CPU under bf16 autocast or with bfloat16 weights, else None."""
    if not isinstance(rnn, nn.LSTM) or inputs.data.device.type != "cpu":
        return None
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
        return "autocast"
    return "bf16" if rnn.weight_ih_l0.dtype == torch.bfloat16 else None


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` picks the GPU when there is one."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise AttnmtError(f"device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise AttnmtError(f"device {name!r}: attnmt runs on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AttnmtError(f"device {name!r}: this machine has no CUDA GPU that torch can use; use cpu or auto")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise AttnmtError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                          f"numbered from 0")
    return device
