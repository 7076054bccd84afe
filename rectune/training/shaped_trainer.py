"""RecTune's GRPO trainer with ReRec's reasoning-aware advantage and online curriculum wired into TRL.

The arithmetic and the options live in :mod:`rectune.training.shaping`; here TRL's rewards are kept as
they are computed (every process's, so each process orders the next epoch alike), the curriculum's
sampler replaces TRL's ``RepeatSampler`` order from the second epoch on, and the advantages become one
per completion token where lines name a wrong pick (TRL's loss takes ``(B, T)`` advantages as they are).
"""

from __future__ import annotations

import logging

import torch
from accelerate.utils import gather_object
from trl.trainer.utils import RepeatSampler, nanstd

from rectune.benchmarks import Benchmark, Resources
from rectune.core.io import RecTuneError
from rectune.training.rollouts import RecTuneGRPOTrainer
from rectune.training.shaping import Curriculum, ShapingArguments, reasoning_aware, token_lines

log = logging.getLogger(__name__)


class CurriculumSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose prompt order, after the first epoch, is the curriculum's."""

    def __init__(self, *args, ids: list[str], curriculum: Curriculum, **kwargs):
        super().__init__(*args, **kwargs)
        self.ids, self.curriculum = ids, curriculum
        self._order: list[int] | None = None

    def __iter__(self):
        self._order = self.curriculum.order(self.ids)
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


class ShapedGRPOTrainer(RecTuneGRPOTrainer):
    """:class:`RecTuneGRPOTrainer` plus the options of :class:`ShapingArguments` (no change when both are off)."""

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
        if self.shaping.reasoning_aware_scale is not None:
            output["advantages"] = self._token_advantages(output, inputs, rewards)
        return output

    def _token_advantages(self, output: dict, inputs: list[dict], rewards: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` advantages: the completion's advantage, lowered on the tokens of lines naming a wrong pick."""
        summed = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        n = self.num_generations
        if self.scale_rewards == "group":
            std = nanstd(summed.view(-1, n), dim=1).repeat_interleave(n) + 1e-4
        elif self.scale_rewards == "batch":
            std = (nanstd(summed) + 1e-4).expand_as(summed)
        else:
            std = torch.ones_like(summed)
        local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
        summed, std = summed[local].tolist(), std[local].tolist()
        advantages = output["advantages"]
        per_token = advantages.unsqueeze(1).repeat(1, output["completion_ids"].shape[1])
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        for i, (ids, mask) in enumerate(zip(output["completion_ids"], output["completion_mask"], strict=True)):
            kept = ids[mask.bool()].tolist()
            pieces = [tokenizer.decode([token], skip_special_tokens=True) for token in kept]
            flags = self.benchmark.misled_lines("".join(pieces), inputs[i], self.resources) if self.benchmark else None
            if flags is None:
                raise RecTuneError("reasoning_aware_scale: this data's benchmark cannot tell which lines name a "
                                   "wrong pick")  # fmt: skip
            lines = token_lines(pieces)
            flagged = [line < len(flags) and flags[line] for line in lines]
            scale = self.shaping.reasoning_aware_scale
            values = reasoning_aware(float(advantages[i]), summed[i], std[i], flagged, scale)
            positions = mask.bool().nonzero().flatten()
            per_token[i, positions] = torch.tensor(values, dtype=per_token.dtype, device=per_token.device)
        return per_token
