"""The fitted parameters of the predictor, one YAML per (variant, arch it was fitted on), in
``harness/predict/params/`` (written by ``vk predict-fit`` with the data they were fitted on)."""

from __future__ import annotations

from pathlib import Path

PARAMS_DIR = Path(__file__).parent / "params"


def params_path(variant: str, fitted_on: str) -> Path:
    return PARAMS_DIR / f"{variant}-{fitted_on}.yaml"


def load_params(variant: str, fitted_on: str) -> dict:
    import yaml

    path = params_path(variant, fitted_on)
    if not path.exists():
        raise SystemExit(f"vk predict: no fitted parameters for {variant!r} on {fitted_on} ({path}); run vk "
                         "predict-fit")
    return yaml.safe_load(path.read_text())
