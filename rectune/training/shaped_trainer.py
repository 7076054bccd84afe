"""RecTune's GRPO trainer with ReRec's reasoning-aware advantage and online curriculum wired into TRL.

The arithmetic and the options live in :mod:`rectune.training.shaping`; here TRL's rewards are kept as
they are computed (every process's, so each process orders the next epoch alike), the curriculum's
sampler replaces TRL's ``RepeatSampler`` order from the second epoch on, and the advantages become one
per completion token where lines name a wrong pick (TRL's loss takes ``(B, T)`` advantages as they are).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.trainer.utils import RepeatSampler, nanstd

from rectune.benchmarks import Benchmark, Resources
from rectune.core.io import RecTuneError, read_json, write_json
from rectune.training.completion_table import EscapedCompletionTable
from rectune.training.rollouts import RecTuneGRPOTrainer
from rectune.training.shaping import (
    OVERLENGTH,
    STD_FLOOR,
    Curriculum,
    ShapingArguments,
    rank_advantages,
    reasoning_aware,
    token_items,
    token_lines,
)
from rectune.training.token_pieces import token_pieces

log = logging.getLogger(__name__)
CURRICULUM_STATE = "curriculum.json"  # in each checkpoint folder: the difficulties the next epochs follow


class CurriculumSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose prompt order, after the first epoch, is the curriculum's."""

    def __init__(self, *args, ids: list[str], curriculum: Curriculum, **kwargs):
        super().__init__(*args, **kwargs)
        self.ids, self.curriculum = ids, curriculum
        self._order: list[int] | None = None

    def __iter__(self):
        self._order = self.curriculum.order(self.ids, minimum=self.batch_size)
        if self._order is None:
            yield from super().__iter__()
            return
        log.info("curriculum: %d of %d prompts this epoch, easiest first", len(self._order), len(self.ids))
        whole = len(self._order) // self.batch_size * self.batch_size  # TRL drops the last partial chunk too
        for start in range(0, whole, self.batch_size):
            chunk = self._order[start : start + self.batch_size]
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        kept = self.num_samples if self._order is None else len(self._order)
        return kept // self.batch_size * self.batch_size * self.mini_repeat_count * self.repeat_count


