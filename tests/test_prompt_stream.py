"""The training prompt stream: positions, passes and resuming from its state."""

import itertools

from rl.data.stream import PromptStream
from rl.types import PromptRow

ROWS = [PromptRow(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(10)]


def _ids(chunks, n):
    return [[(pos, row.prompt_id) for pos, row in chunk] for chunk in itertools.islice(chunks, n)]


def test_each_pass_is_a_shuffle_of_the_rows_that_fill_whole_chunks():
    stream = PromptStream(ROWS, 4, seed=3)
    chunks = _ids(stream.chunks(), 6)  # 10 rows, chunks of 4: 8 rows per pass, 3 passes
    assert [pos for chunk in chunks for pos, _ in chunk] == list(range(24))
    for epoch in range(3):
        ids = [pid for chunk in chunks[2 * epoch : 2 * epoch + 2] for _, pid in chunk]
        assert len(set(ids)) == 8
    assert chunks[:2] != chunks[2:4]  # each pass has its own order
    assert _ids(PromptStream(ROWS, 4, seed=3).chunks(), 6) == chunks  # a function of the seed alone
    assert _ids(PromptStream(ROWS, 4, seed=4).chunks(), 6) != chunks


def test_a_resumed_stream_replays_unfinished_positions_then_goes_on():
    stream = PromptStream(ROWS, 4, seed=0)
    chunks = stream.chunks()
    first, second, third = next(chunks), next(chunks), next(chunks)
    for pos, _ in first + second[:1] + second[2:3] + third[3:]:  # trained or dropped, out of order
        stream.finish(pos)
    assert stream.state() == {"low": 5, "finished": [6, 11]}

    resumed = PromptStream(ROWS, 4, seed=0, state=stream.state())
    again = list(itertools.islice((item for chunk in resumed.chunks() for item in chunk), 8))
    positions = [pos for pos, _ in again]
    assert positions == [5, 7, 8, 9, 10, 12, 13, 14]  # the unfinished ones, in order, then new ones
    uninterrupted = {pos: row.prompt_id for chunk in (first, second, third) for pos, row in chunk}
    assert all(row.prompt_id == uninterrupted[pos] for pos, row in again if pos in uninterrupted)


def test_finishing_in_any_order_moves_low_past_every_finished_position():
    stream = PromptStream(ROWS, 2, seed=0)
    for pos in [3, 1, 2, 0, 5]:
        stream.finish(pos)
    assert stream.state() == {"low": 4, "finished": [5]}
    stream.finish(4)
    assert stream.state() == {"low": 6, "finished": []}
