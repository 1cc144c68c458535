"""Log-probability of the next token at every position: ``log_softmax(logits)[t, ids[t+1]]``.

``token_logprobs_reference`` is the plain torch formula: it materializes the float32 ``[..., V]``
log-softmax and keeps it for backward, the largest activation of an RL step. ``ChunkedTokenLogprobs``
computes the same values and gradient a block of rows at a time (forward: ``z[target] - logsumexp(z)``;
backward: ``g * (onehot(target) - softmax(z))``, the softmax recomputed from the saved log-sum-exp), so
only the logits (in their own dtype) and one float32 row per position stay alive between the passes.
Without gradients on CUDA the Triton kernel computes the forward in one pass over the vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

BLOCK_ELEMENTS = 1 << 26  # float32 elements of one block's temporaries (256 MiB)


def token_logprobs_reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``logits [..., V]`` and ``targets [...]`` -> log-probs ``[...]`` in float32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def row_blocks(shape: torch.Size, block_elements: int) -> Iterator[tuple]:
    """Index tuples covering the rows of a ``[R, V]`` or ``[B, R, V]`` tensor, about ``block_elements`` each.

    The same index selects the matching rows of any tensor with the same leading shape (targets, outputs).
    """
    if math.prod(shape) <= block_elements:
        yield (...,)
        return
    rows, vocab = shape[-2], shape[-1]
    step = max(1, block_elements // vocab)
    for lead in [()] if len(shape) == 2 else [(b,) for b in range(shape[0])]:
        for start in range(0, rows, step):
            yield (*lead, slice(start, min(start + step, rows)))


class ChunkedTokenLogprobs(torch.autograd.Function):
    """Memory-bounded ``token_logprobs_reference`` with its gradient; takes 2-D or 3-D logits (views are fine)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, block_elements: int) -> torch.Tensor:
        if logits.dim() not in (2, 3) or targets.shape != logits.shape[:-1]:
            raise ValueError(
                f"need logits [R, V] or [B, R, V] and targets of the leading shape, got "
                f"{tuple(logits.shape)} and {tuple(targets.shape)}"
            )
        out = torch.empty(targets.shape, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        for idx in row_blocks(logits.shape, block_elements):
            z = logits[idx].float()
            block_lse = torch.logsumexp(z, dim=-1)
            lse[idx].copy_(block_lse)
            picked = z.gather(-1, targets[idx].unsqueeze(-1)).squeeze(-1)
            out[idx].copy_(picked - block_lse)
        ctx.save_for_backward(logits, targets, lse)
        ctx.block_elements = block_elements
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for idx in row_blocks(logits.shape, ctx.block_elements):
            g = grad_out[idx].float().unsqueeze(-1)
            softmax = torch.exp(logits[idx].float() - lse[idx].unsqueeze(-1))
            block_grad = softmax.mul_(-g)
            block_grad.scatter_add_(-1, targets[idx].unsqueeze(-1), g)
            grad[idx].copy_(block_grad)
        return grad, None, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Dispatch: Triton on CUDA without gradients, else the chunked function (exact gradient, bounded memory)."""
    if logits.is_cuda and not torch.is_grad_enabled():
        from rl.kernels.triton_logprobs import triton_token_logprobs

        return triton_token_logprobs(logits, targets)
    if logits.dim() not in (2, 3):
        return token_logprobs_reference(logits, targets)
    return ChunkedTokenLogprobs.apply(logits, targets, BLOCK_ELEMENTS)
