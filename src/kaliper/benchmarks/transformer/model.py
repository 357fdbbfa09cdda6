"""The GPT-style decoder both transformer workloads run, in plain torch.nn (no downloads, no weights).

Token embedding + learned position embedding, `layers` pre-norm blocks (LayerNorm → causal self-attention
by `F.scaled_dot_product_attention` → residual; LayerNorm → MLP d → 4·d → d with GELU → residual), a
final LayerNorm and a head tied to the token embedding (GPT-2's layout; every Linear has a bias but the
head). Generation uses a preallocated key/value cache per layer: prefill writes the prompt's keys and
values, each decode step appends one position and attends to all positions so far, so a decode step
costs O(cache length), not O(length²).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

INIT_STD = 0.02  # GPT-2's initialisation (normal, std 0.02; biases zero)


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape. `context` is the longest sequence it has positions for."""

    layers: int
    d_model: int
    heads: int
    vocab: int
    context: int

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not a multiple of heads={self.heads}")


class KVCache:
    """Keys and values of every layer for `batch` sequences of up to `length` positions."""

    def __init__(self, config: GPTConfig, batch: int, length: int, device: torch.device, dtype: torch.dtype):
        shape = (batch, config.heads, length, config.d_model // config.heads)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.layers)]
        self.length = length


class SelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None, start: int
    ) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            keys, values = cache
            end = start + length
            keys[:, :, start:end] = k.to(keys.dtype)
            values[:, :, start:end] = v.to(values.dtype)
            if start == 0:  # prefill: the prompt attends causally to itself
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif length == 1:  # decode: the new position sees every cached one, no mask needed
                y = F.scaled_dot_product_attention(
                    q, keys[:, :, :end].to(q.dtype), values[:, :, :end].to(q.dtype)
                )
            else:
                raise ValueError("a cached forward is a prefill (start 0) or one decode position")
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.out = nn.Linear(4 * config.d_model, config.d_model)

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None, start: int
    ) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, start)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))  # type: ignore[no-any-return]


class GPT(nn.Module):
    """Decoder-only transformer; `forward(tokens)` → logits over the vocabulary at every position."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: one matrix embeds tokens and scores them
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self, tokens: torch.Tensor, cache: KVCache | None = None, start: int = 0, last_only: bool = False
    ) -> torch.Tensor:
        """Logits for `tokens` (batch × length) placed at positions start..start+length−1; with `cache`,
        keys and values are written into it. `last_only`: logits of the last position only (what
        generation needs from a prefill)."""
        length = tokens.shape[1]
        if start + length > self.config.context:
            raise ValueError(
                f"positions up to {start + length} exceed the model's context {self.config.context}"
            )
        positions = torch.arange(start, start + length, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for index, block in enumerate(self.blocks):
            layer_cache = None if cache is None else (cache.keys[index], cache.values[index])
            x = block(x, layer_cache, start)
        x = self.ln_f(x)
        if last_only:
            x = x[:, -1:]
        return self.head(x)  # type: ignore[no-any-return]


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied head is the embedding: counted once)."""
    return sum(p.numel() for p in model.parameters())
