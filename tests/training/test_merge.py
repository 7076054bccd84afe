"""train/merge.py: a linear merge checked numerically; the other PEFT methods run; bad inputs fail."""

import json
import os
import re
import shutil

import pytest
import torch
from conftest import run_script
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from rectune.core.io import RecTuneError
from rectune.models import model_folders
from rectune.models.checkpoints import adapter_chain
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.sharing import make_portable
from rectune.training.merging import merge_adapters

TARGETS = ["q_proj", "v_proj"]


def deltas(adapter):
    """{module: scaling * B @ A} of one saved adapter."""
    weights = load_file(adapter / "adapter_model.safetensors")
    config = json.loads((adapter / "adapter_config.json").read_text())
    scaling = config["lora_alpha"] / (config["r"] ** 0.5 if config.get("use_rslora") else config["r"])
    out = {}
    for key, a in weights.items():
        if "lora_A" in key:
            b = weights[key.replace("lora_A", "lora_B")]
            out[key.split(".lora_A")[0]] = scaling * b @ a
    return out


def test_linear_merge_is_the_weighted_sum_of_deltas(tmp_path, tiny_model, adapters):
    weights = [0.5, 0.3, 0.2]
    out, full = tmp_path / "merged", tmp_path / "full"
    run_script(
        "train/merge.py", "--adapters", *adapters, "--weights", *map(str, weights), "--out", out, "--full-model", full
    )
    expected = {}
    for weight, adapter in zip(weights, adapters, strict=True):
        for module, delta in deltas(adapter).items():
            expected[module] = expected.get(module, 0) + weight * delta
    merged = deltas(out)
    assert merged.keys() == expected.keys() and len(merged) == 4  # 2 layers x (q_proj, v_proj)
    for module in expected:
        assert torch.allclose(merged[module], expected[module], atol=1e-6), module
    # the full model is the base plus that sum
    base = load_file(tiny_model / "model.safetensors")
    folded = load_file(full / "model.safetensors")
    key = "model.layers.1.self_attn.v_proj.weight"
    module = next(m for m in expected if "layers.1.self_attn.v_proj" in m)
    assert torch.allclose(folded[key], base[key] + expected[module], atol=1e-6)
    # and the merged adapter loads like any adapter
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), out)


def test_a_merge_whose_first_adapter_is_rslora_is_the_weighted_sum_too(tmp_path, tiny_model, adapters):
    """PEFT copied use_rslora from the first adapter into the merge, whose alpha it sets to its rank: the merge
    was scaled by sqrt(rank), 2.83 times the weighted sum here."""
    rslora = saved_adapter(tmp_path / "rslora", tiny_model, use_rslora=True)
    out, full = tmp_path / "merged", tmp_path / "full"
    run_script("train/merge.py", "--adapters", rslora, adapters[0], "--out", out, "--full-model", full)
    first, second = deltas(rslora), deltas(adapters[0])
    merged = deltas(out)
    assert merged.keys() == first.keys() and len(merged) == 4
    for module, delta in merged.items():
        assert torch.allclose(delta, 0.5 * first[module] + 0.5 * second[module], atol=1e-6), module
    key = "model.layers.1.self_attn.v_proj.weight"
    module = next(m for m in merged if "layers.1.self_attn.v_proj" in m)
    folded = load_file(full / "model.safetensors")[key]  # the full model, merged in process, alike
    assert torch.allclose(folded, load_file(tiny_model / "model.safetensors")[key] + merged[module], atol=1e-6)


def test_equal_weights_by_default(tmp_path, adapters):
    run_script("train/merge.py", "--adapters", *adapters, "--out", tmp_path / "m")
    expected = {m: sum(deltas(a)[m] for a in adapters) / 3 for m in deltas(adapters[0])}
    for module, delta in deltas(tmp_path / "m").items():
        assert torch.allclose(delta, expected[module], atol=1e-6)


