"""The base model with an SFT adapter merged in, as SFT then RFT trained on it: ``<SFT folder>/merged``.

    python train/sft_base.py outputs/smollm2_movie_cpu/sft

The SFT->RFT stage builds its own copy in its run folder and removes it once the stage is saved; evaluation
merges the chain in memory and never needs it. Plain PEFT loading of an SFT->RFT adapter does
(``AutoPeftModelForCausalLM.from_pretrained("outputs/RUN/sft_rft")`` finds its base at ``../sft/merged``).
"""

from pathlib import Path

from rectune.core.cli import ArgumentParser, run
from rectune.core.outputs import lock_output
from rectune.training.sft_base import merged_model


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("sft", help="the SFT stage folder (a PEFT adapter)")
    args = parser.parse_args()
    target = Path(args.sft) / "merged"
    if Path(args.sft).is_dir():
        lock_output(target)  # one process builds it at a time: a second would swap its copy in under the first
    print(f"the merged SFT base: {merged_model(args.sft, target)}")


if __name__ == "__main__":
    run(main)
