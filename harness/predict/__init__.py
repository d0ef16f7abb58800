"""The performance predictor: a model of a launch (arch rates from the registry, verify_kernels/arch.py) from the static
model's resources and a variant's declared per-tile work (``model.py``), its fit on one GPU's
measurements with held-out validation (``fit.py``), and ``vk predict`` / ``vk predict-fit``."""
