"""A disk that fills while training saves: one line wherever the save stops, and the rerun resumes.

Each writer says it its own way: safetensors and tokenizers in their own errors, torch.save's writer with no
errno at all (``basic_ios::clear: iostream error``, ``unexpected pos 64 vs 0``); each of those was a traceback.
"""

import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, can_mount_tmpfs, write_recipe

# tmpfs sizes the run fills at different writes: with the tiny model, 100 KiB in checkpoint-2's RNG state (torch),
# 180 KiB in checkpoint-4's, 220 KiB in the stage's weights (safetensors), 240 KiB in its tokenizer (tokenizers),
# 260 KiB in its training_args.bin (torch); the sizes of a GPU run's files differ a little, the writers alike
SIZES_KIB = (100, 180, 220, 240, 260)
SAID = "no space left on the device while saving {}; free some and rerun: it resumes from the last complete checkpoint"


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare and a mount namespace (to make a small tmpfs)")
def test_a_disk_filling_as_training_saves_is_one_line_and_the_rerun_finishes(tmp_path, tiny_model, train_data):
    small = tmp_path / "small"
    small.mkdir()
    out = small / "sft"
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(out), max_steps=4, save_steps=2,
        per_device_train_batch_size=3, logging_steps=1, report_to=["none"], use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"], max_length=256,
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    sft = " ".join(shlex.quote(str(arg)) for arg in (sys.executable, ROOT / "train/sft.py", recipe))
    folder = shlex.quote(str(small))
    runs = [
        f"mount -t tmpfs -o size={size}k tmpfs {folder} && {{ {sft} 2>&1; echo status=$?; "
        f"mount -o remount,size=4m {folder}; {sft} >/dev/null 2>&1; echo rerun=$?; ls {folder}/sft; }}; "
        f"umount {folder}; echo =====\n"
        for size in SIZES_KIB
    ]
    result = subprocess.run(["unshare", "-rm", "sh", "-c", "".join(runs)], capture_output=True, text=True, cwd=ROOT)
    outcomes = result.stdout.split("=====\n")[: len(SIZES_KIB)]
    assert len(outcomes) == len(SIZES_KIB), result.stdout[-3000:] + result.stderr[-3000:]
    said = set()
    for size, outcome in zip(SIZES_KIB, outcomes, strict=True):
        log, rest = outcome.split("status=")
        assert "Traceback" not in log, f"{size} KiB:\n{log[-3000:]}"
        status, rerun = rest.splitlines()[:2]
        if status != "0":
            assert status == "2", f"{size} KiB:\n{log[-3000:]}"
            lines = {f"error: {out}: {SAID.format(what)}": what for what in ("a checkpoint", "the stage")}
            assert log.splitlines()[-1] in lines, f"{size} KiB:\n{log[-3000:]}"
            said.add(lines[log.splitlines()[-1]])
        assert rerun == "rerun=0" and "finished.json" in rest.splitlines()[2:], f"{size} KiB:\n{outcome[-3000:]}"
    assert said == {"a checkpoint", "the stage"}  # the sweep fills the disk in both saves
