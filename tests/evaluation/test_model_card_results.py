"""Scoring a RecTune training folder puts its results in the folder's model card, and only then."""

import json

from conftest import run_script, write_recipe

from rectune.core.outputs import changed_files, read_marker


def train(tmp_path, tiny_model, train_data):
    out = tmp_path / "run" / "sft"
    recipe = write_recipe(
        tmp_path / "r.yaml", model_name_or_path=str(tiny_model), use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"], output_dir=str(out), max_steps=1, report_to=["none"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}], max_length=256,
    )  # fmt: skip
    run_script("train/sft.py", recipe)
    return out, recipe


def score(adapter, data, out, *extra):
    return run_script(
        "evaluate/run.py", "--model", adapter, "--data", data, "--out", out, "--max-new-tokens", "4",
        "--batch-size", "8", "--no-wandb", *extra,
    )  # fmt: skip


def test_scores_land_in_the_card_and_the_folder_stays_sealed(tmp_path, tiny_model, train_data, movie_data):
    adapter, recipe = train(tmp_path, tiny_model, train_data)
    before = (adapter / "README.md").read_text()
    result = score(adapter, movie_data / "test.jsonl", tmp_path / "reports" / "full")
    assert f"model card: {adapter / 'README.md'} lists this score" in result.stdout
    report = json.loads((tmp_path / "reports" / "full" / "report.json").read_text())
    card = (adapter / "README.md").read_text()
    assert card.startswith(before.rstrip("\n"))  # the card as training wrote it, then the section
    section = card[card.index("<!-- rectune:evaluation -->") :]
    assert "| data | metrics | n | P@5 | R@5 | NDCG@5 | P | R | NDCG | report | commit |" in section  # K: 5
    recall = report["overall"]["recall"]
    row = next(line for line in section.splitlines() if line.startswith(f"| {movie_data / 'test.jsonl'} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:3] == ["default", "9"] and cells[7] == f"{recall:.3f}"
    assert cells[-1] == report["config"]["git_commit"][:7]
    # a subset gets a row of its own; the same split scored again replaces its row
    score(adapter, movie_data / "test.jsonl", tmp_path / "reports" / "three", "--limit", "3")
    score(adapter, movie_data / "test.jsonl", tmp_path / "reports" / "again")
    card = (adapter / "README.md").read_text()
    rows = [line for line in card.splitlines() if line.startswith(f"| {movie_data / 'test.jsonl'} |")]
    assert len(rows) == 2 and "reports/again" in card and "reports/full" not in card
    assert any("| default | 3 (the first 3) |" in line for line in rows)  # how the subset was chosen
    assert card.count("## Evaluation") == 1
    # RecTune vouches for the edited card: nothing looks changed, and rerunning the training stage is a no-op
    marker = read_marker(adapter)
    assert changed_files(adapter, marker) == [] and "evaluations.json" in marker["files"]
    rerun = run_script("train/sft.py", recipe)
    assert rerun.returncode == 0 and (adapter / "README.md").read_text() == card


def test_a_card_edited_by_someone_else_is_left_alone(tmp_path, tiny_model, train_data, movie_data):
    adapter, _ = train(tmp_path, tiny_model, train_data)
    (adapter / "README.md").write_text("# my own notes\n")
    result = score(adapter, movie_data / "test.jsonl", tmp_path / "reports" / "x")
    left = f"model card: files in {adapter} changed since RecTune wrote them; its card is left as it is"
    assert left in result.stdout
    assert (adapter / "README.md").read_text() == "# my own notes\n"
    assert not (adapter / "evaluations.json").exists()


def test_hostile_names_are_escaped_and_odd_cards_left_alone(tmp_path, tiny_model, train_data, movie_data):
    from rectune.evaluation.model_card import record_results

    adapter, _ = train(tmp_path, tiny_model, train_data)
    (adapter / "evaluations.json").write_text("[1, 2]")  # not RecTune's: a user's file of another shape
    out = tmp_path / "reports" / "x`y|z<script>alert(1)"
    result = score(adapter, movie_data / "test.jsonl", out)
    assert f"model card: {adapter / 'evaluations.json'} is not the results RecTune keeps there" in result.stdout
    assert (adapter / "evaluations.json").read_text() == "[1, 2]"
    heading = (out / "report.md").read_text().splitlines()[0]
    assert heading == "# x\\`y|z&lt;script&gt;alert(1)"
    report = json.loads((out / "report.json").read_text())
    (adapter / "evaluations.json").unlink()
    print(record_results(adapter, report, "d`a|t<b>\na", str(out)))
    card = (adapter / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| d\\`"))
    assert row.startswith("| d\\`a\\|t&lt;b&gt; a | default |") and "<script>" not in card and "<b>" not in card
    (adapter / "evaluations.json").write_text('{"x": 5}')
    assert "left as it is" in record_results(adapter, report, "d", str(out))
    assert (adapter / "evaluations.json").read_text() == '{"x": 5}'
    # a card that is a link, or is gone: left as it is, in one line
    (tmp_path / "elsewhere.md").write_text(card)
    (adapter / "README.md").unlink()
    assert "is missing or not a plain file" in record_results(adapter, report, "d", str(out))
    (adapter / "README.md").symlink_to(tmp_path / "elsewhere.md")
    assert "is missing or not a plain file" in record_results(adapter, report, "d", str(out))
    assert (adapter / "README.md").is_symlink()
