"""An MLA decoder in the DeepSeek-V3 / Kimi-K2 form, for the end-to-end DDTree decode loop.

Per layer (weights absorbed, the way MLA decodes):
  x = RMSNorm(h);  c_q = RMSNorm(q_a(x));  [q_nope | q_rope] = q_b(c_q) per head
  c_kv = kv_a(x) = [latent (kv_lora) | k_rope (rope)];  the cached row is [RMSNorm(latent) | RoPE(k_rope)]
  query row = [q_nope @ W_UK (kv_lora) | RoPE(q_rope)]  -> verify_attention over the paged latent rows
  head out  = attn_latent @ W_UV^T (v dims);  h += o_proj(heads x v);  h += SwiGLU(RMSNorm(h))
and then RMSNorm and the LM head. The SwiGLU MLP stands in for the per-GPU activated MoE cost.

Weights are random from a seed (``random_weights``) or read from a safetensors file in DeepSeek's
names (``load_weights``; ``kv_b_proj`` [heads x (nope + v), kv_lora] is split into W_UK and W_UV).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from harness.measure.inputs import InputError


@dataclass(frozen=True)
class MLAConfig:
    layers: int
    hidden: int
    heads: int
    q_lora: int
    kv_lora: int
    rope: int
    nope: int
    v: int
    vocab: int
    intermediate: int
    max_positions: int = 262144  # positions the model is run at: context + prompt + decoded + tree
    rope_theta: float = 50000.0
    eps: float = 1e-6

    @property
    def sm_scale(self) -> float:
        return 1.0 / math.sqrt(self.nope + self.rope)

    @property
    def latent_dim(self) -> int:
        """Width of a cached row: the latent plus the shared RoPE key."""
        return self.kv_lora + self.rope

    def matrix_params(self) -> int:
        """Weights read once per forward (embedding excluded: only T rows of it are read)."""
        per_layer = (self.q_lora * self.hidden + self.heads * (self.nope + self.rope) * self.q_lora
                     + self.latent_dim * self.hidden + self.heads * (self.nope + self.v) * self.kv_lora
                     + self.hidden * self.heads * self.v + 3 * self.intermediate * self.hidden
                     + 2 * self.hidden + self.q_lora + self.kv_lora)
        return self.layers * per_layer + self.vocab * self.hidden + self.hidden

    def resident_bytes(self, positions: int, element_bytes: int) -> int:
        """Memory the decode holds: every weight (the embedding too) and ``positions`` cached rows per layer."""
        return element_bytes * (self.matrix_params() + self.vocab * self.hidden
                                + self.layers * positions * self.latent_dim)


PRESETS = {
    # A few layers and a small vocabulary, for CPU tests; the cached row keeps the contract's 576/512.
    "tiny": MLAConfig(layers=2, hidden=128, heads=4, q_lora=96, kv_lora=512, rope=64, nope=32, v=32, vocab=512,
                      intermediate=256, max_positions=8192),
    # One GPU's slice of Kimi K2 at TP8: 61 layers, 8 of 64 heads, MLP = the activated experts' share.
    "k2-tp8": MLAConfig(layers=61, hidden=7168, heads=8, q_lora=1536, kv_lora=512, rope=64, nope=128, v=128,
                        vocab=163840, intermediate=2304),
}


def layer_shapes(config: MLAConfig) -> dict[str, tuple[int, ...]]:
    """Per-layer weights as this module stores them (w_uk [H, nope, kv_lora], w_uv [H, v, kv_lora])."""
    c = config
    return {
        "attn_norm": (c.hidden,), "q_a": (c.q_lora, c.hidden), "q_norm": (c.q_lora,),
        "q_b": (c.heads * (c.nope + c.rope), c.q_lora), "kv_a": (c.latent_dim, c.hidden), "kv_norm": (c.kv_lora,),
        "w_uk": (c.heads, c.nope, c.kv_lora), "w_uv": (c.heads, c.v, c.kv_lora), "o_proj": (c.hidden, c.heads * c.v),
        "mlp_norm": (c.hidden,), "gate": (c.intermediate, c.hidden), "up": (c.intermediate, c.hidden),
        "down": (c.hidden, c.intermediate),
    }


def weight_gemms(config: MLAConfig) -> dict[str, tuple[int, int]]:
    """(N, K) of each layer's weight GEMM as ``MLAModel`` runs them (q_a and kv_a as one, gate and
    up as one): what ``gemm="splitk"`` sends through harness/decode/splitk_linear.py."""
    c = config
    return {"qkv_a": (c.q_lora + c.latent_dim, c.hidden), "q_b": (c.heads * (c.nope + c.rope), c.q_lora),
            "o_proj": (c.hidden, c.heads * c.v), "gate_up": (2 * c.intermediate, c.hidden),
            "down": (c.hidden, c.intermediate)}


HEAD_ROW_SIGMA = 1.0
GEMMS = ("cublas", "splitk")


def random_weights(config: MLAConfig, *, seed: int, dtype: torch.dtype, device,
                   head_row_sigma: float = HEAD_ROW_SIGMA) -> dict:
    """Weights from ``seed``: norms 1, matrices N(0, 1/fan_in) (activations stay O(1) through depth).

    The LM head's rows are scaled by exp(sigma * N(0, 1)): a plain Gaussian head over 163840 tokens
    puts the top two logits within 0.5% of each other for ~9% of tokens (bf16 noise decides those
    greedy picks); with sigma = 1, as in trained models' skewed heads, ~1%.
    """
    generator = torch.Generator(device=device).manual_seed(seed)

    def matrix(*shape: int) -> torch.Tensor:
        weight = torch.randn(*shape, generator=generator, device=device, dtype=dtype)
        return weight.mul_(1.0 / math.sqrt(shape[-1]))

    layers = []
    for _ in range(config.layers):
        layer = {}
        for name, shape in layer_shapes(config).items():
            layer[name] = (torch.ones(shape, device=device, dtype=dtype) if name.endswith("norm")
                           else matrix(*shape))
        layers.append(layer)
    embed = torch.randn(config.vocab, config.hidden, generator=generator, device=device, dtype=dtype)
    head = matrix(config.vocab, config.hidden)
    row_scale = torch.exp(head_row_sigma * torch.randn(config.vocab, 1, generator=generator, device=device))
    head.mul_(row_scale.to(dtype))
    return {"embed": embed, "layers": layers, "final_norm": torch.ones(config.hidden, device=device, dtype=dtype),
            "lm_head": head}


_DEEPSEEK_NAMES = {"attn_norm": "input_layernorm", "q_a": "self_attn.q_a_proj", "q_norm": "self_attn.q_a_layernorm",
                   "q_b": "self_attn.q_b_proj", "kv_a": "self_attn.kv_a_proj_with_mqa",
                   "kv_norm": "self_attn.kv_a_layernorm", "o_proj": "self_attn.o_proj",
                   "mlp_norm": "post_attention_layernorm", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
                   "down": "mlp.down_proj"}


def to_deepseek_tensors(config: MLAConfig, weights: dict) -> dict[str, torch.Tensor]:
    """The weights under DeepSeek-V3's checkpoint names (what ``load_weights`` reads)."""
    tensors = {"model.embed_tokens.weight": weights["embed"], "model.norm.weight": weights["final_norm"],
               "lm_head.weight": weights["lm_head"]}
    for index, layer in enumerate(weights["layers"]):
        prefix = f"model.layers.{index}."
        for name, checkpoint_name in _DEEPSEEK_NAMES.items():
            tensors[prefix + checkpoint_name + ".weight"] = layer[name]
        kv_b = torch.cat([layer["w_uk"], layer["w_uv"]], dim=1)  # [H, nope + v, kv_lora]
        tensors[prefix + "self_attn.kv_b_proj.weight"] = kv_b.reshape(-1, config.kv_lora)
    return {name: tensor.contiguous() for name, tensor in tensors.items()}


