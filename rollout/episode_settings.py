"""Which episodes a run samples, as plain data for the rollout workers: tool-calling ones (``rollout.tools`` /
``rollout.environment``), a user's workflow (``rollout.workflow``), or none (single-turn groups under the shaping
policy). Either kind is built on a worker into a ``Workflow`` by ``settings.build(tokenizer)``."""

from __future__ import annotations

import os

from rl.rollout.tool_workflow import ToolSettings
from rl.rollout.user_workflow import UserWorkflowSettings

from rl.config import RunConfig

EpisodeSettings = ToolSettings | UserWorkflowSettings


def episode_settings(cfg: RunConfig) -> EpisodeSettings | None:
    """The run's episode settings (relative specs against the current directory); None for single-turn groups."""
    if cfg.rollout.workflow is not None:
        return UserWorkflowSettings(cfg.rollout.workflow, os.getcwd(), cfg.data.chat_template_kwargs)
    return ToolSettings.of(cfg)
