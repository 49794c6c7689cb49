"""Which number format runs where: `auto` is bf16 where the device computes it natively, fp32 elsewhere.

CPUs multiply bfloat16 natively with AVX512-BF16 or AMX; without them oneDNN converts to float32
and back around every product, so bf16 runs slower than fp32, and some of its bf16 kernels (the
LSTM's under autocast) do not exist at all. GPUs from Ampere on compute bf16 natively.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import torch
from torch import nn

from .errors import AttnmtError

# An RNN's state as nn.GRU (h) and nn.LSTM ((h, c)) take and return it.
TorchRNNState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]

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


def _device_words(device: torch.device) -> str:
    if device.type == "cpu":
        features = cpu_bf16_features()
        return f"this CPU has {' and '.join(features)}" if features else "this CPU has no AVX512-BF16 or AMX"
    return f"{device} computes bf16 {'natively' if native_bf16(device) else 'only by emulation'}"


def precision_note(settings: dict[str, str], device: torch.device, lstm: bool = False) -> Optional[str]:
    """One line on the precision chosen for each part named in `settings` (e.g. {"decode.precision":
    "auto"}) when any is `auto`, or a warning when bf16 is asked of a device without native bf16;
    None when there is nothing to say. `lstm`: the model trains an LSTM (see `cpu_autocast_lstm`)."""
    resolved = {name: resolve(value, device) for name, value in settings.items()}
    chosen = ", ".join(f"{name} {value}" for name, value in resolved.items())
    if "auto" in settings.values():
        return f"precision: {chosen} ({_device_words(device)})"
    if "bf16" in settings.values() and not native_bf16(device):
        fallback = ("; its LSTM decoder trains in fp32 (oneDNN has no bf16 LSTM kernel for this CPU)"
                    if lstm and device.type == "cpu" and not cpu_autocast_lstm() else "")
        return (f"warning: bf16 asked for ({chosen}), but {_device_words(device)}: bf16 is emulated and slower "
                f"than fp32 here{fallback}; precision auto picks fp32 on such a device")
    return None


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """`bf16` (or `auto` on a device with native bf16): matrix products in bfloat16, while weights,
    optimizer state and loss stay fp32; `fp32`: off."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=resolve(precision, device) == "bf16")


@functools.cache
def cpu_autocast_lstm() -> bool:
    """True if nn.LSTM runs under CPU autocast here; oneDNN has no such kernel on CPUs without
    AVX-512 (packed input, as the encoder gives it, takes another path that works)."""
    lstm = nn.LSTM(4, 4, batch_first=True)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            lstm(torch.zeros(1, 1, 4))
    except RuntimeError:
        return False
    return True


def run_rnn(rnn: nn.Module, inputs: torch.Tensor, state: TorchRNNState) -> tuple[torch.Tensor, TorchRNNState]:
    """`rnn(inputs, state)`, with an LSTM under CPU autocast run in fp32 where oneDNN has no bf16
    LSTM kernel (cpu_autocast_lstm) instead of failing."""
    if (isinstance(rnn, nn.LSTM) and inputs.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and not cpu_autocast_lstm()):
        with torch.autocast("cpu", enabled=False):
            return rnn(inputs.float(), tuple(s.float() for s in state))
    return rnn(inputs, state)


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
