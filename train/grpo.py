"""GRPO reinforcement fine-tuning (RFT) with the benchmark's rewards, from the base or an SFT result.

    accelerate launch train/grpo.py recipes/qwen3b_movie_grpo.yaml
    python train/grpo.py recipes/smollm2_movie_cpu_grpo.yaml --init_adapter outputs/run/sft

Rewards score each completion with the data's own benchmark scoring (the benchmark named by the
RFT rows, with its catalog and KG found beside the data); the command line may also name any
reward function by dotted import path (--reward_funcs recall my_pkg.rewards.novelty).
With --init_adapter the SFT adapter is merged into the base first and a fresh LoRA adapter is
trained on top (SFT then RFT).
"""

from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.recipes import answer_early
from rectune.training.shaping import ShapingArguments

answer_early((RunArguments, RftArguments, ShapingArguments))  # --help and a bad recipe before TRL and torch load

import logging
from pathlib import Path

from accelerate import PartialState
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, get_peft_config

from rectune.core.cli import run
from rectune.models.chat_format import configured_vocabulary
from rectune.models.embedded import resolve_model_name
from rectune.models.hub import check_model_available
from rectune.training.best_checkpoint import best_checkpoint_callbacks
from rectune.training.continuous_batching import check_continuous_batching_config
from rectune.training.cpu_lm_head import tune_cpu_lm_head
from rectune.training.diagnostics import DIAGNOSTICS, summary
from rectune.training.finite_weights import FiniteWeights
from rectune.training.generation_kwargs import check_generation_kwargs
from rectune.training.hub_upload import check_hub_upload
from rectune.training.model_init_kwargs import keep_4bit_weights_trainable, quantization_config, set_model_init
from rectune.training.profiling import step_profiler
from rectune.training.prompt_positions import check_prompts_fit, rollout_positions
from rectune.training.recipe_values import check_reward_weights
from rectune.training.recipes import parse_recipe, resolved_recipe, where_set
from rectune.training.resumable import check_named_checkpoint
from rectune.training.rewards import resolve_rewards, rft_resources
from rectune.training.setup import (
    announce_setup,
    card_while_training,
    check_kernels,
    check_model_fits,
    finish,
    peak_memory,
    save_stage,
    settings_the_trainer_takes,
)
from rectune.training.sft_base import MERGED_SFT_BASE, check_sft_adapter, merged_model
from rectune.training.shaped_trainer import ShapedGRPOTrainer
from rectune.training.stages import (
    already_finished,
    check_resume,
    checkpoints_like_the_stage,
    fault_callbacks,
    last_checkpoint,
    own_output_dir,
    train,
)
from rectune.training.tracking import init_tracking, run_metadata
from rectune.training.views import (
    data_files,
    eval_examples,
    fit_chat_template,
    load_examples,
    read_files,
    use_train_data,
)