def hand_built(folder, tiny_model, name, a, b):
    """A rank-1 adapter (alpha 1: delta = B @ A) on q_proj and v_proj with the given A (1 x 32) and B (32 x 1)."""
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=1, lora_alpha=1, target_modules=TARGETS)
    )
    for key, weight in model.named_parameters():
        if "lora_A" in key:
            weight.data.copy_(a.reshape(1, -1))
        elif "lora_B" in key:
            weight.data.copy_(b.reshape(-1, 1))
    model.save_pretrained(folder / name)
    return folder / name


def merge(tmp_path, adapters, method, *flags):
    out = tmp_path / method
    run_script("train/merge.py", "--adapters", *adapters, "--weights", "1", "1", "1", "--method", method,
               "--out", out, *flags)  # fmt: skip
    merged = deltas(out)
    assert len(merged) == 4  # 2 layers x (q_proj, v_proj)
    return merged


def test_ties_and_dare_ties_by_hand(tmp_path, tiny_model):
    """PEFT merges LoRA's A and B matrices separately (each weighted by sqrt(weight x scaling), here 1).

    A = 2v, 4v and -v with v = (1.00 ... 2.00): TIES elects the sign of the sum (+) and averages the
    agreeing entries, 3v; B = u for all three, so B stays u. The merged delta is u (3v)^T, where the
    linear merge would give u (5v)^T. With density 0.5 each A and B first keeps its 16 largest entries
    (the last 16 of v and u), so the delta is u (3v)^T on the last 16 rows and columns, 0 elsewhere.
    """
    v = torch.linspace(1.0, 2.0, 32)
    u = torch.linspace(1.0, 2.0, 32)
    adapters = [hand_built(tmp_path, tiny_model, f"a{c}", c * v, u) for c in (2.0, 4.0, -1.0)]
    full = torch.outer(u, 3 * v)
    for method in ("ties", "dare_ties"):  # at density 1 DARE drops nothing, so it equals TIES
        for delta in merge(tmp_path, adapters, method, "--density", "1.0").values():
            assert torch.allclose(delta, full, atol=1e-5), method
    kept = torch.zeros(32)
    kept[16:] = 1
    for delta in merge(tmp_path, adapters, "ties", "--density", "0.5").values():
        assert torch.allclose(delta, full * torch.outer(kept, kept), atol=1e-5)


def test_dare_ties_drops_the_same_deltas_for_the_same_seed(tmp_path, tiny_model):
    """At density 0.5 DARE keeps each entry of A and B with probability 0.5: two merges with seed 0 are the
    same adapter, a merge with seed 1 another one."""
    v = torch.linspace(1.0, 2.0, 32)
    adapters = [hand_built(tmp_path, tiny_model, f"a{c}", c * v, v) for c in (2.0, 4.0, -1.0)]
    runs = {}
    for name, seed in (("first", "0"), ("again", "0"), ("other", "1")):
        run_script("train/merge.py", "--adapters", *adapters, "--method", "dare_ties", "--density", "0.5",
                   "--seed", seed, "--out", tmp_path / name)  # fmt: skip
        runs[name] = deltas(tmp_path / name)
    assert all(torch.equal(runs["first"][m], runs["again"][m]) for m in runs["first"])
    assert not all(torch.equal(runs["first"][m], runs["other"][m]) for m in runs["first"])


def test_the_same_merge_writes_the_same_files_in_any_process(tmp_path, adapters, monkeypatch):
    """Rerunning a merge must leave a folder whose fingerprint evaluation recognises, whatever the
    interpreter's string hashing (which orders PEFT's set of target modules)."""
    written = []
    for hash_seed in ("1", "2", "3"):
        monkeypatch.setenv("PYTHONHASHSEED", hash_seed)
        run_script("train/merge.py", "--adapters", *adapters, "--out", tmp_path / hash_seed)
        written.append((tmp_path / hash_seed / "adapter_config.json").read_text())
    assert written[0] == written[1] == written[2]


