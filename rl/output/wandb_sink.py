"""Weights & Biases beside ``metrics.jsonl`` and TensorBoard (``logging.wandb``); wandb is imported only here."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

from rl.config import RunConfig, WandbConfig, one_line
from rl.inputs.preflight import BadInput

log = logging.getLogger("rl.wandb")


class WandbSink:
    """One W&B run per training run: its id is kept in ``RUN_DIR/wandb_run_id``, so a resumed run (``resume``)
    continues it; a new run in the same directory starts a new one. Started before any actor: a W&B that cannot
    start a run (no API key, say) is a ``BadInput``."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], resume: bool = False) -> None:
        import wandb

        run_dir.mkdir(parents=True, exist_ok=True)
        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        try:
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
        except Exception as e:  # no API key, no network, a project the account may not write to
            why = one_line(e).rstrip(".")
            raise BadInput(
                f"logging.wandb: W&B did not start a run: {why}; log in (wandb login, or WANDB_API_KEY), or set "
                "logging.wandb.mode=offline"
            ) from None
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


def start_wandb(cfg: RunConfig, resume: bool) -> WandbSink | None:
    """The run's W&B run where ``logging.wandb`` is set, the run's config as its config; None where it is not."""
    if cfg.logging.wandb is None:
        return None
    return WandbSink(cfg.logging.wandb, cfg.run_dir, cfg.model_dump(mode="json"), resume=resume)
