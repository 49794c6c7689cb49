#!/usr/bin/env bash
# Speed side by side: the peers' harness (JoeyNMT, OpenNMT-py), then attnmt's bench/speed.py on
# the same model and data, fp32 (which also decodes with --compile) and bf16 (whose model also
# decodes in int8, eager and compiled), one after the other; prints every figure and the ratios.
#   bash bench/compare_peers.sh [OUT_DIR]          (ORDER=attnmt-first: attnmt's parts before the peers')
#   MODEL=transformer bash bench/compare_peers.sh  (the peers' Transformer and bench/speed.py --arch transformer)
#   PRECISIONS=fp32 bash bench/compare_peers.sh    (attnmt's parts in these precisions only; e.g. on a CPU
#                                                   without native bf16, or one made to act as such:
#                                                   ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
# Needs the peers' venvs: bash ../shared/bench/peers/setup_peers.sh (about 3 minutes, once).
# Run it on an otherwise idle machine: another process on the cores skews every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS_DIR="${PEERS_DIR:-../shared/bench/peers}"
DATA="${DATA:-../shared/data/multi30k}"
OUT="${1:-runs/compare_peers/$(date +%Y%m%d-%H%M%S)}"
PYTHON="${PYTHON:-python}"
export MODEL="${MODEL:-gru_bahdanau}"   # run_peers.sh reads it too
case "$MODEL" in
  gru_bahdanau) ARCH=rnn ;;
  transformer) ARCH=transformer ;;
  *) echo "compare_peers.sh: MODEL=$MODEL: expected gru_bahdanau or transformer" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2


peers() {
  echo "[compare] peers' harness -> $OUT/peers.txt" >&2
  # The fp32 matmul peak before and after, as bench/speed.py measures it around attnmt's parts.
  "$PYTHON" bench/speed.py --data "$DATA" --phase peak --name peers-run > "$OUT/machine.txt"
  SHARED_DATA="$(cd "$DATA" && pwd)" bash "$PEERS_DIR/run_peers.sh" > "$OUT/peers.txt" 2> "$OUT/peers.log"
  "$PYTHON" bench/speed.py --data "$DATA" --phase peak --name peers-run >> "$OUT/machine.txt"
}

attnmt() {
  for precision in ${PRECISIONS:-fp32 bf16}; do
    echo "[compare] attnmt $precision -> $OUT/attnmt_$precision.txt" >&2
    # fp32 decodes also with --compile; the bf16 run's model decodes also in int8, eager and compiled
    if [ "$precision" = fp32 ]; then also=fp32-compiled; else also=int8,int8-compiled; fi
    "$PYTHON" bench/speed.py --data "$DATA" --arch "$ARCH" --out "$OUT/attnmt_$precision" --precision "$precision" \
      --also-decode "$also" --name "attnmt-$precision" > "$OUT/attnmt_$precision.txt"
  done
}

# ORDER=attnmt-first runs attnmt's parts first: a second run in the other order evens out drift.
if [ "${ORDER:-peers-first}" = attnmt-first ]; then attnmt; peers; else peers; attnmt; fi
runs=()
for precision in ${PRECISIONS:-fp32 bf16}; do runs+=("$OUT/attnmt_$precision.txt"); done
cat "$OUT/machine.txt" "$OUT/peers.txt" "${runs[@]}"
"$PYTHON" bench/ratios.py "$OUT/machine.txt" "$OUT/peers.txt" "${runs[@]}" | tee "$OUT/ratios.md"