def test_svd_merge_by_hand(tmp_path, tiny_model):
    """Deltas 3 e0 f0^T, 2 e1 f1^T and 1 e2 f2^T (unit vectors): their sum has singular values 3, 2, 1,
    so the rank-2 SVD merge keeps 3 e0 f0^T + 2 e1 f1^T and drops the third."""
    eye = torch.eye(32)
    adapters = [
        hand_built(tmp_path, tiny_model, f"s{i}", eye[i + 3], c * eye[i]) for i, c in enumerate((3.0, 2.0, 1.0))
    ]
    expected = 3 * torch.outer(eye[0], eye[3]) + 2 * torch.outer(eye[1], eye[4])
    for delta in merge(tmp_path, adapters, "svd", "--svd-rank", "2").values():
        assert torch.allclose(delta, expected, atol=1e-5)
    config = json.loads((tmp_path / "svd" / "adapter_config.json").read_text())
    assert config["r"] == 2


def test_bad_inputs(tmp_path, adapters):
    result = run_script("train/merge.py", "--adapters", adapters[0], "--out", tmp_path / "m", check=False)
    assert "merging needs at least two adapters" in result.stderr
    result = run_script(
        "train/merge.py", "--adapters", *adapters, "--weights", "0.5", "0.5", "--out", tmp_path / "m", check=False
    )
    assert "2 weights for 3 adapters" in result.stderr
    (tmp_path / "plain").mkdir()
    result = run_script("train/merge.py", "--adapters", adapters[0], tmp_path / "plain", "--out", tmp_path / "m",
                        check=False)  # fmt: skip
    assert "not a PEFT adapter folder" in result.stderr
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((adapters[0] / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(tmp_path)}))
    result = run_script("train/merge.py", "--adapters", adapters[0], other, "--out", tmp_path / "m", check=False)
    assert "different base models" in result.stderr
    assert not (tmp_path / "m").exists()
    # one adapter twice, by its name and through a link: it counted as two, 2/3 of a merge meant to be 1/3
    (tmp_path / "link").symlink_to(adapters[0])
    result = run_script("train/merge.py", "--adapters", adapters[0], adapters[1], tmp_path / "link", "--out",
                        tmp_path / "m", check=False)  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: --adapters: {tmp_path / 'link'} is {adapters[0]} again; name each adapter once (--weights sets how "
        "much each counts)"
    )
    assert not (tmp_path / "m").exists()
    # a setting PEFT's method would ignore without a word, and a density keeping no delta at all
    for flags, line in [
        (("--density", "0.5"), "error: --density goes with --method ties or dare_ties, not linear"),
        (("--method", "ties", "--svd-rank", "4"), "error: --svd-rank goes with --method svd, not ties"),
        (("--method", "ties", "--density", "0"), "argument --density: expected a number above 0 and at most 1, got 0"),
        # a rank past the sum's: PEFT built matrices of that rank for every module (100,000 was killed for memory)
        (
            ("--method", "svd", "--svd-rank", "13"),
            "error: --svd-rank 13: the weighted sum of these adapters' deltas "
            "has rank at most 12 (their ranks, 4 + 4 + 4); a larger rank adds only zeros",
        ),
        # finite weights whose products are not: the merge was written, with inf in it, as a finished one
        (
            ("--weights", "1e308", "1e308", "1e308"),
            "error: the merged adapter's weights are not finite (NaN or inf): "
            "the weights [1e+308, 1e+308, 1e+308] overflow",
        ),
        # DARE's rescaling of what it keeps, blamed on weights of 1/3
        (
            ("--method", "dare_ties", "--density", "1e-300"),
            "error: the merged adapter's weights are not finite (NaN or inf): the weights [0.3333333333333333, "
            "0.3333333333333333, 0.3333333333333333] or --density 1e-300 (DARE scales what it keeps by 1/density) "
            "overflow",
        ),
    ]:
        result = run_script("train/merge.py", "--adapters", *adapters, "--out", tmp_path / "m", *flags, check=False)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].endswith(line), result.stderr[-600:]
    assert not (tmp_path / "m").exists()


