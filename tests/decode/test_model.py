"""The MLA model: weights, RoPE, compiled layer halves; the paged KV pool."""

import pytest
import torch

from harness.decode.kv_pool import PageAllocator, PagedKVCache
from harness.decode.loop import greedy_decode
from harness.decode.model import PRESETS, MLAModel, load_weights, random_weights, to_deepseek_tensors
from harness.decode.target_runner import TargetRunner

from decode_setup import _setup, tiny_model  # noqa: F401 (tiny_model: a fixture)


def test_weights_round_trip_through_safetensors(tmp_path, tiny_model):
    from safetensors.torch import save_file

    config = PRESETS["tiny"]
    path = tmp_path / "tiny.safetensors"
    save_file(to_deepseek_tensors(config, tiny_model.weights), str(path))
    loaded = MLAModel(config, load_weights(path, config, dtype=torch.float32, device="cpu"))
    setups = [_setup(model, context=5, page_size=16) for model in (tiny_model, loaded)]
    runs = [greedy_decode(TargetRunner(s.model, s.cache, attention="reference"), s.history, 6) for s in setups]
    assert runs[0].tokens == runs[1].tokens and runs[0].margins == runs[1].margins
    tensors = to_deepseek_tensors(config, random_weights(config, seed=9, dtype=torch.float32, device="cpu"))
    tensors["model.layers.1.self_attn.kv_b_proj.weight"] = tensors["model.layers.1.self_attn.kv_b_proj.weight"][:-1]
    save_file(tensors, str(path))
    with pytest.raises(ValueError, match="kv_b_proj.weight: expected shape"):
        load_weights(path, config, dtype=torch.float32, device="cpu")


def test_rope_real_form_matches_the_complex_product():
    """apply_rope (real arithmetic, fusable) equals rotating the pairs (2i, 2i+1) as complex numbers."""
    from harness.decode.model import apply_rope, rope_tables

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(7, 3, 64, generator=generator)
    positions = torch.tensor([0, 1, 5, 100, 4097, 131071, 185000])
    rotations = rope_tables(positions, 64, 10000.0)  # the same float32 angles for both forms
    assert torch.allclose(rotations[1, :, 0], torch.cos(1.0 / 10000.0 ** (torch.arange(32) / 32)))
    as_complex = torch.complex(rotations[..., 0].double(), rotations[..., 1].double())
    expected = torch.view_as_real(torch.view_as_complex(x.double().reshape(7, 3, 32, 2))
                                  * as_complex[:, None, :]).flatten(-2)
    got = apply_rope(x, rotations)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, x)


def test_compiled_layer_halves_match_eager(tiny_model):
    """torch.compile of the two halves of a layer (what --compile-layers runs) gives eager's
    numbers in float32, for two token counts (the second compiles with a dynamic T)."""
    from harness.decode.model import attention_inputs, layer_output, rope_tables

    config, layer = tiny_model.config, tiny_model.weights["layers"][1]
    compiled_inputs = torch.compile(attention_inputs, fullgraph=True)
    compiled_output = torch.compile(layer_output, fullgraph=True)
    generator = torch.Generator().manual_seed(6)
    for count in (5, 9):
        hidden = torch.randn(count, config.hidden, generator=generator)
        rotations = rope_tables(torch.arange(count) + 300, config.rope, config.rope_theta)
        latent_out = torch.randn(count, config.heads, config.kv_lora, generator=generator)
        for got, want in zip(compiled_inputs(hidden, layer, rotations, config),
                             attention_inputs(hidden, layer, rotations, config)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled_output(hidden, latent_out, layer, config),
                                   layer_output(hidden, latent_out, layer, config), rtol=1e-5, atol=1e-5)


def test_page_allocator_and_cache_pages():
    allocator = PageAllocator(4)
    pages = allocator.allocate(3)
    assert pages == [0, 1, 2] and allocator.free_pages == 1
    with pytest.raises(MemoryError, match="2 more pages needed, 1 free of 4"):
        allocator.allocate(2)
    allocator.release(pages[1:])
    assert allocator.free_pages == 3
    cache = PagedKVCache(2, 8, 4, 576, dtype=torch.float32, device="cpu", max_pages=5)
    cache.reserve(10)
    assert cache.pages == [0, 1, 2] and cache.block_table[0, :3].tolist() == [0, 1, 2]
    cache.truncate(5)
    assert cache.pages == [0, 1] and cache.block_table[0].tolist() == [0, 1, 0, 0, 0]
    with pytest.raises(MemoryError, match="block table holds 5"):
        cache.reserve(21)
    assert torch.isnan(cache.pool).all(), "unwritten rows must be NaN"
