"""Weights & Biases beside ``metrics.jsonl`` and TensorBoard (``logging.wandb``); wandb is imported only here."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

from rl.config import WandbConfig

log = logging.getLogger("rl.wandb")


class WandbSink:
    """One W&B run per training run: its id is kept in ``RUN_DIR/wandb_run_id``, so a resumed run (``resume``)
    continues it; a new run in the same directory starts a new one."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], resume: bool = False) -> None:
        import wandb

        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            mode=cfg.mode,
            dir=str(run_dir),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            config=config,
            # Tailor's console stays as it is: wandb neither wraps stdout/stderr nor prints its banner
            settings=wandb.Settings(console="off", silent=True, disable_git=True),
        )
        self.offline = cfg.mode == "offline"

    def log(self, step: int, metrics: dict[str, Any], kind: str) -> None:
        """The numeric ``metrics`` as ``KIND/NAME`` at ``step``."""
        scalars = {f"{kind}/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.run.log(scalars, step=step)

    def log_table(self, step: int, name: str, columns: list[str], data: list[list[Any]]) -> None:
        """A table of ``data`` rows under ``name`` at ``step`` (a new one each step; W&B keeps every step's)."""
        import wandb

        self.run.log({name: wandb.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self.run.finish()
        if self.offline:
            where = Path(self.run.dir).parent
            log.info("W&B offline run in %s (upload it with: wandb sync %s)", where, where)
