"""RNN weights after the cast: ``Trainer`` puts every RNN's weights back into one contiguous chunk
(``flatten_rnn_weights``), so cuDNN neither warns nor compacts them at every step, a cost a speed cell
would otherwise time as the mode's own."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from ampbench import device as devices
from ampbench import models, train
from ampbench.modes import MODES
from ampbench.train import Trainer, flatten_rnn_weights

NOT_CONTIGUOUS = "RNN module weights are not part of single contiguous chunk of memory"


class TwoRNNs(nn.Module):
    """RNN modules at two depths, beside a layer that is none."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.GRU(4, 4), nn.RNN(4, 4))


def test_flatten_rnn_weights_flattens_every_rnn_module(monkeypatch):
    model = TwoRNNs()
    flattened = []
    monkeypatch.setattr(nn.RNNBase, "flatten_parameters", lambda self: flattened.append(self))
    flatten_rnn_weights(model)
    assert [id(m) for m in flattened] == [id(model.lstm), id(model.inner[1]), id(model.inner[2])]


@pytest.mark.parametrize("mode_name", ["fp32", "fp16"])
def test_the_trainer_flattens_the_rnn_weights_after_the_cast(mode_name, monkeypatch):
    seen = []
    real = train.flatten_rnn_weights

    def spy(model):
        seen.append({p.dtype for p in model.rnn.parameters()})
        real(model)

    monkeypatch.setattr(train, "flatten_rnn_weights", spy)
    mode = MODES[mode_name]
    trainer = Trainer(models.get_model("lstm_lm"), mode, torch.device("cpu"), smoke=True)
    # once, on the model it trains, whose weights already have the mode's dtype
    assert seen == [{mode.param_dtype}]
    assert all(p.dtype == mode.param_dtype for p in trainer.model.rnn.parameters())


@pytest.mark.gpu
@pytest.mark.parametrize("mode_name", list(MODES))
def test_lstm_lm_trains_without_the_non_contiguous_weights_warning(perf_device: torch.device, mode_name: str) -> None:
    """One smoke-config training step of lstm_lm in each precision mode on CUDA: cuDNN finds the
    LSTM's weights in one chunk, so it does not warn (which it does at every call otherwise). A guard
    on the trainer as a whole: torch's own ``RNNBase._apply`` re-flattens after a plain ``.to()``, so
    this fails only where something else leaves the weights apart."""
    if perf_device.type != "cuda":
        pytest.skip(f"cuDNN's RNN weight check exists only on CUDA; this run's device is {perf_device}")
    mode = MODES[mode_name]
    spec = models.get_model("lstm_lm")
    reason = devices.cell_unsupported_reason(mode, perf_device, spec, spec.smoke_config)
    if reason:
        pytest.skip(reason)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=f".*{NOT_CONTIGUOUS}")
        trainer = Trainer(spec, mode, perf_device, smoke=True)
        loss = trainer.run(1)
        torch.cuda.synchronize(perf_device)
    assert torch.isfinite(loss), f"lstm_lm {mode_name}: loss {loss.item()} after one step"
