"""Model FLOPs of the GPT decoder (kaliper.benchmarks.transformer.model): the formulas, as text for the
record and as arithmetic. Pure Python: the catalog and the docs use it without torch.

What N counts (the decision, and why): N = N_body + N_head.

- N_body: every non-embedding parameter of the blocks and the final norm: per layer the attention's
  qkv and output projections (4·d² weights + 4·d biases), the MLP (8·d² weights + 5·d biases) and two
  LayerNorms (4·d), i.e. 12·d² + 13·d, plus 2·d for the final norm.
- N_head: d·V, the head's matmul. The head's weight is the token embedding's (tied), so it is stored
  once, but it is a d×V matmul on every scored position; the MFU convention of PaLM (appendix B) and
  nanoGPT counts it, and leaving it out would understate the work by 2·d·V per token (a third of the
  total for small models with a large vocabulary).
- Not counted: the token embedding as a lookup (a gather, no multiply-adds) and the position
  embedding (an addition).

Attention is counted over the full s×s score matrix, not the causal half: 2·s·d for QKᵀ and 2·s·d for
the weighted sum of V per token and layer forward, as PaLM's 12·L·H·Q·T term (H·Q = d) does and as
`torch.utils.flop_counter` counts `scaled_dot_product_attention`. A FLOP is a multiply or an add
(a multiply-add is 2); backward is twice forward.

Elementwise work (biases, norms, GELU, softmax, residual adds) is small and counted only through the
13·d + 2·d bias and norm parameters of N (6 FLOPs per parameter per token, like the weights);
`torch.utils.flop_counter` counts matmuls and attention only, so its figure is 6·T·(bias and norm
parameters) below `train_flops` (the test states it: under 2% at the sizes benchmarked).
"""

from __future__ import annotations

from dataclasses import dataclass

TRAIN_FORMULA = (
    "6·N·T + 12·L·d·s·T per step, T = batch_size·seq_len tokens; N = N_body + N_head, "
    "N_body = L·(12·d² + 13·d) + 2·d (attention, MLP, norm weights and biases), N_head = d·vocab "
    "(the tied head's matmul); attention over the full s×s scores; backward = 2× forward"
)
PREFILL_FORMULA = (
    "batch_size·(2·N_body·p + 2·N_head + 4·L·d·p²) for a prompt of p tokens: every prompt position through "
    "the body, the head on the last position only, attention over the full p×p scores"
)
DECODE_FORMULA = (
    "batch_size·(2·N + 4·L·d·c) per decode step, c = positions in the KV cache after the step "
    "(prompt_len + tokens generated so far)"
)


@dataclass(frozen=True)
class Shape:
    """What the FLOP count depends on: layers L, width d, vocabulary V."""

    layers: int
    d_model: int
    vocab: int

    @property
    def body_matmul_params(self) -> int:
        """The blocks' matmul weights: 12·d² per layer."""
        return self.layers * 12 * self.d_model**2

    @property
    def body_elementwise_params(self) -> int:
        """Biases and norm parameters: 13·d per layer, 2·d for the final norm."""
        return self.layers * 13 * self.d_model + 2 * self.d_model

    @property
    def n_body(self) -> int:
        return self.body_matmul_params + self.body_elementwise_params

    @property
    def n_head(self) -> int:
        return self.d_model * self.vocab

    @property
    def n(self) -> int:
        """N: the parameters whose FLOPs a token costs (see the module's docstring)."""
        return self.n_body + self.n_head


def train_flops(shape: Shape, batch: int, seq_len: int) -> float:
    """FLOPs of one training step (forward + backward) on batch × seq_len tokens."""
    tokens = batch * seq_len
    return float(6 * shape.n * tokens + 12 * shape.layers * shape.d_model * seq_len * tokens)


def prefill_flops(shape: Shape, batch: int, prompt_len: int) -> float:
    """FLOPs of the forward pass over a prompt that fills the KV cache, scoring the last position."""
    p = prompt_len
    return float(batch * (2 * shape.n_body * p + 2 * shape.n_head + 4 * shape.layers * shape.d_model * p * p))


def decode_flops(shape: Shape, batch: int, cache_len: int) -> float:
    """FLOPs of one decode step: one new position per sequence, attending to `cache_len` positions."""
    return float(batch * (2 * shape.n + 4 * shape.layers * shape.d_model * cache_len))


def generation_decode_flops(shape: Shape, batch: int, prompt_len: int, output_len: int) -> float:
    """FLOPs of the output_len − 1 decode steps after a prefill (the prefill yields the first token)."""
    return sum(decode_flops(shape, batch, prompt_len + i + 1) for i in range(output_len - 1))
