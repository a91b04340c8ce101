"""The Llama-3.2-1B-shaped workload (launchlab.llama): its shape and bytes, and its attention contract, on a CPU."""

from __future__ import annotations

import torch

from launchlab import llama

TINY = llama.LlamaConfig(layers=2, width=64, heads=4, kv_heads=2, mlp=128, vocab=256, ctx=40)  # a CPU runs it at once


def _cache_bytes(model: llama.LlamaDecoder, slots: int) -> int:
    """Bytes of keys and values `slots` cache slots hold, over every layer."""
    per_layer = sum(layer.k_cache.nbytes + layer.v_cache.nbytes for layer in model.layers) // len(model.layers)
    return len(model.layers) * per_layer * slots // model.config.ctx


@torch.no_grad()
def _decode(model: llama.LlamaDecoder, first: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding, eager: `steps` tokens after `first`; the position stays a tensor."""
    pos = torch.zeros(1, dtype=torch.long, device=first.device)
    token, out = first, []
    for _ in range(steps):
        token = model(token, pos).argmax(dim=-1)
        out.append(token)
        pos += 1
    return torch.cat(out)


def test_the_published_shape_reads_about_2_47_gb_of_weights_per_token():
    """Built on the meta device (no memory): 1.236 billion parameters in bf16, the tied embedding counted once."""
    with torch.device("meta"):
        model = llama.LlamaDecoder(llama.LLAMA_3_2_1B, torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    assert 1.23e9 < params < 1.24e9, params
    assert 2.46e9 < llama.weight_bytes(model) < 2.48e9
    # 16 layers, keys and values, 8 KV heads of 64, bf16: 32 KiB a slot, 16 MiB for 512 slots.
    assert _cache_bytes(model, llama.LLAMA_3_2_1B.ctx) == 16 * 512 * 2 * 8 * 64 * 2
    assert _cache_bytes(model, 10) == 16 * 10 * 2 * 8 * 64 * 2


def _filled_by_slicing(q, k_cache, v_cache, pos):
    """Attention over slots 0..pos only, sliced on the host: the reference a GPU kernel must equal."""
    filled = int(pos) + 1
    return torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None, :], k_cache[:, :, :filled], v_cache[:, :, :filled], enable_gqa=True)[:, :, 0, :]


def test_attention_over_the_filled_slots_decodes_the_same_tokens_as_the_masked_cache():
    masked = llama.make_llama(TINY, "cpu", torch.float32)
    filled = llama.make_llama(TINY, "cpu", torch.float32, attention=_filled_by_slicing)
    first = torch.tensor([3])
    tokens = _decode(masked, first, TINY.ctx - 1)
    assert torch.equal(tokens, _decode(filled, first, TINY.ctx - 1))
    assert len(set(tokens.tolist())) > 5, "greedy decoding wanders rather than repeating one token"


def test_a_step_reads_its_position_from_the_device_and_writes_one_cache_slot():
    model = llama.make_llama(TINY, "cpu", torch.float32)
    pos = torch.tensor([4])
    model(torch.tensor([7]), pos)
    written = [(layer.k_cache[0, :, :, 0] != 0).any(0).nonzero().flatten().tolist() for layer in model.layers]
    assert written == [[4]] * TINY.layers, written


def test_every_rmsnorm_gain_differs_from_one_and_from_the_others():
    """Gains of exactly 1 would hide a kernel that applies one norm's gain in another's place, or none at all."""
    model = llama.make_llama(TINY, "cpu", torch.float32)
    gains = [model.norm] + [g for layer in model.layers for g in (layer.norm1, layer.norm2)]
    assert all((g - 1).abs().max() > 0.05 for g in gains)
    assert all(not torch.equal(a, b) for i, a in enumerate(gains) for b in gains[i + 1:])
