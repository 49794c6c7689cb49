#!/usr/bin/env bash
# Speed side by side: the peers' harness (JoeyNMT, OpenNMT-py), then attnmt's bench/speed.py on
# the same model and data, fp32 (which also decodes with --compile) and bf16 (whose model also
# decodes in int8, eager and compiled), one after the other; prints every figure and the ratios.
#   bash bench/compare_peers.sh [OUT_DIR]          (ORDER=attnmt-first: attnmt's parts before the peers')
#   MODEL=transformer bash bench/compare_peers.sh  (the peers' Transformer and bench/speed.py --arch transformer)
#   PRECISIONS=fp32 bash bench/compare_peers.sh    (attnmt's parts in these precisions only; e.g. on a CPU
#                                                   without native bf16, or one made to act as such:
#                                                   ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
#   DEVICE=cuda bash bench/compare_peers.sh        (everything on the first GPU: the peers' harness copied into
#                                                   OUT_DIR/harness with their GPU switches on, attnmt's parts with
#                                                   --device cuda; GPU memory from nvidia-smi, bench/gpu_memory.py;
#                                                   int8 and --compile, CPU-only, are left out)
# Needs the peers' venvs: bash ../shared/bench/peers/setup_peers.sh (about 3 minutes, once; on a GPU machine,
# with torch's CUDA build in them).
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
DEVICE="${DEVICE:-cpu}"
case "$DEVICE" in
  cpu|cuda) ;;
  *) echo "compare_peers.sh: DEVICE=$DEVICE: expected cpu or cuda" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2

# The peers' harness as it is on a CPU; on a GPU a copy with each peer's GPU switch on, and
# bench/gpu_memory.py in place of /usr/bin/time -v (the same lines, and the GPU's memory).
harness() {
  if [ "$DEVICE" = cpu ]; then echo "$PEERS_DIR"; return; fi
  local copy="$OUT/harness"
  rm -rf "$copy" && cp -r "$PEERS_DIR" "$copy"
  sed -i 's/^use_cuda: False/use_cuda: True/' "$copy"/configs/joey_*.yaml
  sed -i 's/^gpu_ranks: \[\]/gpu_ranks: [0]/' "$copy"/configs/onmt_*.yaml
  sed -i -e 's/ CUDA_VISIBLE_DEVICES=""//' -e 's/-gpu -1/-gpu 0/' \
      -e "s#^TIME=(/usr/bin/time -v -o)#TIME=($PYTHON $PWD/bench/gpu_memory.py -o)#" "$copy/run_peers.sh"
  # Each edit must have taken: a harness that silently stayed on the CPU would be a wrong figure.
  grep -q '^use_cuda: True' "$copy"/configs/joey_"$MODEL".yaml && grep -q '^gpu_ranks: \[0\]' "$copy"/configs/onmt_"$MODEL".yaml \
    && grep -q -- '-gpu 0' "$copy/run_peers.sh" && ! grep -q 'CUDA_VISIBLE_DEVICES=""' "$copy/run_peers.sh" \
    && grep -q 'gpu_memory.py' "$copy/run_peers.sh" || { echo "compare_peers.sh: the peers' harness changed; update harness()" >&2; exit 1; }
  echo "$copy"
}


peers() {
  echo "[compare] peers' harness -> $OUT/peers.txt" >&2
  # The fp32 matmul peak before and after, as bench/speed.py measures it around attnmt's parts.
  local run_dir="$OUT/peers_run" harness_dir
  harness_dir=$(harness)
  "$PYTHON" bench/speed.py --data "$DATA" --device "$DEVICE" --phase peak --name peers-run > "$OUT/machine.txt"
  SHARED_DATA="$(cd "$DATA" && pwd)" RUN_DIR="$run_dir" bash "$harness_dir/run_peers.sh" > "$OUT/peers.txt" 2> "$OUT/peers.log"
  if [ "$DEVICE" = cuda ]; then "$PYTHON" bench/gpu_memory.py --metrics "$run_dir" >> "$OUT/peers.txt"; fi
  "$PYTHON" bench/speed.py --data "$DATA" --device "$DEVICE" --phase peak --name peers-run >> "$OUT/machine.txt"
}

attnmt() {
  for precision in ${PRECISIONS:-fp32 bf16}; do
    echo "[compare] attnmt $precision -> $OUT/attnmt_$precision.txt" >&2
    # fp32 decodes also with --compile; the bf16 run's model decodes also in int8, eager and compiled
    if [ "$precision" = fp32 ]; then also=fp32-compiled; else also=int8,int8-compiled; fi
    if [ "$DEVICE" = cuda ]; then also=; fi
    "$PYTHON" bench/speed.py --data "$DATA" --arch "$ARCH" --out "$OUT/attnmt_$precision" --precision "$precision" \
      --device "$DEVICE" --also-decode "$also" --name "attnmt-$precision" > "$OUT/attnmt_$precision.txt"
  done
}

# ORDER=attnmt-first runs attnmt's parts first: a second run in the other order evens out drift.
if [ "${ORDER:-peers-first}" = attnmt-first ]; then attnmt; peers; else peers; attnmt; fi
runs=()
for precision in ${PRECISIONS:-fp32 bf16}; do runs+=("$OUT/attnmt_$precision.txt"); done
cat "$OUT/machine.txt" "$OUT/peers.txt" "${runs[@]}"
"$PYTHON" bench/ratios.py "$OUT/machine.txt" "$OUT/peers.txt" "${runs[@]}" | tee "$OUT/ratios.md"
