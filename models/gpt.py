"""A decoder-only transformer: nanoGPT's GPT-2 small, the model people train with bf16 autocast today.

Pre-LayerNorm blocks (causal self-attention through ``F.scaled_dot_product_attention`` so the fused
flash/memory-efficient kernels run, then a 4x GELU MLP), learned position embeddings, and an LM head
tied to the token embedding. Dropout is off: it changes no matmul and only adds noise to timings.
The vocabulary is nanoGPT's 50304 (GPT-2's 50257 padded to a multiple of 64 for tensor cores).
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
    vocab_size: int = 50304  # GPT-2's 50257 tokens padded to a multiple of 64
    block_size: int = 1024  # tokens per sequence (also the size of the position table)
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # model width
    dropout: float = 0.0  # off for benchmarking
    bias: bool = True  # biases in Linear and LayerNorm layers, like GPT-2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, f"n_embd {config.n_embd} must divide by n_head {config.n_head}"
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        # (B, T, 3C) -> three (B, n_head, T, head_dim)
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )  # (B, n_head, T, head_dim)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, C) -> (B, T, 4C) -> (B, T, C)
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init: each residual projection's variance shrinks with depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: (B, T) int64 -> (B, T, n_embd) -> blocks -> (B, T, vocab) logits
        _, T = tokens.shape
        assert T <= self.config.block_size, f"sequence of {T} tokens exceeds block_size {self.config.block_size}"
        pos = torch.arange(T, device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def make_batch(
    config: Config, batch_size: int, device: torch.device, generator: torch.Generator | None = None
) -> Batch:
    return token_batch(batch_size, config.block_size, config.vocab_size, device, generator)


loss = token_cross_entropy


# counted, so attention is included at its full T x T cost (the convention of nanoGPT's MFU estimate)
flops_per_sample = counted_training_flops(GPT, make_batch)


SPEC = ModelSpec(
    name="gpt",
    origin="practice: nanoGPT's GPT-2 small (124M), 1024-token sequences",
    config=Config(),
    smoke_config=Config(vocab_size=256, block_size=64, n_layer=2, n_head=2, n_embd=64),
    build=GPT,
    make_batch=make_batch,
    loss=loss,
    flops_per_sample=flops_per_sample,
    batch_size=8,
    smoke_batch_size=4,
    optimizer="adamw",
    lr=3e-4,
    tier="quick",
    in_compile_tier=True,
    distributed=("quick", "full"),
)
