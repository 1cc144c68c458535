"""Reading an offline W&B run back: the records of its ``.wandb`` file (tests only)."""

import struct
import time
from pathlib import Path


def wandb_records(run_dir: Path, timeout_s: float = 60.0) -> list:
    """Every record of the run's offline ``.wandb`` file, once it ends with its ``exit`` record.

    ``run.finish()`` can return before wandb's service process has flushed the file to disk (seen once on a busy
    CI machine: the file held no history record yet), so this waits for the file to be whole."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = _read_records(run_dir)
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _read_records(run_dir: Path) -> list:
    """The records of the offline ``.wandb`` file as it is on disk now (a LevelDB-style log of protobuf ``Record``s)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, chunk, records = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # a block's padding
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record still being written
            break
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def history(records: list) -> list[dict[str, str]]:
    return [
        {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
