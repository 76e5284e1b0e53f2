"""A Llama-style decoder at Llama-3-8B's layer width: the shape where fp8 training is said to pay.

Pre-norm blocks with RMSNorm, rotary position embeddings on queries and keys, grouped-query causal
attention through ``F.scaled_dot_product_attention`` (8 key/value heads shared by 32 query heads), a
SwiGLU feed-forward of width 14336, no biases, and an untied output head. Each block has Llama-3-8B's
matmul shapes (4096 -> 4096/1024/14336), so its Linear layers are the ones torchao's fp8 benchmarks
quote; only the depth (2 blocks, not 32) and the tokens per step (4 x 1024) are cut, so that an fp32
step stays under half a second on a Hopper GPU and every mode fits the memory cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbench.models.flops import counted_training_flops
from ampbench.models.spec import Batch, ModelSpec, token_batch, token_cross_entropy


@dataclass(frozen=True)
class Config:
    # Llama 2's 32000, not Llama 3's 128256: at two blocks a 128k-row embedding and head would hold
    # over half the parameters and, the head staying bf16, the step would time them rather than the
    # fp8 layers; 32000 is a multiple of 64 for tensor cores
    vocab_size: int = 32000
    seq_len: int = 1024  # tokens per sequence
    n_layers: int = 2  # decoder blocks (Llama-3-8B has 32)
    dim: int = 4096  # model width
    n_heads: int = 32  # query heads
    n_kv_heads: int = 8  # key/value heads, each shared by n_heads / n_kv_heads query heads
    ffn_dim: int = 14336  # SwiGLU hidden width
    norm_eps: float = 1e-5  # RMSNorm epsilon
    rope_theta: float = 500000.0  # rotary base frequency (Llama 3's)


def rotary_cos_sin(seq_len: int, head_dim: int,
                   theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, (seq_len, head_dim / 2) each, in fp32. Made
    per forward rather than held as buffers, which a cast to fp16 or bf16 would round."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each head's (first half, second half) pairs by the position's angles, in fp32.
    x: (B, heads, T, head_dim); cos, sin: (T, head_dim / 2)."""
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return rotated.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert config.dim % config.n_heads == 0, f"dim {config.dim} must divide by n_heads {config.n_heads}"
        assert config.n_heads % config.n_kv_heads == 0, (
            f"n_heads {config.n_heads} must divide by n_kv_heads {config.n_kv_heads}")
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.dim // config.n_heads
        assert self.head_dim % 2 == 0, f"head_dim {self.head_dim} must be even for rotary embeddings"
        self.wq = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # (B, T, dim) -> (B, heads, T, head_dim); keys and values with n_kv_heads heads
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, n_heads, T, head_dim)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(config.dim, config.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(config.ffn_dim, config.dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, dim) -> (B, T, ffn_dim) -> (B, T, dim)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)  # registered last: the output head
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # RMSNorm weights keep their ones
            # residual projections shrink with depth (GPT-2's scaled init), so the stream's variance
            # does not grow with the number of blocks
            residual = name.endswith(("wo.weight", "w2.weight"))
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers) if residual else 0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: (B, T) int64 -> (B, T, dim) -> blocks -> (B, T, vocab) logits
        _, T = tokens.shape
        assert T <= self.config.seq_len, f"sequence of {T} tokens exceeds seq_len {self.config.seq_len}"
        c = self.config
        cos, sin = rotary_cos_sin(T, c.dim // c.n_heads, c.rope_theta, tokens.device)
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))


def make_batch(
    config: Config, batch_size: int, device: torch.device, generator: torch.Generator | None = None
) -> Batch:
    return token_batch(batch_size, config.seq_len, config.vocab_size, device, generator)


loss = token_cross_entropy


# counted, so attention is included at its full T x T cost, as for gpt
flops_per_sample = counted_training_flops(Llama, make_batch)


SPEC = ModelSpec(
    name="llama",
    origin="practice: a Llama-3-8B-shaped decoder block (torchao's float8 training benchmarks), 2 blocks",
    config=Config(),
    # every Linear layer of the smoke config divides by 16, so fp8's conversion has layers to convert
    smoke_config=Config(vocab_size=256, seq_len=32, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=160),
    build=Llama,
    make_batch=make_batch,
    loss=loss,
    flops_per_sample=flops_per_sample,
    batch_size=4,
    smoke_batch_size=4,
    optimizer="adamw",
    lr=3e-4,
    # full tier only: its fp32 reference step, 700M parameters' AdamW state and the compile time of the
    # fp8 cells it exists for would add minutes to the quick tier's budget
    tier="full",
    in_compile_tier=True,  # the width where fp8 is said to pay
    distributed=("full",),
)