ARGUMENTS = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments, ShapingArguments)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    training_args, model_args, mixture, run_args, rft_args, shaping, recipe = parse_recipe(ARGUMENTS)
    variant = (training_args.model_init_kwargs or {}).get("variant")  # the weights' files it names
    check_model_available(model_args.model_name_or_path, variant)  # an unknown or unreachable model: one line
    check_kernels(training_args, model_args)  # a package or device a setting needs: one line, no folder
    model_name = resolve_model_name(model_args.model_name_or_path)  # the embedded model's folder
    positions = check_model_fits(model_name, model_args, training_args)  # LoRA targets the model lacks: one line
    check_generation_kwargs(training_args, configured_vocabulary(model_name), where_set("generation_kwargs", recipe))
    check_continuous_batching_config(training_args, where_set("transformers_continuous_batching_config", recipe))
    use_train_data(mixture, run_args.train_data, "rft")  # the recipe's prepared rows, or --train_data's
    files = data_files(mixture)  # each there, or a view of rows there: one line, no folder
    if rft_args.init_adapter:
        check_sft_adapter(rft_args.init_adapter, model_name)  # an adapter of this model, that fits it: one line
    check_named_checkpoint(training_args, model_args, model_name, rft_args.init_adapter)  # whole, this adapter
    check_hub_upload(training_args)  # push_to_hub: its repository made now, or one line
    reads = [("model_name_or_path", model_name), *read_files(files),
             ("init_adapter", rft_args.init_adapter), ("catalog", rft_args.catalog), ("kg", rft_args.kg)]  # fmt: skip
    own_output_dir(training_args.output_dir, overwrite=run_args.overwrite, reads=reads)  # ours alone
    stage = "sft_rft" if rft_args.init_adapter else "rft"
    if already_finished(training_args.output_dir, stage):
        return

    # Data and rewards: prompts plus labels; catalog and KG resolve and check the recommendations.
    benchmark, resources = rft_resources(files[0], rft_args.catalog, rft_args.kg)
    check_resume(training_args.output_dir, resolved_recipe(ARGUMENTS), files, overwrite=run_args.overwrite,
                 sft_adapter=rft_args.init_adapter, reward_files=resources.files(), base_model=model_name)  # fmt: skip
    dataset = load_examples(mixture, "rft", run_args.max_train_samples, training_args.seed)
    validation = eval_examples(training_args, run_args, mixture, "rft")
    reward_funcs, rft_args.reward_funcs = resolve_rewards(benchmark, rft_args.reward_funcs, resources)
    tasks = set(dataset["task"]) if "task" in dataset.column_names else set()  # the built-in benchmarks label it
    benchmark.load_scoring_files(tasks, resources)  # catalog, KG: one line now, not at the first reward
    check_reward_weights(training_args.reward_weights, rft_args.reward_funcs, where_set("reward_weights", recipe))

    # Model: the base, or the base with the SFT adapter merged in (merged once, by the main process, in the run folder).
    if rft_args.init_adapter:
        with PartialState().main_process_first():
            model_name = str(merged_model(rft_args.init_adapter, Path(training_args.output_dir) / MERGED_SFT_BASE))
    # The base's chat template (a merged base's: SFT's) with the recipe's variables, saved for evaluation
    options = training_args.chat_template_kwargs
    dataset, validation = fit_chat_template(model_name, None, dataset, validation, options=options)
    positions = rollout_positions(training_args, positions)  # a colocated vLLM's length where it serves fewer
    check_prompts_fit(model_name, positions, training_args.max_completion_length, dataset, validation, options=options)
    set_model_init(training_args, model_args)
    tune_cpu_lm_head()  # TRL's output head on a CPU: labelled positions only, in tiles the cache holds

    metadata = run_metadata(
        stage,
        run_args,
        model_args.model_name_or_path,
        files,
        init_adapter=rft_args.init_adapter,
        rewards=rft_args.reward_funcs,
        reward_weights=training_args.reward_weights,
        **({"chat_template_kwargs": options} if options else {}),  # in the card and W&B's config
    )
    init_tracking(training_args, run_args, metadata)
    with settings_the_trainer_takes():  # TRL's own checks of the settings, as one line
        trainer = ShapedGRPOTrainer(
            model=model_name,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=dataset,
            eval_dataset=validation,
            peft_config=get_peft_config(model_args),
            quantization_config=quantization_config(training_args, model_args),  # load_in_4bit or load_in_8bit
            callbacks=[
                *best_checkpoint_callbacks(training_args, run_args),
                FiniteWeights(),  # a diverged step stops the run before its NaN weights are saved
                *fault_callbacks(),
                *checkpoints_like_the_stage(training_args, model_args.model_name_or_path, rft_args.init_adapter),
                *step_profiler(training_args, run_args.profile_steps),
            ],
            merge_for_sampling=rft_args.merge_for_sampling,
            rollout_dtype=rft_args.rollout_dtype,
            compile_rollouts=rft_args.compile_rollouts,
            shared_prefix=rft_args.shared_prefix,
            shaping=shaping,  # ReRec's reasoning-aware advantage and curriculum, when the recipe sets them
            benchmark=benchmark,
            resources=resources,
        )
    keep_4bit_weights_trainable(trainer.model)  # bitsandbytes repacks 4-bit weights for CPU inference only
    card_while_training(trainer, metadata, model_args.model_name_or_path)
    announce_setup(trainer)  # one line: how the run is spread and computed
    train(trainer, last_checkpoint(training_args))
    trainer.accelerator.print(peak_memory())

    configs = (training_args, model_args, mixture, run_args, rft_args, shaping)
    save_stage(trainer, configs, metadata, recipe, model_args.model_name_or_path, rft_args.init_adapter)
    trainer.accelerator.print(f"saved the RFT adapter to {training_args.output_dir}")
    # Last lines of the run: which rewards gave GRPO a signal (per-step values are in the logs and W&B)
    report = summary(trainer.state.log_history, trainer.reward_func_names)
    if trainer.accelerator.is_main_process:
        Path(training_args.output_dir, DIAGNOSTICS).write_text(report + "\n", encoding="utf-8")
    trainer.accelerator.print(report)
    finish(trainer)


if __name__ == "__main__":
    run(main)