def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path, tiny_model, adapters):
    """An earlier merge given both as an adapter and as --out was replaced by the merge it went into."""
    first = merge_adapters(adapters[:2], tmp_path / "m")
    before = {path.name: path.read_bytes() for path in first.iterdir()}
    with pytest.raises(RecTuneError) as caught:
        merge_adapters([str(first), str(adapters[2])], first)
    assert str(caught.value) == (
        f"--out {first}: is an adapter {first}, which this run reads; give an output apart from the inputs "
        "(--overwrite replaces an earlier output, never an input)"
    )
    assert {path.name: path.read_bytes() for path in first.iterdir()} == before
    with pytest.raises(RecTuneError, match="^--out and --full-model name the same folder; give two folders$"):
        merge_adapters(adapters[:2], tmp_path / "n", full_model=tmp_path / "n/")
    with pytest.raises(RecTuneError, match=re.escape(f"--full-model {tiny_model}: is their base model {tiny_model}")):
        merge_adapters(adapters[:2], tmp_path / "n", full_model=tiny_model, overwrite=True)  # the adapters' base
    assert not (tmp_path / "n").exists()


def saved_adapter(folder, tiny_model, **settings):
    """A rank-4 adapter on TARGETS with random A and B, and ``settings`` as LoraConfig takes them."""
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False, **settings)
    get_peft_model(model, config).save_pretrained(folder)
    return folder


def test_an_adapter_the_merge_would_change_silently_is_refused(tmp_path, tiny_model, adapters):
    """PEFT merged these without a word: a DoRA adapter lost its magnitudes, a trained lm_head copy
    (modules_to_save) and trained biases were left out, and a NaN weight made the merged adapter NaN."""
    dora = saved_adapter(tmp_path / "dora", tiny_model, use_dora=True)
    head = saved_adapter(tmp_path / "head", tiny_model, modules_to_save=["lm_head"])
    lora_bias = saved_adapter(tmp_path / "lora_bias", tiny_model, lora_bias=True)
    biases = saved_adapter(tmp_path / "biases", tiny_model, bias="all")  # as on Qwen2, whose q_proj has a bias:
    weights = load_file(biases / "adapter_model.safetensors")  # this model has none to train
    q_bias = "base_model.model.model.layers.0.self_attn.q_proj.bias"
    save_file({**weights, q_bias: torch.zeros(32)}, biases / "adapter_model.safetensors")
    tokens = saved_adapter(tmp_path / "tokens", tiny_model)  # PEFT's trainable tokens, which no merge combines
    delta = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"
    save_file({**weights, delta: torch.zeros(2, 32)}, tokens / "adapter_model.safetensors")
    broken = saved_adapter(tmp_path / "nan", tiny_model)
    weights = load_file(broken / "adapter_model.safetensors")
    first = sorted(weights)[0]
    weights[first][0, 0] = float("nan")
    save_file(weights, broken / "adapter_model.safetensors")
    expected = {
        dora: f"error: {dora / 'adapter_config.json'}: a DoRA adapter: a weighted merge would drop its magnitude "
        "vectors",
        head: f"error: {head / 'adapter_config.json'}: trains whole copies of lm_head (modules_to_save), which a "
        "weighted merge of LoRA deltas leaves out",
        biases: f"error: {biases / 'adapter_model.safetensors'}: holds {q_bias}, which a weighted merge of LoRA "
        "deltas leaves out (a trained bias: bias or lora_bias in its adapter_config.json)",
        tokens: f"error: {tokens / 'adapter_model.safetensors'}: holds {delta}, which a weighted merge of LoRA deltas "
        "leaves out",
        lora_bias: f"error: {lora_bias / 'adapter_model.safetensors'}: holds "
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias, which a weighted merge of LoRA deltas leaves "
        "out (a trained bias: bias or lora_bias in its adapter_config.json)",
        broken: f"error: {broken / 'adapter_model.safetensors'}: {first} holds values that are not finite (NaN or "
        "inf): the merge would too",
    }
    for adapter, line in expected.items():
        out = tmp_path / f"merged_{adapter.name}"
        result = run_script("train/merge.py", "--adapters", adapters[0], adapter, "--out", out, check=False)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == line, result.stderr[-1500:]
        assert not out.exists()


