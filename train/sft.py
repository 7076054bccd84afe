"""LoRA supervised fine-tuning on prepared RecTune data (any benchmark's train_sft*.jsonl).

    accelerate launch train/sft.py recipes/qwen3b_movie.yaml [--flag value ...]
    python train/sft.py recipes/smollm2_movie_cpu.yaml --max_steps 20

The recipe holds TRL SFTConfig fields, ModelConfig (LoRA) fields, a `datasets` mixture
and RecTune's run settings; CLI flags override it. Saves adapter, tokenizer, resolved
recipe and a model card into output_dir; resumes from the newest checkpoint there.
"""

from rectune.training.arguments import RunArguments
from rectune.training.recipes import answer_early

answer_early((RunArguments,))  # --help and a bad recipe before TRL and torch load

import logging

from trl import DatasetMixtureConfig, ModelConfig, SFTConfig, SFTTrainer, get_peft_config

from rectune.core.cli import run
from rectune.models.embedded import resolve_model_name
from rectune.models.hub import check_model_available
from rectune.training.best_checkpoint import best_checkpoint_callbacks
from rectune.training.checkpointing_kwargs import selective_checkpointing_under_lora
from rectune.training.cpu_lm_head import tune_cpu_lm_head
from rectune.training.finite_weights import FiniteWeights
from rectune.training.hub_upload import check_hub_upload
from rectune.training.model_init_kwargs import keep_4bit_weights_trainable, quantization_config, set_model_init
from rectune.training.profiling import step_profiler
from rectune.training.recipes import parse_recipe, resolved_recipe
from rectune.training.resumable import check_named_checkpoint
from rectune.training.setup import (
    announce_setup,
    card_while_training,
    check_examples_fit,
    check_kernels,
    check_model_fits,
    finish,
    one_packed_sequence_a_forward,
    peak_memory,
    save_stage,
    settings_the_trainer_takes,
)
from rectune.training.stages import (
    already_finished,
    check_resume,
    checkpoints_like_the_stage,
    fault_callbacks,
    last_checkpoint,
    own_output_dir,
    train,
)
from rectune.training.step_clock import StepClock
from rectune.training.tracking import init_tracking, run_metadata
from rectune.training.views import (
    check_chat_template_path,
    data_files,
    eval_examples,
    fit_chat_template,
    load_examples,
    read_files,
    use_train_data,
)

ARGUMENTS = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    training_args, model_args, mixture, run_args, recipe = parse_recipe(ARGUMENTS)
    variant = (training_args.model_init_kwargs or {}).get("variant")  # the weights' files it names
    check_model_available(model_args.model_name_or_path, variant)  # an unknown or unreachable model: one line
    check_kernels(training_args, model_args)  # a package or device a setting needs: one line, no folder
    model_name = resolve_model_name(model_args.model_name_or_path)  # the embedded model's folder
    check_model_fits(model_name, model_args, training_args)  # LoRA targets, positions: one line, no folder
    check_chat_template_path(training_args.chat_template_path, model_name)  # one TRL can apply
    use_train_data(mixture, run_args.train_data, "sft")  # the recipe's prepared rows, or --train_data's
    files = data_files(mixture)  # each there, or a view of rows there: one line, no folder
    check_named_checkpoint(training_args, model_args, model_name)  # resume_from_checkpoint: whole, this adapter
    check_hub_upload(training_args)  # push_to_hub: its repository made now, or one line
    reads = [("model_name_or_path", model_name), *read_files(files)]
    own_output_dir(training_args.output_dir, overwrite=run_args.overwrite, reads=reads)  # ours alone
    if already_finished(training_args.output_dir, "sft"):
        return

    # Data: the recipe's mixture of prepared train_sft.jsonl files, as prompt/completion pairs.
    check_resume(training_args.output_dir, resolved_recipe(ARGUMENTS), files, overwrite=run_args.overwrite,
                 base_model=model_name)  # fmt: skip
    dataset = load_examples(mixture, "sft", run_args.max_train_samples, training_args.seed)
    validation = eval_examples(training_args, run_args, mixture, "sft")

    # Model: the embedded default or any hub/local model; the recipe's bf16 on GPUs, on CPUs where asked and native.
    dataset, validation = fit_chat_template(
        model_name, training_args.chat_template_path, dataset, validation, eos_token=training_args.eos_token,
        pad_token=training_args.pad_token,
    )  # fmt: skip
    set_model_init(training_args, model_args)
    tune_cpu_lm_head()  # TRL's output head on a CPU: labelled positions only, in tiles the cache holds
    one_packed_sequence_a_forward(training_args, model_args)  # SDPA would attend across a flattened batch

    metadata = run_metadata("sft", run_args, model_args.model_name_or_path, files)
    init_tracking(training_args, run_args, metadata)
    with settings_the_trainer_takes():  # TRL's own checks of the settings, as one line
        trainer = SFTTrainer(
            model=model_name,
            args=training_args,
            train_dataset=dataset,
            eval_dataset=validation,
            peft_config=get_peft_config(model_args),
            quantization_config=quantization_config(training_args, model_args),  # load_in_4bit or load_in_8bit
            callbacks=[
                *best_checkpoint_callbacks(training_args, run_args),
                FiniteWeights(),  # a diverged step stops the run before its NaN weights are saved
                *fault_callbacks(),
                *checkpoints_like_the_stage(training_args, model_args.model_name_or_path),  # each loads on its own
                *step_profiler(training_args, run_args.profile_steps),
                StepClock(),
            ],
        )
    check_examples_fit(trainer, dataset, training_args.max_length)
    selective_checkpointing_under_lora(trainer)  # TRL's `selective: true`, on the layers under the adapter
    keep_4bit_weights_trainable(trainer.model)  # bitsandbytes repacks 4-bit weights for CPU inference only
    card_while_training(trainer, metadata, model_args.model_name_or_path)
    announce_setup(trainer)  # one line: how the run is spread and computed
    train(trainer, last_checkpoint(training_args))
    trainer.accelerator.print(peak_memory())

    configs = (training_args, model_args, mixture, run_args)
    save_stage(trainer, configs, metadata, recipe, model_args.model_name_or_path)
    trainer.accelerator.print(f"saved the SFT adapter to {training_args.output_dir}")
    finish(trainer)


if __name__ == "__main__":
    run(main)
