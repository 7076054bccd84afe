"""Merge LoRA adapters (e.g. PerRecBench's pointwise, pairwise and listwise ones) into one.

    python train/merge.py --adapters outputs/perrec_point/sft outputs/perrec_pair/sft outputs/perrec_list/sft \\
        --out outputs/perrec_merged/sft [--weights 0.33 0.33 0.34] [--method linear|ties|dare_ties|svd] \\
        [--density 0.5] [--svd-rank 16] [--seed 0] [--full-model outputs/perrec_merged/full]

Equal weights by default (the paper's 1/3 each). The output is a PEFT adapter folder that
evaluate/run.py and train/grpo.py --init_adapter accept; --full-model also writes the base model
with the merged adapter folded in.
"""

from rectune.core.cli import ArgumentParser, add_output_arguments, finite, positive_int, run, seed, share
from rectune.training.merging import METHODS, merge_adapters


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--adapters", nargs="+", required=True, help="PEFT adapter folders with the same base model")
    add_output_arguments(parser, "folder for the merged adapter", also="full_model")
    parser.add_argument("--weights", nargs="+", type=finite, default=None, help="one per adapter (default: equal)")
    parser.add_argument("--method", choices=list(METHODS), default="linear")
    parser.add_argument("--density", type=share, default=None, help="ties/dare_ties: share of each delta kept")
    parser.add_argument("--svd-rank", type=positive_int, default=None, help="svd: rank of the merged adapter")
    parser.add_argument("--full-model", default=None, help="also write the merged full model here")
    parser.add_argument("--seed", type=seed, default=0, help="dare_ties: seed of the deltas it drops at random")
    args = parser.parse_args()
    out = merge_adapters(
        args.adapters,
        args.out,
        args.weights,
        args.method,
        args.density,
        args.svd_rank,
        args.full_model,
        seed=args.seed,
        overwrite=args.overwrite,
    )
    print(f"merged {len(args.adapters)} adapters ({args.method}) into {out}")


if __name__ == "__main__":
    run(main)
