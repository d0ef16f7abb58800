"""The predictor as a tuning objective (``vk tune --objective predicted``): one config's predicted
time on an arch at one key, with the static model's CTAs per SM; no GPU."""

from __future__ import annotations

from harness.predict.fit import blocks_per_sm
from harness.predict.fitted import load_params
from harness.predict.model import predict
from harness.static.space import VariantOnArch


def predicted_evaluator(target: VariantOnArch, *, prefix_len: int, tree_nodes: int, heads: int,
                        fitted_on: str = "sm_90"):
    """A function config -> result dict shaped like a measured trial's: ``status``, ``median_ms`` (the
    predicted time on the target's arch) and the prediction's terms (bound, blocks_per_sm, waves, ...)."""
    params = load_params(target.name, fitted_on)["params"]

    def evaluate(config: dict) -> dict:
        resident = blocks_per_sm(target, config)
        if resident < 1:
            return {"status": "error", "reason": f"no CTA of this config fits an {target.arch} SM (static model)"}
        result = predict(target, config, prefix_len=prefix_len, tree_nodes=tree_nodes, heads=heads,
                         blocks_per_sm=resident, params=params)
        return {"status": "ok", "median_ms": result.time_ms, "predicted": True, "fitted_on": fitted_on,
                **result.as_dict()}

    return evaluate
