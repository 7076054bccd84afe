"""TRL's fused output head tuned for CPUs: labelled positions only, small tiles, the same values and gradients."""

import inspect

import pytest
import torch
from trl.kernels import ChunkedLogProbFunction
from trl.trainer import utils as trl_utils
from trl.trainer.utils import add_fused_lm_head

from rectune.training import cpu_lm_head
from rectune.training.cpu_lm_head import tune_cpu_lm_head

OUTPUTS = ("log_probs", "entropy", "is_top1")


@pytest.fixture(autouse=True)
def trls_own_head_after():
    yield
    tune_cpu_lm_head(False)


class Calls:
    """Records the rows and vocabulary tile of each call of TRL's kernel."""

    def __init__(self):
        self.rows, self.tiles = [], []

    def apply(self, hidden, weight, bias, targets, temperature, chunk_size, *rest):
        self.rows.append(hidden.shape[0])
        self.tiles.append(chunk_size)
        return ChunkedLogProbFunction.apply(hidden, weight, bias, targets, temperature, chunk_size, *rest)


def test_the_tiles_give_the_log_probabilities_entropies_hits_and_gradients_of_full_logits(monkeypatch):
    monkeypatch.setattr(cpu_lm_head, "VOCAB_TILE", 128)  # 300 words: tiles of 128, 128 and 44
    torch.manual_seed(0)
    hidden = torch.randn(600, 16, requires_grad=True)  # 600 tokens: slices of 256, 256 and 88
    weight = (0.3 * torch.randn(300, 16)).requires_grad_()
    targets = torch.randint(0, 300, (600,))
    calls = Calls()
    log_probs, entropy, _, _, is_top1 = cpu_lm_head._CpuTiles(calls).apply(
        hidden, weight, None, targets, 0.7, 32768, None, 1.0, OUTPUTS
    )  # at the CPU demo recipe's sampling temperature: GRPO's log-probabilities are the sampled distribution's
    assert calls.rows == [256, 256, 88] and calls.tiles == [128, 128, 128]

    full = torch.log_softmax(hidden @ weight.T / 0.7, dim=-1)
    assert torch.allclose(log_probs, full.gather(1, targets[:, None]).squeeze(1), atol=1e-5)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-5)
    assert torch.equal(is_top1.bool(), full.argmax(-1) == targets)

    tiled = torch.autograd.grad((log_probs.sum() + entropy.sum()), (hidden, weight))
    expected = torch.autograd.grad(full.gather(1, targets[:, None]).sum() - (full.exp() * full).sum(), (hidden, weight))
    for got, want in zip(tiled, expected, strict=True):
        assert torch.allclose(got, want, atol=1e-4)


def tiny_causal_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=32,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, outputs=OUTPUTS)
    return model


def fused_forward(model, calls):
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    labels = torch.full_like(ids, -100)
    labels[0, 7:] = ids[0, 7:]  # 3 answer tokens, predicted from positions 6, 7 and 8 (9 predicts nothing)
    labels[1, 4:6] = ids[1, 4:6]  # 2 answer tokens
    model.zero_grad()
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    gradients = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return out, gradients, calls.rows[:]


def test_a_cpu_scores_only_the_labelled_positions_and_gets_the_same_loss_and_gradients(monkeypatch):
    model, calls = tiny_causal_lm(), Calls()
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", calls)
    untuned, untuned_gradients, untuned_rows = fused_forward(model, calls)
    assert untuned_rows == [18]  # TRL off CUDA: every position of both rows but the last

    calls.rows.clear()
    assert tune_cpu_lm_head()
    assert isinstance(trl_utils._ChunkedLogProbFunction, cpu_lm_head._CpuTiles)
    tuned, tuned_gradients, tuned_rows = fused_forward(model, calls)
    assert tuned_rows == [5]
    for field in ("log_probs", "entropy", "is_top1", "label_mask"):
        assert torch.allclose(getattr(tuned, field).float(), getattr(untuned, field).float(), atol=1e-6), field
    assert torch.allclose(tuned.loss, untuned.loss, atol=1e-6)
    assert len(tuned_gradients) == len(untuned_gradients) > 0
    for got, want in zip(tuned_gradients, untuned_gradients, strict=True):
        assert torch.allclose(got, want, atol=1e-6)


def test_a_batch_without_labels_gives_a_zero_loss_that_still_backpropagates():
    model = tiny_causal_lm()
    tune_cpu_lm_head()
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    out = model(input_ids=ids, labels=torch.full_like(ids, -100), fused_lm_head=True)
    out.loss.backward()
    assert out.loss.item() == 0 and not out.label_mask.any()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_tuning_twice_wraps_once_and_untuning_gives_trls_own_back():
    own_scorer, own_function = trl_utils._use_triton, trl_utils._ChunkedLogProbFunction
    assert not own_scorer(torch.device("cpu"))
    tune_cpu_lm_head()
    tune_cpu_lm_head()
    assert trl_utils._use_triton(torch.device("cpu"))
    assert trl_utils._ChunkedLogProbFunction.function is own_function
    tune_cpu_lm_head(False)
    assert trl_utils._use_triton is own_scorer and trl_utils._ChunkedLogProbFunction is own_function


def test_a_trl_without_the_head_is_left_as_it_is(monkeypatch):
    monkeypatch.delattr(trl_utils, "_use_triton")
    assert not tune_cpu_lm_head()
    assert trl_utils._ChunkedLogProbFunction is ChunkedLogProbFunction


def test_trls_head_asks_its_device_test_only_whether_to_score_labelled_positions_only():
    # The tuning answers yes on a CPU; were TRL to use the same name to pick its Triton kernels, that
    # answer would send a CPU tensor to Triton. This fails when a TRL release changes that.
    source = inspect.getsource(trl_utils)
    assert source.count("_use_triton(") == 1
    assert "compact = _use_triton(hidden_states.device)" in source
