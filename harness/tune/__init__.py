"""Tuning: one Optuna study per key over the statically feasible space, trials measured in worker
processes, winners and their quality (``vk tune``, ``vk tuned``, ``vk tune-quality``); README.md."""
