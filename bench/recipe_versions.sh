#!/usr/bin/env bash
# Both recipes trained for one epoch by two checkouts of attnmt, the weights compared bit for bit:
#
#   git worktree add /tmp/attnmt-old HEAD~1
#   bash bench/recipe_versions.sh /tmp/attnmt-old . [PAIRS_DIR]
#
# PAIRS_DIR: the first 3,000 Multi30k training pairs, 200 validation and 100 test pairs as line-aligned
# files (train.de/.en, val.*, test_2016_flickr.*), made from ../shared/data/multi30k when not given.
# Each checkout trains configs/multi30k_de_en.yaml and configs/multi30k_de_en_transformer.yaml (its own
# copies) with train.epochs=1, train.max_minutes=0, train.threads=2, in its own cache folder; then the
# sha256 of each model file's weights and its metrics.jsonl record are printed, old then new.
set -euo pipefail
old=$(cd "$1" && pwd); new=$(cd "$2" && pwd)
pairs=${3:-}
work=$(mktemp -d)
if [ -z "$pairs" ]; then
    pairs=$work/pairs; mkdir -p "$pairs"
    for side in de en; do
        zcat ../shared/data/multi30k/train.$side.gz | head -3000 > "$pairs/train.$side"
        zcat ../shared/data/multi30k/val.$side.gz | head -200 > "$pairs/val.$side"
        zcat ../shared/data/multi30k/test_2016_flickr.$side.gz | head -100 > "$pairs/test_2016_flickr.$side"
    done
fi
pairs=$(cd "$pairs" && pwd)
python=$(command -v python)
for recipe in multi30k_de_en multi30k_de_en_transformer; do
    for version in old new; do
        checkout=${!version}
        (cd "$checkout" && ATTNMT_CACHE=$work/cache_$version PYTHONPATH=$checkout "$python" -m attnmt train \
            configs/$recipe.yaml data.path="$pairs" train.epochs=1 train.max_minutes=0 train.threads=2 \
            train.out_dir="$work/$version/$recipe" --overwrite > "$work/$version-$recipe.log" 2>&1)
        "$python" - "$work/$version/$recipe" "$recipe $version" <<'PY'
import hashlib, json, sys
from safetensors.numpy import load_file
folder, name = sys.argv[1:]
weights = load_file(f"{folder}/model.safetensors")
digest = hashlib.sha256()
for key in sorted(weights):
    digest.update(key.encode()); digest.update(weights[key].tobytes())
record = json.loads(open(f"{folder}/metrics.jsonl").read().splitlines()[-1])
print(f"{name}: weights sha256 {digest.hexdigest()[:16]} ({len(weights)} tensors) | "
      + " | ".join(f"{k} {record[k]}" for k in ("step", "train_loss", "valid_loss", "valid_bleu")))
PY
    done
done
rm -rf "$work"