class ShapedGRPOTrainer(EscapedCompletionTable, RecTuneGRPOTrainer):
    """:class:`RecTuneGRPOTrainer` plus the options of :class:`ShapingArguments` (no change when both are off), its
    table of completions escaped for the terminal."""

    def __init__(
        self,
        *args,
        shaping: ShapingArguments | None = None,
        benchmark: Benchmark | None = None,
        resources: Resources | None = None,
        **kwargs,
    ):
        self.shaping = shaping or ShapingArguments()
        cutoff = self.shaping.curriculum_easy_cutoff
        self.curriculum = Curriculum(cutoff) if self.shaping.curriculum_reward else None
        super().__init__(*args, **kwargs)
        self.benchmark, self.resources = benchmark, resources
        if self.curriculum is not None and self.shaping.curriculum_reward not in self.reward_func_names:
            raise RecTuneError(
                f"curriculum_reward: {self.shaping.curriculum_reward!r} is not one of the run's rewards "
                f"({', '.join(self.reward_func_names)})"
            )
        if self.shaping.reasoning_aware_scale is not None and self.multi_objective_aggregation != "sum_then_normalize":
            raise RecTuneError("reasoning_aware_scale works on summed rewards: set multi_objective_aggregation to "
                               "sum_then_normalize")  # fmt: skip
        self._rewards_per_func: torch.Tensor | None = None

    def _get_train_sampler(self, dataset=None):
        if self.curriculum is None:
            return super()._get_train_sampler(dataset)
        dataset = self.train_dataset if dataset is None else dataset
        return CurriculumSampler(
            data_source=dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
            ids=[str(prompt_id) for prompt_id in dataset["id"]],
            curriculum=self.curriculum,
        )

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.curriculum is not None and self.args.should_save:
            folder = Path(self._get_output_dir(trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            write_json(folder / CURRICULUM_STATE, self.curriculum.state())

    def _load_rng_state(self, checkpoint):
        # transformers' hook for what a checkpoint restores besides the weights and the optimizer
        super()._load_rng_state(checkpoint)
        saved = Path(checkpoint or "", CURRICULUM_STATE)
        if self.curriculum is not None and checkpoint and saved.is_file():
            self.curriculum.load(read_json(saved))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func  # every process's completions, in process order

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training or self._rewards_per_func is None:
            return output
        rewards = self._rewards_per_func
        if self.curriculum is not None:
            column = self.reward_func_names.index(self.shaping.curriculum_reward)
            ids = [str(prompt_id) for prompt_id in gather_object([x["id"] for x in inputs])]
            self.curriculum.record(ids, rewards[:, column].tolist())
        if self.shaping.reasoning_aware_scale is not None or self.shaping.rank_advantage:
            output["advantages"] = self._token_advantages(output, inputs, rewards)
        return output

    def _token_advantages(self, output: dict, inputs: list[dict], rewards: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` advantages: the completion's own, lowered on the tokens of lines naming a wrong pick
        (reasoning-aware) and plus its rank's on the tokens of each ranked item (rank-level)."""
        local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
        advantages = output["advantages"]
        per_token = advantages.unsqueeze(1).repeat(1, output["completion_ids"].shape[1])
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        pieces = [
            token_pieces(tokenizer, ids[mask.bool()].tolist())
            for ids, mask in zip(output["completion_ids"], output["completion_mask"], strict=True)
        ]
        values = [[float(advantages[i])] * len(texts) for i, texts in enumerate(pieces)]
        if self.shaping.reasoning_aware_scale is not None:
            summed, std = (values_of[local] for values_of in self._summed_rewards(rewards))  # this process's
            for i, texts in enumerate(pieces):
                flags = self._benchmark_answer("misled_lines", "".join(texts), inputs[i])
                flagged = [line < len(flags) and flags[line] for line in token_lines(texts)]
                scale = self.shaping.reasoning_aware_scale
                values[i] = reasoning_aware(values[i][0], summed[i], std[i], flagged, scale)
        if self.shaping.rank_advantage:
            gains = [self._benchmark_answer("item_gains", "".join(texts), inputs[i]) for i, texts in enumerate(pieces)]
            k = (self.resources.top_k if self.resources is not None else None) or 5
            by_rank = rank_advantages([[gain for _, gain in g] for g in gains], self.num_generations, k)
            for i, texts in enumerate(pieces):
                for position, item in enumerate(token_items(texts, [end for end, _ in gains[i]])):
                    if item < min(k, len(gains[i])):
                        values[i][position] += by_rank[i][item]
                    elif item < len(gains[i]):
                        values[i][position] += OVERLENGTH
        for i, mask in enumerate(output["completion_mask"]):
            positions = mask.bool().nonzero().flatten()
            per_token[i, positions] = torch.tensor(values[i], dtype=per_token.dtype, device=per_token.device)
        return per_token

    def _summed_rewards(self, rewards: torch.Tensor) -> tuple[list[float], list[float]]:
        """Every process's weighted reward sums and the standard deviation TRL divided their advantages by."""
        summed = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        n = self.num_generations
        if self.scale_rewards == "group":
            std = nanstd(summed.view(-1, n), dim=1).repeat_interleave(n) + STD_FLOOR
        elif self.scale_rewards == "batch":
            std = (nanstd(summed) + STD_FLOOR).expand_as(summed)
        else:
            std = torch.ones_like(summed)
        return summed.tolist(), std.tolist()

    def _benchmark_answer(self, method: str, completion: str, labels: dict):
        found = getattr(self.benchmark, method)(completion, labels, self.resources) if self.benchmark else None
        if found is None:
            option = "reasoning_aware_scale" if method == "misled_lines" else "rank_advantage"
            raise RecTuneError(f"{option}: this data's benchmark cannot tell (Benchmark.{method})")
        return found
