"""The word-level LSTM language model of the PyTorch/Apex ``word_language_model`` example, as "When life gives you
tensor cores, you run mixed precision benchmarks" (2019) trained it.

Embedding -> dropout -> 2-layer LSTM (dropout between layers) -> dropout -> Linear decoder over the
vocabulary, with the decoder's weight tied to the embedding. The full config is the example's largest
documented run (``--emsize 1500 --nhid 1500 --dropout 0.65 --tied``, bptt 35, batch 20) on
wikitext-2's 33278-word vocabulary.

Unlike the example, which feeds (T, B) sequence-first tensors, inputs here are batch-first: token ids
(B, T) in, logits (B, T, vocab) out, like every other model in the zoo. The hidden state starts at zero
every step (the example carries it across batches, detached); that changes no FLOPs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from ampbench.models.flops import TRAINING_OVER_FORWARD
from ampbench.models.spec import Batch, ModelSpec, token_batch, token_cross_entropy


@dataclass(frozen=True)
class Config:
    vocab_size: int = 33278  # wikitext-2's vocabulary
    emsize: int = 1500  # embedding width
    nhid: int = 1500  # LSTM hidden width; must equal emsize when tied
    nlayers: int = 2  # stacked LSTM layers
    dropout: float = 0.65  # on the embeddings, between LSTM layers and before the decoder
    bptt: int = 35  # tokens per sequence (truncated backpropagation length)
    tied: bool = True  # decoder weight shared with the embedding (Press & Wolf 2016)


class RNNModel(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert config.nlayers >= 1, f"nlayers must be >= 1, got {config.nlayers}"
        assert not config.tied or config.emsize == config.nhid, (
            f"tying needs emsize == nhid, got emsize {config.emsize} and nhid {config.nhid}"
        )
        self.drop = nn.Dropout(config.dropout)
        self.encoder = nn.Embedding(config.vocab_size, config.emsize)
        # nn.LSTM applies dropout only between layers, as the example does
        self.rnn = nn.LSTM(config.emsize, config.nhid, config.nlayers, dropout=config.dropout, batch_first=True)
        self.decoder = nn.Linear(config.nhid, config.vocab_size)
        if config.tied:
            self.decoder.weight = self.encoder.weight
        # the example's init: small uniform embeddings and decoder, zero decoder bias
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if not config.tied:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: (B, T) int64 -> (B, T, emsize) -> LSTM -> (B, T, nhid) -> (B, T, vocab) logits
        emb = self.drop(self.encoder(tokens))
        device_type = emb.device.type
        if torch.is_autocast_enabled(device_type):
            # what CUDA autocast does to an LSTM anyway; on the CPU it also keeps fp16 autocast off the
            # oneDNN LSTM, which has no fp16 kernel there, so the CPU smoke pass runs every mode
            emb = emb.to(torch.get_autocast_dtype(device_type))
        out, _ = self.rnn(emb)
        return self.decoder(self.drop(out))


def make_batch(
    config: Config, batch_size: int, device: torch.device, generator: torch.Generator | None = None
) -> Batch:
    return token_batch(batch_size, config.bptt, config.vocab_size, device, generator)


loss = token_cross_entropy


@functools.lru_cache(maxsize=None)
def flops_per_sample(config: Config) -> float:
    # counted by hand: the flop counter does not see inside the fused LSTM op
    lstm = 0
    for layer in range(config.nlayers):
        in_size = config.emsize if layer == 0 else config.nhid
        lstm += 2 * 4 * config.nhid * (in_size + config.nhid)  # four gates, input and recurrent matmuls
    decoder = 2 * config.nhid * config.vocab_size
    return TRAINING_OVER_FORWARD * config.bptt * float(lstm + decoder)


SPEC = ModelSpec(
    name="lstm_lm",
    origin='"When life gives you tensor cores, you run mixed precision benchmarks" (2019): Apex/PyTorch '
           'word_language_model, 2-layer tied LSTM 1500 on wikitext-2',
    config=Config(),
    smoke_config=Config(vocab_size=500, emsize=64, nhid=64, bptt=8),
    build=RNNModel,
    make_batch=make_batch,
    loss=loss,
    flops_per_sample=flops_per_sample,
    batch_size=20,
    smoke_batch_size=4,
    optimizer="sgd",
    # the example's plain SGD at lr 20 relies on clipping at 0.25; with momentum 0.9 and no clipping,
    # a small rate keeps every precision mode stable
    lr=0.5,
    tier="quick",
)
