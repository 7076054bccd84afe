"""A resume loads DeepSpeed's pickled states as data: a checkpoint whose states would call anything else is one
line before anything loads, and every load during the resume is torch's weights-only unpickler.

The hostile states here are real pickles: loaded as DeepSpeed loads them (``torch.load(weights_only=False)``)
outside the guard, they make a folder; the tests first show that, then that the guard refuses them.
"""

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_script, write_recipe
from test_hostile import one_line

from rectune.core.io import DataError, RecTuneError
from rectune.training.resumable import ANY_PICKLE, WEIGHTS_ONLY, check_pickled_states, states_read_as_data
from rectune.training.stages import last_checkpoint


class Planted:
    """What a stranger's states can hold: unpickling it calls os.makedirs (any callable would do)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return os.makedirs, (str(self.path),)


def deepspeed_checkpoint(folder: Path, step: int, states: dict) -> Path:
    """A checkpoint as a ZeRO run writes it: trainer_state.json, global_stepN/ with its states, `latest` naming it."""
    checkpoint = folder / f"checkpoint-{step}"
    (checkpoint / f"global_step{step}").mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    (checkpoint / "latest").write_text(f"global_step{step}")
    torch.save(states, checkpoint / f"global_step{step}" / "mp_rank_00_model_states.pt")
    return checkpoint


def test_states_of_tensors_and_plain_data_pass_and_load(tmp_path):
    checkpoint = deepspeed_checkpoint(tmp_path, 2, {"module": {"w": torch.ones(2)}, "ds_version": "0.19.8", "n": 3})
    check_pickled_states(checkpoint)
    with states_read_as_data():
        states = torch.load(checkpoint / "global_step2/mp_rank_00_model_states.pt", weights_only=False)
    assert states["n"] == 3 and states["module"]["w"].tolist() == [1.0, 1.0]


def test_deepspeed_state_classes_pass_and_load(tmp_path):
    """What ZeRO's optimizer states hold beside tensors (read from a real ZeRO-2 and ZeRO-3 checkpoint on the CPU:
    its loss scaler, its stage as an enum, its parameters' slice addresses)."""
    pytest.importorskip("deepspeed", reason="DeepSpeed's classes need pip install -e .[deepspeed]")
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    states = {"zero_stage": ZeroStageEnum.gradients, "loss_scaler": LossScaler(1.0),
              "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}]}  # fmt: skip
    checkpoint = deepspeed_checkpoint(tmp_path, 1, states)
    check_pickled_states(checkpoint)
    with states_read_as_data():
        loaded = torch.load(checkpoint / "global_step1/mp_rank_00_model_states.pt", weights_only=False)
    assert loaded["zero_stage"] is ZeroStageEnum.gradients and loaded["loss_scaler"].cur_scale == 1.0
    assert loaded["param_slice_mappings"][0]["w"] == fragment_address(numel=4, start=0)


def test_states_that_call_code_are_refused_and_cannot_run(tmp_path):
    made = tmp_path / "made-by-the-pickle"
    checkpoint = deepspeed_checkpoint(tmp_path, 3, {"module": {}, "extra": Planted(made)})
    states = checkpoint / "global_step3/mp_rank_00_model_states.pt"
    with pytest.raises(RecTuneError, match=r"mp_rank_00_model_states.pt: its pickle calls os.makedirs, which "):
        check_pickled_states(checkpoint)
    # the guard's second half: what DeepSpeed's own call loads under it is data, or an error
    with states_read_as_data(), pytest.raises(pickle.UnpicklingError, match="os.makedirs"):
        torch.load(states, weights_only=False)
    assert not made.exists()
    torch.load(states, weights_only=False)  # as DeepSpeed loads it, unguarded: the pickle runs
    assert made.is_dir()


def test_latest_naming_a_folder_elsewhere_and_states_torch_did_not_write_are_refused(tmp_path):
    checkpoint = deepspeed_checkpoint(tmp_path, 4, {"module": {}})
    (checkpoint / "latest").write_text("../../elsewhere/global_step4\n")  # DeepSpeed joins it to the folder
    with pytest.raises(RecTuneError, match=r"latest: names '../../elsewhere/global_step4', not one of this "):
        check_pickled_states(checkpoint)
    (checkpoint / "latest").write_text("global_step4\n")
    check_pickled_states(checkpoint)
    (checkpoint / "global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(RecTuneError, match=r"optim_states.pt: not DeepSpeed states as torch.save writes them"):
        check_pickled_states(checkpoint)
    os.mkfifo(checkpoint / "global_step4/fifo.pt")  # reading it would wait for a writer forever
    with pytest.raises(DataError, match=r"fifo.pt: is a FIFO"):
        check_pickled_states(checkpoint)


def test_a_run_folders_newest_checkpoint_is_checked_before_it_resumes(tmp_path):
    """A run folder copied from elsewhere carries its marker: its checkpoints look like the run's own."""
    deepspeed_checkpoint(tmp_path, 1, {"module": {}})
    deepspeed_checkpoint(tmp_path, 2, {"module": {}, "extra": Planted(tmp_path / "made")})
    args = SimpleNamespace(resume_from_checkpoint=None, output_dir=str(tmp_path))
    with pytest.raises(RecTuneError, match=r"checkpoint-2/global_step2/mp_rank_00_model_states.pt: its pickle calls"):
        last_checkpoint(args)
    (tmp_path / "checkpoint-2/trainer_state.json").unlink()  # as a run interrupted while saving leaves it
    assert last_checkpoint(args) == str(tmp_path / "checkpoint-1")  # never loaded: skipped as incomplete


def test_the_guard_restores_the_environment_it_found(tmp_path, monkeypatch):
    monkeypatch.delenv(WEIGHTS_ONLY, raising=False)
    monkeypatch.setenv(ANY_PICKLE, "1")  # the user's own; torch refuses every load while both are set
    with states_read_as_data():
        assert os.environ[WEIGHTS_ONLY] == "1" and ANY_PICKLE not in os.environ
        torch.save({"a": torch.zeros(1)}, tmp_path / "a.pt")
        assert torch.load(tmp_path / "a.pt")["a"].tolist() == [0.0]
    assert WEIGHTS_ONLY not in os.environ and os.environ[ANY_PICKLE] == "1"


def test_a_named_checkpoint_whose_states_call_code_is_one_line_before_the_folder(tmp_path, tiny_model, train_data):
    made = tmp_path / "made"
    named = deepspeed_checkpoint(tmp_path / "theirs", 5, {"module": {}, "extra": Planted(made)})
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path=str(tiny_model), output_dir=str(out),
                          use_peft=True, lora_r=4, lora_alpha=8, report_to=["none"],
                          datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}])  # fmt: skip
    result = run_script("train/sft.py", recipe, "--resume_from_checkpoint", named, check=False)
    one_line(result, f"{named}/global_step5/mp_rank_00_model_states.pt: its pickle calls os.makedirs")
    assert not out.exists() and not made.exists()
