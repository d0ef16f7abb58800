"""Where the harness reads and writes.

Measured records live under ``results/`` in the current directory (``VK_RESULTS_DIR`` overrides),
so an installed ``vk`` writes beside the user, not into site-packages. Run from the repository's
root, that is the repository's ``results/``.
"""

from __future__ import annotations

import os
from pathlib import Path


def results_dir() -> Path:
    """The results folder: ``$VK_RESULTS_DIR``, else ``./results``."""
    return Path(os.environ.get("VK_RESULTS_DIR") or "results")


def default_optuna_storage() -> str:
    """Where ``vk tune`` keeps its studies (and ``vk predict-fit --study`` reads them) by default."""
    return f"sqlite:///{results_dir() / 'tuned' / 'optuna.db'}"
