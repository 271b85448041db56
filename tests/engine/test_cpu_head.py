"""The few-row CPU output head gives F.linear's logits whichever way it is computed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from midword.engine.model import cpu_head  # noqa: E402
from midword.engine.model.cpu_head import MAX_ROWS, speed_up_output_head  # noqa: E402
from midword.engine.model.hf_backend import HFModel  # noqa: E402

from midword.testing.tiny_models import build_tiny_llama  # noqa: E402


@pytest.fixture(autouse=True)
def small_heads_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny test heads are far below the size the patch waits for."""
    monkeypatch.setattr(cpu_head, "MIN_WEIGHT_BYTES", 0)


def test_small_heads_keep_f_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_head, "MIN_WEIGHT_BYTES", 8 << 20)
    model = _model()  # 3000 x 48 float32: 576 kB
    assert speed_up_output_head(model) is None
    assert "forward" not in vars(model.get_output_embeddings())


def _model(dtype: str = "float32", tied: bool = True):  # noqa: ANN202
    return build_tiny_llama(3000, hidden=48, layers=1, dtype=dtype, tie_word_embeddings=tied)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("way", ["linear", "wt", "pad"])
def test_every_way_equals_f_linear(dtype: str, way: str) -> None:
    model = _model(dtype)
    head = model.get_output_embeddings()
    plan = speed_up_output_head(model)
    assert plan is not None
    plan.choices = {1: way if way != "wt" else "linear", 2: way if way != "pad" else "wt"}
    tol = 1e-5 if dtype == "float32" else 1e-12
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in (1, 2, 3, MAX_ROWS, MAX_ROWS + 1):
            x = torch.randn(1, rows, 48, generator=gen, dtype=head.weight.dtype)
            got = head(x)
            want = torch.nn.functional.linear(x, head.weight, head.bias)
            assert got.shape == want.shape == (1, rows, 3000)
            assert got.is_contiguous()
            assert torch.max(torch.abs(got - want)).item() <= tol * want.abs().max().item()


def test_bias_is_added() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True)
    holder = torch.nn.Module()
    holder.get_output_embeddings = lambda: head  # type: ignore[method-assign]
    plan = speed_up_output_head(holder)
    assert plan is not None
    plan.choices = {1: "pad", 2: "wt"}
    x = torch.randn(3, 16)
    with torch.inference_mode():
        for rows in (x, x[:1]):
            got = head(rows)
            want = torch.nn.functional.linear(rows, head.weight, head.bias)
            # float32 with another summation order: equal to rounding, not bit for bit
            assert torch.max(torch.abs(got - want)).item() <= 1e-5 * want.abs().max().item()
            without = torch.nn.functional.linear(rows, head.weight)
            assert torch.max(torch.abs(got - without)).item() > 1e-3  # the bias is in


def test_timed_choice_is_made_when_wrapped_and_weights_stay_tied() -> None:
    model = _model()
    keys = set(model.state_dict())
    hf = HFModel(model)
    assert hf.head_plan is not None
    assert set(hf.head_plan.choices) == {1, 2}  # timed at load, not on a first request
    assert hf.head_plan.choices[1] in {"linear", "pad"}
    assert hf.head_plan.choices[2] in {"linear", "wt"}
    assert set(model.state_dict()) == keys
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert head.weight.data_ptr() == embed.weight.data_ptr()
    assert HFModel(model).head_plan is hf.head_plan  # patched once


def test_autograd_calls_keep_f_linear() -> None:
    model = _model()
    plan = speed_up_output_head(model)
    assert plan is not None
    plan.choices = {1: "pad", 2: "wt"}
    head = model.get_output_embeddings()
    out = head(torch.randn(2, 48))
    assert out.requires_grad  # F.linear with the weight's graph, not our no-grad product
    out.sum().backward()
    assert head.weight.grad is not None


def test_other_heads_are_left_alone() -> None:
    holder = torch.nn.Module()
    head = torch.nn.Sequential(torch.nn.Linear(4, 5))
    holder.get_output_embeddings = lambda: head  # type: ignore[method-assign]
    assert speed_up_output_head(holder) is None
    assert speed_up_output_head(_model_bf16()) is None
    off_cpu = torch.nn.Linear(64, 1000, device="meta")  # stands for a GPU-resident head
    holder.get_output_embeddings = lambda: off_cpu  # type: ignore[method-assign]
    assert speed_up_output_head(holder) is None
    assert "forward" not in vars(off_cpu)


def _model_bf16():  # noqa: ANN202
    return build_tiny_llama(300, hidden=16, layers=1, heads=2, dtype="bfloat16")