def test_a_tokenizer_with_ids_past_the_models_embeddings_is_refused(tmp_path, tiny_model, adapters):
    # The merged adapter carries its first adapter's tokenizer: one of another model would be an IndexError at
    # the first prompt that uses its extra ids
    grown = tmp_path / "grown"
    shutil.copytree(adapters[0], grown)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(10)])  # ids 512 to 521, past the fixture's 512 rows
    tokenizer.save_pretrained(grown)
    out = tmp_path / "merged"
    result = run_script("train/merge.py", "--adapters", grown, adapters[1], "--out", out, check=False)
    assert result.returncode == 2, result.stderr[-1500:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {grown}: its tokenizer has token ids up to 521, but the model has 512 token embeddings: the "
        "tokenizer of another model?"
    )
    assert not out.exists()


def test_an_adapters_pattern_that_never_ends_stops_before_the_weights_load(tmp_path, monkeypatch, adapters):
    # PEFT matches target_modules given as a string (a regular expression) against every module name: this one
    # took hours on one name
    monkeypatch.setattr(model_folders, "PATTERN_TIME_S", 1.0)
    endless = tmp_path / "endless"
    shutil.copytree(adapters[1], endless)
    config = json.loads((endless / "adapter_config.json").read_text())
    (endless / "adapter_config.json").write_text(json.dumps({**config, "target_modules": "(.*)*x"}))
    with pytest.raises(RecTuneError, match=re.escape(f"{endless}: PEFT's matching of its module patterns ")):
        merge_adapters([str(adapters[0]), str(endless)], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_the_rank_checks_read_each_adapters_ranks(tmp_path):
    """The SVD bound is each adapter's largest rank (``r``, PEFT's default 8 where unset, or a ``rank_pattern``
    entry), added; TIES and DARE-TIES take one rank, as PEFT reads it; ranks PEFT would not take are left to
    loading to refuse, not a crash here."""
    from rectune.training.merging import _check_ranks

    def adapter(name, **config):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps(config))
        return str(tmp_path / name)

    given = [adapter("a", r=4), adapter("b", rank_pattern={"q_proj": 6}), adapter("c", r=2, rank_pattern={"v": 5})]
    _check_ranks("svd", 4 + 8 + 5, given)
    with pytest.raises(RecTuneError, match=r"has rank at most 17 \(their ranks, 4 \+ 8 \+ 5\)"):
        _check_ranks("svd", 18, given)
    _check_ranks("svd", 10**6, [adapter("d", r="4"), adapter("e", r=True)])  # loading's to refuse
    _check_ranks("linear", None, given)  # PEFT's cat: any ranks
    for method in ("ties", "dare_ties"):
        with pytest.raises(RecTuneError) as caught:
            _check_ranks(method, None, given)
        assert str(caught.value) == (
            f"--method {method} merges adapters of one rank; these have ranks 4, 8, 5 (--method linear or svd merges "
            "adapters of any ranks)"
        )
    # 8 and 8 as PEFT counts; then each module's rank, as its matrices have it (a rank_pattern's 4 on v_proj)
    same = [adapter("f", r=8), adapter("g", r=2, rank_pattern={"v_proj": 8}), adapter("h", r=8, rank_pattern={"v": 4})]
    key = "base_model.model.model.layers.0.self_attn.{}.lora_A.weight"
    shapes = [{"q_proj": 8, "v_proj": 8}, {"v_proj": 8}, {"q_proj": 8, "v_proj": 4}]
    for folder, ranks in zip(same, shapes, strict=True):
        save_file({key.format(m): torch.zeros(r, 32) for m, r in ranks.items()}, f"{folder}/adapter_model.safetensors")
    _check_ranks("ties", None, same[:2])
    with pytest.raises(RecTuneError) as caught:
        _check_ranks("dare_ties", None, same)
    assert str(caught.value) == (
        "--method dare_ties merges adapters of one rank; model.layers.0.self_attn.v_proj has ranks 8, 8, 4 in them "
        "(--method linear or svd merges adapters of any ranks)"
    )


