"""RecTune's own recipe keys beside TRL's: run-level settings (any recipe) and GRPO's."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_PROFILED_STEPS = 10  # the profiler keeps every event of the steps in memory until it writes them


@dataclass
class RunArguments:
    """RecTune's run-level settings (any recipe)."""

    recipe_name: str | None = field(default=None, metadata={"help": "Run name; defaults to the recipe file's stem."})
    wandb_project: str = field(default="rectune", metadata={"help": "W&B project the run logs to."})
    wandb_tags: list[str] = field(default_factory=list, metadata={"help": "Extra W&B tags."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on this many examples only (small CPU budgets)."}
    )
    train_data: str | None = field(
        default=None,
        metadata={
            "help": "Train on this data instead of the recipe's `datasets`: a data_prep folder, or a view of it "
            "as a recipe names one (DIR/train_sft.jsonl, DIR/train_rft_pointwise.jsonl; derived from train.jsonl)."
        },
    )
    eval_data: str | None = field(
        default=None,
        metadata={
            "help": "Validation data for eval_strategy: a data_prep folder or a view (DIR/valid_sft.jsonl, "
            "derived from valid.jsonl); default: the one beside the training data when eval_strategy is on."
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "Train into output_dir even when it holds files RecTune did not write there (the trainer may "
            "replace some); command line only."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={"help": "Stop after this many evaluations without improvement (needs eval_strategy)."},
    )
    profile_steps: list[int] = field(
        default_factory=list,
        metadata={
            "help": "Profile this optimizer step, or the steps from the first to the second number given (1-based), "
            "with PyTorch's profiler: operator table and trace in output_dir/profile/."
        },
    )

    def __post_init__(self) -> None:
        steps = self.profile_steps
        if steps and (len(steps) > 2 or min(steps) < 1 or steps != sorted(steps)):
            raise ValueError(
                f"profile_steps: {steps} is not one step or a first and last step (1-based, in order), "
                "e.g. `--profile_steps 3` or `--profile_steps 3 4`"
            )
        if steps and steps[-1] - steps[0] >= MAX_PROFILED_STEPS:
            raise ValueError(
                f"profile_steps: {steps} spans {steps[-1] - steps[0] + 1} steps; at most {MAX_PROFILED_STEPS}: "
                "the profiler holds every event of them in memory"
            )


ROLLOUT_DTYPES = ("bfloat16", "float16", "float32")


@dataclass
class RftArguments:
    """GRPO-only settings: rewards, their catalog/KG, and the model RFT starts from."""

    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Rewards by name (the data's benchmark's rewards) or dotted import path (my_pkg.rewards.novelty: "
            "command line only); empty = the benchmark's defaults. Weights via GRPOConfig's reward_weights."
        },
    )
    catalog: str | None = field(default=None, metadata={"help": "catalog.jsonl (default: beside the first data file)"})
    kg: str | None = field(default=None, metadata={"help": "kg.jsonl (default: beside the first data file)"})
    init_adapter: str | None = field(
        default=None,
        metadata={"help": "SFT adapter folder merged into the base model before GRPO (SFT then RFT)."},
    )
    merge_for_sampling: bool = field(
        default=True,
        metadata={
            "help": "Sample the GRPO completions from the LoRA adapter merged into the base weights, in eval mode "
            "(faster; kept off under ZeRO-3 and FSDP). False: TRL's path, the adapter beside each layer."
        },
    )
    rollout_dtype: str | None = field(
        default=None,
        metadata={
            "help": "Sample from a copy of the merged policy in this dtype, refreshed every step (bfloat16 halves "
            "the memory read per token on CPU); None: the policy's own dtype. Needs merge_for_sampling.",
            "choices": list(ROLLOUT_DTYPES),
        },
    )
    compile_rollouts: bool = field(
        default=False,
        metadata={
            "help": "Generate the completions with a static key/value cache and transformers' compiled decoding step "
            "(torch.compile with CUDA graphs on a GPU, where eager decoding waits on kernel launches); the first "
            "step pays the compile. Ignored under vLLM and continuous batching."
        },
    )
    shared_prefix: bool = field(
        default=True,
        metadata={
            "help": "Encode each group's prompt once in the loss's forward and backward, its completions attending "
            "to it (exact: the same log-probabilities and gradients); off where attention takes no 4-D mask."
        },
    )

    def __post_init__(self) -> None:
        # a recipe's value skips argparse's choices check: check it here, naming the key
        if self.rollout_dtype is not None and self.rollout_dtype not in ROLLOUT_DTYPES:
            raise ValueError(f"rollout_dtype: {self.rollout_dtype!r} is not one of {', '.join(ROLLOUT_DTYPES)}")