def load_weights(path, config: MLAConfig, *, dtype: torch.dtype, device) -> dict:
    """Weights from a safetensors file in DeepSeek-V3's names; shapes checked against ``config``."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path), device="cpu")
    except Exception as error:  # safetensors raises its own error type for a file that is not one
        raise InputError(f"--weights: {path}: not a safetensors file ({str(error).splitlines()[0][:120]})") from None

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in tensors:
            raise KeyError(f"{path}: missing tensor {name!r}")
        tensor = tensors[name]
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"{path}: {name}: expected shape {tuple(shape)}, got {tuple(tensor.shape)}")
        return tensor.to(device=device, dtype=dtype)

    shapes = layer_shapes(config)
    layers = []
    for index in range(config.layers):
        prefix = f"model.layers.{index}."
        layer = {name: get(prefix + checkpoint_name + ".weight", shapes[name])
                 for name, checkpoint_name in _DEEPSEEK_NAMES.items()}
        kv_b = get(prefix + "self_attn.kv_b_proj.weight", (config.heads * (config.nope + config.v), config.kv_lora))
        kv_b = kv_b.view(config.heads, config.nope + config.v, config.kv_lora)
        layer["w_uk"], layer["w_uv"] = kv_b[:, :config.nope].contiguous(), kv_b[:, config.nope:].contiguous()
        layers.append(layer)
    return {"embed": get("model.embed_tokens.weight", (config.vocab, config.hidden)), "layers": layers,
            "final_norm": get("model.norm.weight", (config.hidden,)),
            "lm_head": get("lm_head.weight", (config.vocab, config.hidden))}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (one fused kernel on the GPU; float accumulation inside)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def rope_tables(positions: torch.Tensor, dim: int, theta: float) -> torch.Tensor:
    """(cos, sin) of position * frequency [T, dim/2, 2] (float32): computed once per forward, used
    by every layer."""
    half = dim // 2
    inverse = 1.0 / theta ** (torch.arange(half, device=positions.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * inverse[None, :]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Interleaved RoPE (DeepSeek-V3's form: pairs (2i, 2i+1) rotated) over the last dim of x [T, ..., R],
    in float32 real arithmetic (the complex product, written out so torch.compile can fuse it)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + rotations.shape[-2:]
    cos, sin = rotations.view(shape).unbind(-1)
    even, odd = pairs.unbind(-1)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(x.dtype)


def matmul_t(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T (cuBLAS on the GPU): the default ``linear`` of the layer functions."""
    return x @ w.T