def test_adapters_peft_cannot_merge_together_are_one_line_before_the_weights_load(tmp_path, tiny_model, adapters):
    """Ties over ranks 4 and 8, and target modules named by a pattern beside ones named by a list: PEFT's
    ValueErrors were tracebacks once the base model and every adapter had loaded. Adapters of other layers: the
    merge was made without a word."""
    for name, settings in (("rank8", {"r": 8, "target_modules": TARGETS}),
                           ("pattern", {"r": 4, "target_modules": r".*\.(q_proj|v_proj)"}),
                           ("layer0", {"r": 4, "target_modules": TARGETS, "layers_to_transform": [0]})):  # fmt: skip
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        config = LoraConfig(lora_alpha=16, init_lora_weights=False, **settings)
        get_peft_model(model, config).save_pretrained(tmp_path / name)
    out = tmp_path / "merged"
    for other, method, line in [
        ("rank8", "ties", "--method ties merges adapters of one rank; these have ranks 4, 8 (--method linear or svd "
                          "merges adapters of any ranks)"),
        ("pattern", "linear", f"--adapters: PEFT merges adapters whose target_modules are all a pattern or all a list, "
                              f"not both ({adapters[0]}: a list; {tmp_path / 'pattern'}: a pattern)"),
        # the merge takes the first adapter's layers: with the layer-0 adapter first, the other's layer 1 was lost
        ("layer0", "linear", "--adapters: their layers_to_transform differ (null, [0]); PEFT's merge takes the first "
                             "adapter's, dropping what the others train outside it or failing on what none trains: "
                             "merge adapters restricted alike"),
    ]:  # fmt: skip
        result = run_script("train/merge.py", "--adapters", adapters[0], tmp_path / other, "--method", method,
                            "--out", out, check=False)  # fmt: skip
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1] == f"error: {line}"
        assert not out.exists()


def test_a_merge_of_sft_then_rft_adapters_keeps_their_merged_sft_base(tmp_path, tiny_model, adapters):
    """Adapters trained on a merged SFT base merge into one trained on it too: the merge recorded only the plain
    base (PEFT's ``../sft/merged``, relative to another folder), so evaluation dropped the SFT delta."""
    sft, runs = adapters[0], []
    for name, adapter in zip(("rft_a", "rft_b"), adapters[1:], strict=True):
        runs.append(shutil.copytree(adapter, tmp_path / "run" / name))
        make_portable(runs[-1], str(tiny_model), str(sft))
    out, full = tmp_path / "merges" / "rft", tmp_path / "full"
    run_script("train/merge.py", "--adapters", *runs, "--out", out, "--full-model", full)
    to_sft = os.path.relpath(sft, out)
    assert json.loads((out / "base_chain.json").read_text()) == {
        "base_model": str(tiny_model),
        "merged_adapters": [to_sft],
        "merged_sha256": [adapter_fingerprint(sft)],
    }
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == f"{to_sft}/merged"
    assert adapter_chain(out) == (str(tiny_model), [str(sft)])
    # what it evaluates as: the base, plus the SFT delta, plus the mean of the two RFT deltas
    key = "model.layers.0.self_attn.q_proj.weight"
    module = next(m for m in deltas(sft) if "layers.0.self_attn.q_proj" in m)
    expected = load_file(tiny_model / "model.safetensors")[key] + deltas(sft)[module]
    expected = expected + sum(deltas(run)[module] for run in runs) / 2
    assert torch.allclose(load_file(full / "model.safetensors")[key], expected, atol=1e-6)
