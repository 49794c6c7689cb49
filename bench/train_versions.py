"""Training speed of two checkouts of attnmt: processes alternating old, new, old, new.

    git worktree add /tmp/attnmt-old HEAD~1
    python bench/train_versions.py --old /tmp/attnmt-old --new . [--configs peers_transformer.yaml,peers_model.yaml]
        [--precisions bf16,fp32] [--rounds 3] [--updates 30] [--threads 2]

Each round starts one process per checkout (in that checkout's folder, so that its attnmt is the
one imported) for every config of bench/ and precision: it builds the model with a 7,882-word
source and 5,898-word target vocabulary (the peers' Multi30k vocabularies), draws one batch of 64
sentences of 14 source and 14 target tokens, runs 5 updates to warm up and times `--updates` more,
each attnmt's own `train_step` under the config's settings (each checkout's own copy of the config), as
bench/speed.py trains. Prints milliseconds per update per round, the medians, old / new, and whether
the two checkouts' last losses are identical. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics

from decode_versions import run_in_checkout

CHILD = """
import json, random, sys, time, torch
import attnmt
from attnmt.batch import collate
try:
    from attnmt.configfile import load_config
except ImportError:                             # a checkout from before configfile.py (issue 95)
    from attnmt.config import load_config
from attnmt.fast.process import set_up_training_process
try:
    from attnmt.families import build_model
except ImportError:                             # a checkout from before the families package
    from attnmt.model import build_model
try:
    from attnmt.training.step import make_optimizer, train_step
    from attnmt.training.data import Part
except ImportError:                             # a checkout from before train.py was split
    from attnmt.training.train import Part, make_optimizer, train_step
set_up_training_process()                       # as attnmt train does
config_file, precision, updates, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
torch.manual_seed(0)
config = load_config(config_file, [f"train.precision={precision}"])
model = build_model(config.model, 7882, 5898).train()
optimizer = make_optimizer(model, config.train)
words = random.Random(0)
batch = collate([([words.randrange(4, 7000) for _ in range(14)], [words.randrange(4, 5000) for _ in range(14)])
                 for _ in range(64)], list(range(64)))
try:
    from attnmt.training.step import TeacherForced    # since issue 62: the network as training calls it
    network = TeacherForced(model)

    def update(step):
        return train_step(network, optimizer, [Part(batch)], config.train, step, batch.num_target_tokens)
except ImportError:
    def update(step):
        return train_step(model, optimizer, [Part(batch)], config, step)
for step in range(1, 6):
    update(step)
started = time.perf_counter()
for step in range(6, 6 + updates):
    loss = update(step)
print(json.dumps({"attnmt": attnmt.__file__, "ms": (time.perf_counter() - started) / updates * 1000, "loss": loss}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the checkout to compare against")
    parser.add_argument("--new", required=True, help="the checkout under test")
    parser.add_argument("--configs", default="peers_transformer.yaml,peers_model.yaml", help="files in bench/")
    parser.add_argument("--precisions", default="bf16,fp32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    times: dict[tuple[str, str, str], list[float]] = {}
    losses: dict[tuple[str, str, str], set[float]] = {}   # the last update's loss, every round
    for round_number in range(1, args.rounds + 1):
        for config in args.configs.split(","):
            for precision in args.precisions.split(","):
                for version in ("old", "new"):
                    # Each checkout's own copy of the config: its keys are those that checkout reads.
                    result = run_in_checkout(getattr(args, version), CHILD, [
                        f"bench/{config}", precision, str(args.updates), str(args.threads)])
                    print(f"round {round_number} | {config} {precision} | {version} ({result['attnmt']}) | "
                          f"{result['ms']:.1f} ms/update", flush=True)
                    times.setdefault((config, precision, version), []).append(result["ms"])
                    losses.setdefault((config, precision, version), set()).add(result["loss"])
    print("\n| config | precision | old ms/update (median) | new ms/update (median) | old / new | losses |")
    print("|---|---|---:|---:|---:|---|")
    for config in args.configs.split(","):
        for precision in args.precisions.split(","):
            old, new = (statistics.median(times[(config, precision, v)]) for v in ("old", "new"))
            old_losses, new_losses = (losses[(config, precision, v)] for v in ("old", "new"))
            same = "identical" if old_losses == new_losses else f"differ: {sorted(old_losses)} / {sorted(new_losses)}"
            print(f"| {config} | {precision} | {old:.1f} | {new:.1f} | {old / new:.2f}× | {same} |")


if __name__ == "__main__":
    main()
