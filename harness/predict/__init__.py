"""The performance predictor: arch specs as data (``arch/``), a model of a launch from the static
model's resources and a variant's declared per-tile work (``model.py``), its fit on one GPU's
measurements with held-out validation (``fit.py``), and ``vk predict`` / ``vk predict-fit``."""
