"""The chunked token log-prob function against the plain torch formula: values and gradients; the entropy metric,
in blocks, against the differentiable entropy."""

import pytest
import torch
from rl.kernels.token_entropy import token_entropy, token_entropy_metric
from rl.kernels.token_logprobs import ChunkedTokenLogprobs, token_logprobs, token_logprobs_reference


def _case(shape, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype).requires_grad_(True)
    targets = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    return logits, targets


@pytest.mark.parametrize("block_elements", [1, 40, 10_000])  # one row per block, a few rows, everything at once
@pytest.mark.parametrize("shape", [(7, 13), (3, 5, 13)])
def test_values_and_gradient_match_the_reference(shape, block_elements):
    logits, targets = _case(shape)
    weights = torch.randn(shape[:-1], dtype=torch.float64)
    got = ChunkedTokenLogprobs.apply(logits, targets, block_elements)
    (grad_got,) = torch.autograd.grad((got * weights).sum(), logits)
    want = token_logprobs_reference(logits, targets)
    (grad_want,) = torch.autograd.grad((want * weights).sum(), logits)
    # both sides compute in float32: a gradient 1 - softmax near 1 cancels, so a few ulp of the
    # log-sum-exp (its reduction order differs between CPUs' vector units) show as ~1e-6 absolute
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad_got, grad_want, atol=1e-5, rtol=1e-5)


def test_gradient_through_a_sliced_view():
    """The trainer passes ``logits[:, :-1]``, a non-contiguous view; the gradient lands in the right rows."""
    full, _ = _case((2, 6, 9))
    targets = torch.randint(0, 9, (2, 5))
    weights = torch.randn(2, 5, dtype=torch.float64)
    (got,) = torch.autograd.grad((ChunkedTokenLogprobs.apply(full[:, :-1], targets, 18) * weights).sum(), full)
    (want,) = torch.autograd.grad((token_logprobs_reference(full[:, :-1], targets) * weights).sum(), full)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.all(got[:, -1] == 0) and torch.any(got[:, :-1] != 0)


def test_bfloat16_logits_keep_their_dtype_for_the_gradient():
    logits, targets = _case((4, 8, 50), dtype=torch.bfloat16)
    out = token_logprobs(logits, targets)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, token_logprobs_reference(logits, targets), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad.float()).all()
    # each row's gradient of log p(target) sums to zero: 1 - sum(softmax)
    assert logits.grad.float().sum(-1).abs().max() < 0.05


def test_shape_mismatch_is_named():
    logits, _ = _case((3, 4))
    with pytest.raises(ValueError, match="targets of the leading shape"):
        ChunkedTokenLogprobs.apply(logits, torch.zeros(2, dtype=torch.long), 100)


@pytest.mark.parametrize("block_elements", [1, 40, 10_000])
@pytest.mark.parametrize("shape", [(7, 13), (3, 5, 13)])
def test_the_entropy_metric_in_blocks_is_the_entropy_without_gradient(shape, block_elements):
    logits, _ = _case(shape, dtype=torch.bfloat16)
    got = token_entropy_metric(logits, block_elements)
    assert got.dtype == torch.float32 and not got.requires_grad
    torch.testing.assert_close(got, token_entropy(logits).detach())