def attention_inputs(hidden: torch.Tensor, layer: dict, rotations: torch.Tensor, c: MLAConfig, linear=matmul_t):
    """One layer up to attention: the absorbed query [T, H, kv_lora + rope] and the new latent rows
    [T, kv_lora + rope] (normed latent, rotated rope part). ``linear(x, w)`` = x @ w.T."""
    count = hidden.shape[0]
    x = rms_norm(hidden, layer["attn_norm"], c.eps)
    q_a, kv = linear(x, layer["qkv_a"]).split([c.q_lora, c.latent_dim], dim=-1)
    q = linear(rms_norm(q_a, layer["q_norm"], c.eps), layer["q_b"]).view(count, c.heads, c.nope + c.rope)
    q_latent = torch.einsum("thn,hnc->thc", q[..., :c.nope], layer["w_uk"])
    q_full = torch.cat([q_latent, apply_rope(q[..., c.nope:], rotations)], dim=-1)
    rows = torch.cat([rms_norm(kv[:, :c.kv_lora], layer["kv_norm"], c.eps),
                      apply_rope(kv[:, c.kv_lora:], rotations)], dim=-1)
    return q_full, rows


def layer_output(hidden: torch.Tensor, latent_out: torch.Tensor, layer: dict, c: MLAConfig,
                 linear=matmul_t) -> torch.Tensor:
    """One layer after attention: W_UV, o_proj and the residual, then the SwiGLU MLP and its residual."""
    count = hidden.shape[0]
    heads_out = torch.einsum("thc,hvc->thv", latent_out.to(hidden.dtype), layer["w_uv"])
    hidden = hidden + linear(heads_out.reshape(count, c.heads * c.v), layer["o_proj"])
    x = rms_norm(hidden, layer["mlp_norm"], c.eps)
    gate, up = linear(x, layer["gate_up"]).split([c.intermediate, c.intermediate], dim=-1)
    return hidden + linear(torch.nn.functional.silu(gate) * up, layer["down"])


