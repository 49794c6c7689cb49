#!/usr/bin/env bash
# The GPU check of docs/gpu.md: attnmt's GPU tests, then a 10-minute Multi30k training of the
# Transformer recipe on the GPU, and its figures (the GPU's name, target tokens/s, best validation
# BLEU, peak GPU memory). Run it from the repository root on a machine with a CUDA GPU and a CUDA
# build of torch (docs/gpu.md), with the corpus at ../shared/data/multi30k or at DATA:
#
#   bash bench/gpu_check.sh [OUT_DIR]        # OUT_DIR: runs/gpu_check by default
#   DATA=/path/to/multi30k MINUTES=10 bash bench/gpu_check.sh
#
# It stops at once, with exit status 1, where torch sees no CUDA GPU. Record its last lines in
# docs/gpu.md with the date and the commit.
set -euo pipefail

PYTHON=${PYTHON:-python}
DATA=${DATA:-../shared/data/multi30k}
MINUTES=${MINUTES:-10}
OUT=${1:-runs/gpu_check}

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA GPU that torch can use here (torch $("$PYTHON" -c 'import torch; print(torch.__version__)'):" \
         "a CPU build, or no GPU or driver); see docs/gpu.md" >&2
    exit 1
fi
if [ ! -d "$DATA" ]; then
    echo "gpu_check: no Multi30k corpus at $DATA (set DATA=...)" >&2
    exit 1
fi

echo "== GPU tests (python -m pytest tests/test_gpu.py -m gpu)"
# Only the GPU tests' file is collected: the others import the test extras (FastAPI's client, ...),
# which a GPU machine's own Python may lack.
"$PYTHON" -m pytest tests/test_gpu.py -m gpu -q -rs

echo "== ${MINUTES}-minute Multi30k training of the Transformer recipe into $OUT"
# Through attnmt's own entry point in this process, so that the peak of PyTorch's allocator can be
# read when it ends (nvidia-smi's figure would add the CUDA context and the cached blocks).
# The script is given with -c, not on stdin, so that preparing the corpus can use its worker
# processes: they run the main program again, and one read from stdin has no file to run.
"$PYTHON" -c "$(cat <<'PY'
import json, sys
import torch
from attnmt.cli import main

out, data, minutes = sys.argv[1:]
status = main(["train", "configs/multi30k_de_en_transformer.yaml", "--overwrite", f"data.path={data}",
               "train.device=cuda", f"train.max_minutes={minutes}", f"train.out_dir={out}"])
if status:
    sys.exit(status)
peak = {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}
with open(f"{out}/gpu_memory.json", "w") as file:
    json.dump(peak, file)
sys.exit(status)
PY
)" "$OUT" "$DATA" "$MINUTES"

echo "== figures"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not found"
"$PYTHON" - "$OUT" <<'PY'
import json, sys
import torch
from attnmt.training.metrics import read_metrics

out = sys.argv[1]
records = read_metrics(out)
epochs = [r for r in records if "target_tokens_per_s" in r]  # the averaged model's record has no speed
averaged = [r for r in records if "average_of_last" in r]
memory = json.load(open(f"{out}/gpu_memory.json"))
speeds = [r["target_tokens_per_s"] for r in epochs]
best = max(epochs, key=lambda r: r.get("valid_bleu", 0.0))
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
print(f"epochs validated: {len(epochs)}, minutes: {epochs[-1]['elapsed_min']}, updates: {epochs[-1]['step']}")
print(f"target tokens/s: median {sorted(speeds)[len(speeds) // 2]:,.0f} over the epochs")
print(f"best validation BLEU: {best.get('valid_bleu')} (epoch {best['epoch']})")
for record in averaged:
    print(f"the last {record['average_of_last']} epochs averaged: validation BLEU {record['valid_bleu']}")
print(f"peak GPU memory: {memory['peak_allocated_gib']} GiB allocated, {memory['peak_reserved_gib']} GiB reserved")
PY
