"""SFT's ``step_time``: each training log's mean seconds an optimizer step took since the previous log."""

from types import SimpleNamespace

from rectune.training import step_clock
from rectune.training.step_clock import StepClock


def test_each_training_log_gets_the_mean_of_its_steps_and_no_other_log_does(monkeypatch):
    ticks = iter([10.0, 12.5, 20.0, 21.0, 30.0, 33.0])  # steps of 2.5 s, 1 s and 3 s
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: next(ticks))
    clock, state = StepClock(), SimpleNamespace(log_history=[])

    def step():
        clock.on_step_begin(None, state, None)
        clock.on_step_end(None, state, None)

    def log(entry):
        state.log_history.append(entry)  # as the trainer does, just before it calls back
        clock.on_log(None, state, None, logs=entry)

    step()
    log({"loss": 2.0, "step": 1})
    step()
    step()
    log({"loss": 1.5, "step": 3})
    log({"eval_loss": 1.7, "step": 3})  # no steps since the last log, and no training log: left alone
    log({"train_runtime": 23.0, "step": 3})
    assert [entry.get("step_time") for entry in state.log_history] == [2.5, 2.0, None, None]