class MLAModel:
    """Forward over T tokens whose latent rows go to ``slots`` of the paged pool and which attend
    through ``attention(q [1, T, H, 576], layer) -> [1, T, H, 512]`` (the verify kernel, bound to the
    pool, block table, prefix lengths and tree mask by the caller)."""

    def __init__(self, config: MLAConfig, weights: dict, *, compile_layers: bool = False, gemm: str = "cublas",
                 gemm_table: str | None = None, pdl: bool = False):
        """``compile_layers``: run the two halves of every layer (before and after attention)
        through torch.compile, which fuses their norms, RoPE, SwiGLU and residuals into a few
        kernels (the GEMMs stay opaque calls). Shapes are marked dynamic after the first recompile,
        so the tree-size buckets share one compiled graph.

        ``gemm``: "cublas" (x @ w.T) or "splitk" (the layers' five weight GEMMs through
        harness/decode/splitk_linear.py where it applies, with the configs of ``gemm_table``, a tuned JSON
        file, or its defaults). The einsums with W_UK / W_UV and the LM head stay cuBLAS.

        ``pdl`` (Hopper and later): programmatic dependent launches between the compiled layers'
        Triton kernels and the split-K GEMMs, so a kernel launches, and a GEMM starts pulling its
        weights into L2, while the kernel before it finishes."""
        if gemm not in GEMMS:
            raise ValueError(f"gemm: expected one of {GEMMS}, got {gemm!r}")
        if pdl:
            import torch._inductor.config as inductor_config

            if not hasattr(inductor_config.triton, "enable_pdl"):
                raise ValueError(f"pdl: this torch ({torch.__version__}) has no Inductor option triton.enable_pdl")
        self.config = config
        self.weights = weights
        self.gemm = gemm
        if gemm == "splitk":
            from harness.decode.splitk_linear import SplitKLinear
            self._linear = SplitKLinear(gemm_table, pdl=pdl)
        else:
            self._linear = matmul_t
        self._mm_out_dtype: bool | None = None
        self._head_float32: torch.Tensor | None = None
        if compile_layers:
            options = {"triton.enable_pdl": True} if pdl else None
            self._attention_inputs = torch.compile(attention_inputs, fullgraph=True, options=options)
            self._layer_output = torch.compile(layer_output, fullgraph=True, options=options)
        else:
            self._attention_inputs, self._layer_output = attention_inputs, layer_output
        for layer in weights["layers"]:  # one GEMM for q_a and kv_a, one for gate and up (row views)
            layer["qkv_a"] = torch.cat([layer.pop("q_a"), layer.pop("kv_a")])
            layer["q_a"], layer["kv_a"] = layer["qkv_a"].split([config.q_lora, config.latent_dim])
            layer["gate_up"] = torch.cat([layer.pop("gate"), layer.pop("up")])
            layer["gate"], layer["up"] = layer["gate_up"].split([config.intermediate, config.intermediate])

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, write_rows, attention) -> torch.Tensor:
        """tokens, positions [T]; write_rows(layer, rows [T, 576]) stores the new latent rows;
        returns the final hidden states [T, hidden] (``logits`` applies the LM head)."""
        c, w = self.config, self.weights
        hidden = w["embed"][tokens]
        rotations = rope_tables(positions, c.rope, c.rope_theta)
        for index, layer in enumerate(w["layers"]):
            q_full, rows = self._attention_inputs(hidden, layer, rotations, c, self._linear)
            write_rows(index, rows)
            latent_out = attention(q_full[None], index)[0]  # [T, H, kv_lora]
            hidden = self._layer_output(hidden, latent_out, layer, c, self._linear)
        return rms_norm(hidden, w["final_norm"], c.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[T, vocab] in float32: a bf16 head accumulates in float32 and is not rounded back to bf16
        (bf16 logits of a 163840-way head tie exactly at the top for a few % of tokens). Uses
        cuBLAS's bf16-in, float32-out GEMM where this torch has it (``torch.mm(..., out_dtype=)``),
        else a float32 copy of the head made once."""
        head = self.weights["lm_head"]
        if not hidden.is_cuda or hidden.dtype == torch.float32:
            return (hidden @ head.T).float()
        if self._mm_out_dtype is None:  # decided on the first (eager) call, before any graph capture
            try:
                torch.mm(hidden[:1], head[:8].T, out_dtype=torch.float32)
                self._mm_out_dtype = True
            except (TypeError, RuntimeError, NotImplementedError):
                self._mm_out_dtype = False
                self._head_float32 = head.float()
        if self._mm_out_dtype:
            return torch.mm(hidden, head.T, out_dtype=torch.float32)
        return hidden.float() @ self._head_float32.T
