"""A group's prompt computed once: its samples packed into one row behind the prompt they share.

A padded micro-batch repeats the prompt in every sample's row, so the trainer computes it once per sample. Here one
row holds the prompt once and then each sample's response; a 4-D attention mask lets a response token see the
prompt and the earlier tokens of its own response (never another response), and position ids restart after the
prompt for each response, so every response token gets the same hidden state as in its own padded row. The
log-probs are then laid out as ``collate`` lays them (``[samples, T-1]``, a response token at its padded column),
so the loss, its masks and its behaviour log-probs read them unchanged.

Invariant: for every response token, ``unpack(packed forward)`` equals the padded forward's log-prob up to float
rounding (checked once per trainer by ``FSDPEngine``, which falls back to padded rows if a model disagrees).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from rl.kernels.token_logprobs import token_logprobs
from rl.trainer.batching import Row, TokenBatch, collate, cut_micro_batches


@dataclass
class PackedInputs:
    """The packed model inputs of a micro-batch and where each response token's log-prob goes in the padded layout.

    Sources index the flat vector ``cat(shifted.flatten(), first)``: ``shifted [G, L-1-first]`` are the log-probs of
    each packed position's next token from position ``first`` on, and ``first [S]`` those of each sample's first
    response token, predicted from its prompt's last position (a position every sample of the row shares).
    """

    input_ids: torch.Tensor  # [G, L] prompt, then each response; right-padded
    position_ids: torch.Tensor  # [G, L] restarting after the prompt for each response
    attention_mask: torch.Tensor  # [G, 1, L, L] bool: True where a query position may attend to a key position
    first: int  # the first packed position whose logits are needed (the shortest prompt's last position)
    prompt_last: torch.Tensor  # [S, 2] (row, position) of each sample's prompt's last position
    first_tokens: torch.Tensor  # [S] each sample's first response token
    rows: torch.Tensor  # [N] padded-layout row of each response token
    cols: torch.Tensor  # [N] padded-layout column of each response token
    logprob_source: torch.Tensor  # [N] index into cat(shifted.flatten(), first)
    position_source: torch.Tensor  # [N] index into shifted.flatten() of the position that predicts the token
    real_tokens: int  # prompt and response tokens of the packed rows (the rest is padding)


def prompt_units(rows: list[Row]) -> list[list[Row]]:
    """``rows`` as runs of consecutive rows with the same prompt (a group's samples, in ``rows_of``'s order)."""
    units: list[list[Row]] = []
    for row in rows:
        if units and units[-1][0][0] == row[0]:
            units[-1].append(row)
        else:
            units.append([row])
    return units


def unit_length(unit: list[Row]) -> int:
    """Tokens of a packed row: the prompt once and every response."""
    return len(unit[0][0]) + sum(len(row[1]) for row in unit)


@dataclass(frozen=True)
class ForwardCost:
    """A forward's FLOPs, to pack only what computes less packed: ``per_token`` through the layers' weights (2 x
    their parameters; the LM head runs on response positions either way, so it is left out), ``per_pair`` for each
    (query, key) pair attention computes (4 x hidden size x layers: the scores, then the sum of values)."""

    per_token: float
    per_pair: float

    @classmethod
    def of(cls, model: torch.nn.Module) -> ForwardCost:
        config = model.config.get_text_config()
        weights = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
        return cls(per_token=2.0 * weights, per_pair=4.0 * config.hidden_size * config.num_hidden_layers)

    def joins(self, packed: int, prompt: int, response: int) -> bool:
        """Whether a response costs less appended to a packed row of ``packed`` tokens than in a padded row of its
        own. Counted as the kernels compute: every pair of a packed row under its mask, half the pairs of a
        padded (causal) row; so a long response stays alone, where attention outweighs the prompt it saves."""
        appended = self.per_token * response + self.per_pair * ((packed + response) ** 2 - packed**2)
        alone = self.per_token * (prompt + response) + self.per_pair * (prompt + response) ** 2 / 2
        return appended <= alone


def cut_packed_micro_batches(
    rows: list[Row], cost: ForwardCost, max_rows: int, max_tokens: int | None = None
) -> list[list[list[Row]]]:
    """``rows`` cut into micro-batches of packed rows (each a list of rows that share a prompt).

    A group's samples share a packed row while ``cost`` says each computes less there than alone. A micro-batch
    holds at most ``max_rows`` samples, as a padded one holds at most ``max_rows`` rows, and each packed row at most
    ``max_tokens`` tokens where it can (a response alone longer than that gets a row of its own), so its
    activations stay within the padded micro-batch's; packed rows are cut as ``cut_micro_batches`` cuts rows.
    """
    pieces = [piece for unit in prompt_units(rows) for piece in _split(unit, cost, max_rows, max_tokens)]
    return cut_micro_batches(pieces, max_rows, max_tokens, length=unit_length, rows=len)


def _split(unit: list[Row], cost: ForwardCost, max_rows: int, max_tokens: int | None) -> list[list[Row]]:
    """``unit`` cut in order into pieces of at most ``max_rows`` samples and ``max_tokens`` packed tokens, each
    sample joining the last piece only if ``cost`` says it computes less there."""
    pieces: list[list[Row]] = []
    for row in unit:
        last = pieces[-1] if pieces else None
        if (
            last
            and len(last) < max_rows
            and (max_tokens is None or unit_length([*last, row]) <= max_tokens)
            and cost.joins(unit_length(last), len(row[0]), len(row[1]))
        ):
            last.append(row)
        else:
            pieces.append([row])
    return pieces


def collate_packed(pieces: list[list[Row]], pad_id: int) -> TokenBatch:
    """The padded ``TokenBatch`` of the pieces' samples (its loss layout), with ``packed`` inputs for the forward."""
    batch = collate([row for piece in pieces for row in piece], pad_id)
    width = max(map(unit_length, pieces))
    g = len(pieces)
    first = min(len(piece[0][0]) for piece in pieces) - 1
    shifted = width - 1 - first  # columns of the shifted log-probs
    ids, positions, segments = [], [], []  # per packed row; segment 0 the prompt, k the k-th response, -1 padding
    prompt_last, first_tokens, rows, cols, lp_src, pos_src = [], [], [], [], [], []
    s = 0
    for r, piece in enumerate(pieces):
        p = len(piece[0][0])
        row_ids, row_pos, row_seg = list(piece[0][0]), list(range(p)), [0] * p
        for k, (_, response, *_) in enumerate(piece, start=1):
            n, start = len(response), len(row_ids)
            row_ids += response
            row_pos += range(p, p + n)
            row_seg += [k] * n
            prompt_last.append((r, p - 1))
            first_tokens.append(response[0])
            # response token j sits at padded column p-1+j; j=0 is predicted from the prompt's last position (the
            # first-token log-probs, after the shifted ones), j>=1 from packed position start+j-1
            rows += [s] * n
            cols += range(p - 1, p - 1 + n)
            inside = range(r * shifted + start - first, r * shifted + start - first + n - 1)
            lp_src += [g * shifted + s, *inside]
            pos_src += [r * shifted + p - 1 - first, *inside]
            s += 1
        pad = width - len(row_ids)
        ids.append(row_ids + [pad_id] * pad)
        positions.append(row_pos + [0] * pad)
        segments.append(row_seg + [-1] * pad)
    seg = torch.tensor(segments)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    # a query sees earlier keys of the prompt or of its own segment (padding sees padding: no fully masked row)
    allowed = causal & ((seg[:, None, :] == 0) | (seg[:, None, :] == seg[:, :, None]))
    batch.packed = PackedInputs(
        input_ids=torch.tensor(ids),
        position_ids=torch.tensor(positions),
        attention_mask=allowed.unsqueeze(1),
        first=first,
        prompt_last=torch.tensor(prompt_last, dtype=torch.long),
        first_tokens=torch.tensor(first_tokens, dtype=torch.long),
        rows=torch.tensor(rows, dtype=torch.long),
        cols=torch.tensor(cols, dtype=torch.long),
        logprob_source=torch.tensor(lp_src, dtype=torch.long),
        position_source=torch.tensor(pos_src, dtype=torch.long),
        real_tokens=sum(map(unit_length, pieces)),
    )
    return batch


def unpack(
    logits: torch.Tensor,
    packed: PackedInputs,
    shape: torch.Size,
    entropy: Callable[[torch.Tensor], torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``shape`` (``[samples, T-1]``, zero off the response tokens) from the packed rows' ``logits``
    (``[G, L-first, V]``: positions ``first`` to ``L-1``, at the sampling temperature), and ``entropy`` of each
    response token's predicting position laid out alike if asked."""
    shifted = token_logprobs(logits[:, :-1], packed.input_ids[:, packed.first + 1 :].to(logits.device))
    last = packed.prompt_last.to(logits.device)
    first = token_logprobs(logits[last[:, 0], last[:, 1] - packed.first], packed.first_tokens.to(logits.device))
    at = (packed.rows.to(logits.device), packed.cols.to(logits.device))
    flat = torch.cat([shifted.flatten(), first])
    out = flat.new_zeros(shape).index_put(at, flat[packed.logprob_source.to(logits.device)])
    if entropy is None:
        return out, None
    per_position = entropy(logits[:, :-1]).flatten()
    return out, per_position.new_zeros(shape).index_put(at, per_position[packed.position_source.to(logits.device)])
