"""Chapter 07's second workload: a decoder shaped like Llama-3.2-1B, with random weights (nothing is downloaded),
batch 1, a static KV cache, and the attention step pluggable, so a rung past graphs can swap in attention that reads
only the filled cache.

Everything a step needs lives in tensors of fixed shape and address (the caches, the position, the rotary table),
so a step can be compiled without graph breaks and captured into one CUDA graph, as the toy decoder's can
(`launchlab.decoder`). Launched from the host it is launch-bound too; in one graph, the 2.5 GB of weights it reads
per token set the floor the lecture measures it against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# the toy decoder's rotary embedding: the same rotation, whatever the leading shape
from .decoder import rotate

# attention(q [B, Hq, D], k_cache, v_cache [B, Hkv, T, D], pos one-element int64 tensor) -> y [B, Hq, D]
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LlamaConfig:
    """The model's shape: layers, width, query and KV heads, MLP width, vocabulary, cache length, RoPE base."""

    layers: int = 16
    width: int = 2048
    heads: int = 32
    kv_heads: int = 8
    mlp: int = 8192
    vocab: int = 128_256
    ctx: int = 512
    rope_theta: float = 500_000.0

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.width // self.heads


LLAMA_3_2_1B = LlamaConfig()  # the published shape (meta-llama/Llama-3.2-1B's config), with a 512-slot cache


def masked_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Attention over every cache slot with the empty ones masked: it reads the whole cache at every step."""
    mask = (torch.arange(k_cache.shape[2], device=q.device) <= pos)[None, None, None, :]
    return F.scaled_dot_product_attention(q[:, :, None, :], k_cache, v_cache, attn_mask=mask,
                                          enable_gqa=True)[:, :, 0, :]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm, computed in fp32 whatever x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class LlamaLayer(nn.Module):
    """RMSNorm, grouped-query attention over the static cache, RMSNorm, SwiGLU MLP; residuals around both."""

    def __init__(self, config: LlamaConfig, dtype: torch.dtype):
        super().__init__()
        c, hd = config, config.head_dim
        self.config = c
        self.norm1 = nn.Parameter(torch.ones(c.width, dtype=dtype))
        self.norm2 = nn.Parameter(torch.ones(c.width, dtype=dtype))
        self.qkv = nn.Linear(c.width, (c.heads + 2 * c.kv_heads) * hd, bias=False, dtype=dtype)
        self.out = nn.Linear(c.width, c.width, bias=False, dtype=dtype)
        self.gate_up = nn.Linear(c.width, 2 * c.mlp, bias=False, dtype=dtype)
        self.down = nn.Linear(c.mlp, c.width, bias=False, dtype=dtype)
        shape = (1, c.kv_heads, c.ctx, hd)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attention: Attention) -> torch.Tensor:
        c, hd = self.config, self.config.head_dim
        q, k, v = self.qkv(rms_norm(x, self.norm1)).split((c.heads * hd, c.kv_heads * hd, c.kv_heads * hd), dim=-1)
        q = rotate(q.view(1, c.heads, hd), cos, sin)
        k = rotate(k.view(1, c.kv_heads, hd), cos, sin)
        # The position is a tensor: the same kernels at every step, nothing read back to the host.
        self.k_cache.index_copy_(2, pos, k[:, :, None, :])
        self.v_cache.index_copy_(2, pos, v.view(1, c.kv_heads, 1, hd))
        y = attention(q, self.k_cache, self.v_cache, pos)
        x = x + self.out(y.reshape(1, c.width))
        gate, up = self.gate_up(rms_norm(x, self.norm2)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class LlamaDecoder(nn.Module):
    """Tied embedding, `layers` layers, a final RMSNorm; forward(token, pos) -> logits [1, vocab]."""

    def __init__(self, config: LlamaConfig, dtype: torch.dtype = torch.bfloat16,
                 attention: Attention = masked_attention):
        super().__init__()
        self.config, self.attention = config, attention
        self.embed = nn.Embedding(config.vocab, config.width, dtype=dtype)  # also the head, as Llama-3.2-1B ties them
        self.layers = nn.ModuleList(LlamaLayer(config, dtype) for _ in range(config.layers))
        self.norm = nn.Parameter(torch.ones(config.width, dtype=dtype))
        half = config.head_dim // 2
        angles = torch.outer(torch.arange(config.ctx).float(),
                             config.rope_theta ** (-torch.arange(half).float() / half))
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Logits for `token` [1] at position `pos` (a one-element int64 tensor on the model's device)."""
        x = self.embed(token)
        cos, sin = self.cos[pos], self.sin[pos]
        for layer in self.layers:
            x = layer(x, pos, cos, sin, self.attention)
        return rms_norm(x, self.norm) @ self.embed.weight.T


def make_llama(config: LlamaConfig, device: str | torch.device, dtype: torch.dtype = torch.bfloat16,
               attention: Attention = masked_attention, seed: int = 0) -> LlamaDecoder:
    """The model with seeded random weights, in evaluation mode on `device`."""
    gen = torch.Generator().manual_seed(seed)
    gains = torch.Generator().manual_seed(seed + 1)   # its own stream: the matrices are the same with or without it
    model = LlamaDecoder(config, dtype, attention)
    with torch.no_grad():  # matrices scaled by 2, as the toy decoder's: greedy decoding wanders instead of repeating
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (2 * p.shape[1] ** -0.5))
            else:  # RMSNorm gains near 1, not exactly 1: a kernel that applies one in the wrong place shows
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gains))
    return model.to(device).eval().requires_grad_(False)


def weight_bytes(model: LlamaDecoder) -> int:
    """Bytes of every weight: what a step reads at least once (the tied embedding counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
