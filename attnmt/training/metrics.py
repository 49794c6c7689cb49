"""What a training run leaves to look at: metrics.jsonl, curves.png and, if asked, TensorBoard.

Every validation appends one JSON line to OUT/metrics.jsonl (step, epoch, losses, perplexity,
BLEU and exact match, learning rate, target tokens per second, minutes so far, the label smoothing
in the training loss) and redraws OUT/curves.png. A resumed run first drops the lines its
checkpoint does not cover, so the file never holds a validation twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..errors import AttnmtError
from ..files import atomic_write
from ..plot import plot_curves

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file, or of the one in a run's folder."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise AttnmtError(f"{path}: no such file (a training run writes {METRICS_FILE} into train.out_dir)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise AttnmtError(f"{path}: cannot read: {err}") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise AttnmtError(f"{path}, line {number}: not a JSON record") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise AttnmtError(f"{path}, line {number}: a record needs an integer \"step\"")
        records.append(record)
    return records


class MetricsWriter:
    """Appends each validation's record to metrics.jsonl, redraws curves.png, feeds TensorBoard."""

    def __init__(self, out_dir: Path, resumed_at_step: Optional[int], tensorboard: bool) -> None:
        self.path, self.curves = out_dir / METRICS_FILE, out_dir / CURVES_FILE
        kept = []
        if resumed_at_step is not None and self.path.exists():
            # Lines past the checkpoint come from validations the resumed run will do again.
            kept = [r for r in read_metrics(self.path) if r["step"] <= resumed_at_step]
        atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode())
        self.records = kept
        self.board = _tensorboard_writer(out_dir) if tensorboard else None

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")
        plot_curves({self.path.parent.name: self.records}, self.curves)
        if self.board is not None:
            for key, value in record.items():
                # label_smoothing is a setting, the same at every step: no curve
                if key not in ("step", "epoch", "label_smoothing") and isinstance(value, (int, float)):
                    self.board.add_scalar(key, value, record["step"])
            self.board.flush()

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


def _tensorboard_writer(out_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise AttnmtError("train.tensorboard is true but the tensorboard package is not installed: "
                          "pip install tensorboard, or set train.tensorboard=false") from None
    return SummaryWriter(log_dir=str(out_dir / "tensorboard"))
