"""Chapter 07's kit: a small decoder-only transformer with a static KV cache, the workload of the chapter, its lab
and checkers.

Random weights, greedy decoding, one token per step. Everything a step needs lives in tensors of fixed shape
and address (the KV cache, the position, the causal mask, the rotary table), so a step can be compiled
without graph breaks and captured into a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import copy
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    """The model's shape: layers, width, attention heads, vocabulary, cache length and batch."""

    layers: int = 8
    width: int = 1024
    heads: int = 8
    vocab: int = 4096
    max_len: int = 128
    batch: int = 1

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.width // self.heads

    def with_batch(self, batch: int) -> DecoderConfig:
        """The same model for another batch size."""
        return replace(self, batch=batch)


TINY = DecoderConfig(layers=2, width=64, heads=4, vocab=128, max_len=48)  # runs in a second on a CPU

WriteKV = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object]
# attend(q [batch, heads, 1, head_dim], k_cache, v_cache [batch, heads, max_len, head_dim], mask, pos) -> like q
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _index_copy_write(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> None:
    """Write this step's keys or values [batch, heads, 1, head_dim] into the cache at `pos`, in place.

    Private: it is the answer to lab 07's exercise 1, and a lab never hands out its answer.
    """
    # index_copy_ takes the position as a tensor: no copy to the host, the same kernel at every step.
    cache.index_copy_(2, pos, new)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of queries or keys [..., head_dim] (cos and sin broadcast over the rest)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def masked_attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, mask: torch.Tensor,
                  pos: torch.Tensor) -> torch.Tensor:
    """SDPA over every cache slot, the slots after `pos` hidden by the mask: the same work at every position."""
    return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)


class Attention(nn.Module):
    """Causal self-attention for one new token over a static KV cache."""

    def __init__(self, config: DecoderConfig, write: WriteKV = _index_copy_write, attend: Attend = masked_attend):
        super().__init__()
        self.config, self.write, self.attend = config, write, attend
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)
        self.out = nn.Linear(config.width, config.width, bias=False)
        shape = (config.batch, config.heads, config.max_len, config.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        c = self.config
        q, k, v = self.qkv(x).view(c.batch, 1, 3, c.heads, c.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        self.write(self.k_cache, k, pos)
        self.write(self.v_cache, v, pos)
        y = self.attend(q, self.k_cache, self.v_cache, mask, pos)
        return self.out(y.transpose(1, 2).reshape(c.batch, 1, c.width))


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each with a residual."""

    def __init__(self, config: DecoderConfig, write: WriteKV = _index_copy_write):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.attn = Attention(config, write)
        self.up = nn.Linear(config.width, 4 * config.width, bias=False)
        self.down = nn.Linear(4 * config.width, config.width, bias=False)

    def forward(self, x, pos, mask, cos, sin):
        x = x + self.attn(self.norm1(x), pos, mask, cos, sin)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyDecoder(nn.Module):
    """Embedding, `layers` blocks, a final norm and the vocabulary head; forward(token, pos) -> logits."""

    def __init__(self, config: DecoderConfig, write: WriteKV = _index_copy_write):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.width)
        self.blocks = nn.ModuleList(Block(config, write) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)
        half = config.head_dim // 2
        angles = torch.outer(torch.arange(config.max_len).float(), 10000.0 ** (-torch.arange(half).float() / half))
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.register_buffer("slots", torch.arange(config.max_len), persistent=False)

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Logits [batch, vocab] for `token` [batch] at position `pos` (a one-element int64 tensor)."""
        x = self.embed(token)[:, None, :]
        mask = (self.slots <= pos)[None, None, None, :]
        cos, sin = self.cos[pos], self.sin[pos]
        for block in self.blocks:
            x = block(x, pos, mask, cos, sin)
        return self.head(self.norm(x))[:, 0, :]


def make_decoder(config: DecoderConfig, device: str | torch.device, write: WriteKV = _index_copy_write,
                 seed: int = 0) -> TinyDecoder:
    """The model with seeded random weights, in evaluation mode on `device`."""
    torch.manual_seed(seed)
    model = TinyDecoder(config, write)
    with torch.no_grad():  # a gain of 2: activations stay O(1), and greedy decoding wanders instead of repeating
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 2 * p.shape[1] ** -0.5)
    return model.to(device).eval().requires_grad_(False)


def with_attention(model: TinyDecoder, attend: Attend) -> TinyDecoder:
    """A twin of `model` that attends with `attend`, sharing its weights and caches; `model` is left as it was."""
    twin = copy(model)  # a shallow copy shares the parameter and buffer dicts; the module dicts are copied below
    twin._modules = dict(model._modules)
    blocks = []
    for block in model.blocks:
        b, a = copy(block), copy(block.attn)
        b._modules, a._modules = dict(block._modules), dict(block.attn._modules)
        a.attend = attend
        b.attn = a
        blocks.append(b)
    twin.blocks = nn.ModuleList(blocks)
    return twin


def first_tokens(config: DecoderConfig, device: str | torch.device, seed: int = 1) -> torch.Tensor:
    """A start token per sequence of the batch, drawn from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab, (config.batch,), generator=gen).to(device)


def greedy_step(model: TinyDecoder) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One decode step: next token [batch] = argmax of the logits for `token` at `pos`."""

    def step(token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return model(token, pos).argmax(dim=-1)

    return step


@torch.no_grad()
def decode(step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], first: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding, eager: `steps` tokens [batch, steps] after `first`; the position stays on the device."""
    pos = torch.zeros(1, dtype=torch.long, device=first.device)
    token, out = first, []
    for _ in range(steps):
        token = step(token, pos)
        out.append(token)
        pos += 1
    return torch.stack(out, dim=1)
