"""The Triton log-prob kernel against its torch reference (needs a CUDA GPU; skipped without one)."""

import pytest
import torch
from rl.kernels.token_logprobs import token_logprobs, token_logprobs_reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 37, 1000), (512, 49152), (4, 151936)])
def test_triton_matches_the_reference(shape, dtype):
    from rl.kernels.triton_logprobs import triton_token_logprobs

    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(shape, device="cuda", generator=gen) * 4).to(dtype)
    targets = torch.randint(0, shape[-1], shape[:-1], device="cuda", generator=gen)
    got = triton_token_logprobs(logits, targets)
    want = token_logprobs_reference(logits, targets)
    assert got.dtype == torch.float32 and got.shape == targets.shape
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-5)


def test_triton_is_stable_for_large_logits_and_a_sliced_input():
    """Logits in the thousands (no overflow) and the trainer's ``logits[:, :-1]`` slice (not contiguous)."""
    from rl.kernels.triton_logprobs import triton_token_logprobs

    logits = torch.randn(2, 65, 49152, device="cuda") * 3000
    targets = torch.randint(0, 49152, (2, 64), device="cuda")
    sliced = logits[:, :-1]
    got = triton_token_logprobs(sliced, targets)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, token_logprobs_reference(sliced, targets), atol=1e-3, rtol=1e-5)


def test_dispatch_uses_the_kernel_without_grad_and_the_reference_with_grad():
    logits = torch.randn(8, 1000, device="cuda", requires_grad=True)
    targets = torch.randint(0, 1000, (8,), device="cuda")
    with torch.no_grad():
        fast = token_logprobs(logits, targets)
    slow = token_logprobs(logits, targets)
    assert fast.grad_fn is None and slow.grad_fn is not None
    slow.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    torch.testing.assert_close(fast, slow.detach(), atol=2e-4, rtol=1e-5)


def test_chunked_logprobs_gradient_on_cuda_bf16():
    """The trainer's path with gradients: bf16 logits on the GPU, blocks of rows, against the torch formula."""
    from rl.kernels.token_logprobs import ChunkedTokenLogprobs

    logits = (torch.randn(2, 301, 49152, device="cuda") * 4).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, 49152, (2, 300), device="cuda")
    weights = torch.randn(2, 300, device="cuda")
    got = ChunkedTokenLogprobs.apply(logits[:, :-1], targets, 1 << 22)
    (grad_got,) = torch.autograd.grad((got * weights).sum(), logits)
    want = token_logprobs_reference(logits[:, :-1], targets)
    (grad_want,) = torch.autograd.grad((want * weights).sum(), logits)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-5)
    torch.testing.assert_close(grad_got.float(), grad_want.float(), atol=1e-2, rtol=1e-2)
