"""The model zoo on the CPU: every registered model builds, trains a step and reports plausible sizes.

Full-size models are only ever built on the meta device (shapes without storage), so checking that
they are the published architectures costs milliseconds.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ampbench.models import REGISTRY, get_model, model_names
from ampbench.models.spec import ModelSpec

SPECS = list(REGISTRY.values())
IDS = [spec.name for spec in SPECS]
TABLE_ORDER = [
    "mlp", "mnist_cnn", "wide_resnet28_10", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "dpn26", "dpn92", "lstm_lm", "gpt", "llama",
]
GPT2_SMALL_PARAMS = 124_439_808  # nanoGPT's GPT-2 small at GPT-2's 50257-token vocabulary, wpe included
# published parameter counts of the full configs
EXPECTED_PARAMS = {
    "mnist_cnn": 1_199_882,  # the PyTorch examples' MNIST Net
    "wide_resnet28_10": 36_489_290,  # WRN-28-10, 36.5M in the paper; the seed's variant has conv biases
    # torchvision's ImageNet counts with the 1000-way head swapped for a 100-way one
    "resnet18": 11_689_512 - 1000 * 513 + 100 * 513,
    "resnet34": 21_797_672 - 1000 * 513 + 100 * 513,
    "resnet50": 25_557_032 - 1000 * 2049 + 100 * 2049,
    "resnet101": 44_549_160 - 1000 * 2049 + 100 * 2049,
    "resnet152": 60_192_808 - 1000 * 2049 + 100 * 2049,
    "dpn26": 11_574_842,  # kuangliu/pytorch-cifar DPN26
    "dpn92": 34_236_634,  # kuangliu/pytorch-cifar DPN92
    # tied embedding/decoder 33278 x 1500 + decoder bias, two LSTM layers of 4 gates with two biases each
    "lstm_lm": 33278 * 1500 + 33278 + 2 * 4 * (1500 * 1500 + 1500 * 1500 + 2 * 1500),
    "gpt": GPT2_SMALL_PARAMS + (50304 - 50257) * 768,  # nanoGPT pads the vocabulary to 50304
    # Llama-3-8B's block (q and o 4096^2, k and v 4096x1024, SwiGLU 3 x 4096x14336, two RMSNorms) twice,
    # a 32000-token embedding and untied head, the final RMSNorm
    "llama": 2 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 32000 * 4096 + 4096,
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # the smoke models are too small to gain from threads, and on a shared CI box OpenMP's spinning
    # threads make the deep ResNets several times slower than one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() counts a tied weight once


def smoke_model_and_batch(spec: ModelSpec, dtype: torch.dtype = torch.float32):
    config = spec.smoke_config
    torch.manual_seed(0)
    model = spec.build(config).to(dtype).train()
    gen = torch.Generator().manual_seed(0)
    inputs, targets = spec.make_batch(config, spec.smoke_batch_size, torch.device("cpu"), gen)
    if inputs.is_floating_point():
        inputs = inputs.to(dtype)
    return model, inputs, targets


def test_registry_names_unique_and_in_design_order():
    assert list(REGISTRY) == TABLE_ORDER
    for name, spec in REGISTRY.items():
        assert spec.name == name
        assert get_model(name) is spec


def test_quick_tier():
    assert model_names("quick") == ["mlp", "wide_resnet28_10", "resnet50", "lstm_lm", "gpt"]
    assert model_names("full") == TABLE_ORDER


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_spec_fields(spec: ModelSpec):
    assert spec.optimizer in ("sgd", "adamw")
    assert spec.lr > 0
    assert spec.batch_size > 0 and 1 <= spec.smoke_batch_size <= 16
    assert spec.tier in ("quick", "full")
    assert spec.origin
    hash(spec.config), hash(spec.smoke_config)  # flops_per_sample caches on the config


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_make_batch_is_seeded_and_well_typed(spec: ModelSpec):
    cpu = torch.device("cpu")
    x1, y1 = spec.make_batch(spec.smoke_config, 3, cpu, torch.Generator().manual_seed(1))
    x2, y2 = spec.make_batch(spec.smoke_config, 3, cpu, torch.Generator().manual_seed(1))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape[0] == 3 and y1.shape[0] == 3
    assert x1.dtype in (torch.float32, torch.int64), x1.dtype
    if not y1.is_floating_point():
        assert y1.dtype == torch.int64
        assert y1.min() >= 0


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_smoke_forward_backward(spec: ModelSpec):
    model, inputs, targets = smoke_model_and_batch(spec)
    out = model(inputs)
    if targets.is_floating_point():
        assert out.shape == targets.shape
    else:
        # logits: targets' shape plus a class dimension, and every target a valid class
        assert out.shape[:-1] == targets.shape, (out.shape, targets.shape)
        assert int(targets.max()) < out.shape[-1]
    loss = spec.loss(out.float(), targets)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{spec.name}: no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), f"{spec.name}: non-finite gradient in {name}"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_one_bf16_training_step(spec: ModelSpec):
    model, inputs, targets = smoke_model_and_batch(spec, torch.bfloat16)
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt_cls = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[spec.optimizer]
    optimizer = opt_cls(params, lr=spec.lr)
    out = model(inputs)
    assert out.dtype == torch.bfloat16
    loss = spec.loss(out.float(), targets.float() if targets.is_floating_point() else targets)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(p.dtype == torch.bfloat16 and torch.isfinite(p).all() for p in params)
    assert any(not torch.equal(a, p) for a, p in zip(before, params)), f"{spec.name}: the step changed nothing"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_full_config_param_count(spec: ModelSpec):
    with torch.device("meta"):
        model = spec.build(spec.config)
    count = n_params(model)
    if spec.name in EXPECTED_PARAMS:
        expected = EXPECTED_PARAMS[spec.name]
        assert count == pytest.approx(expected, rel=0.02), f"{spec.name}: {count:,} parameters, expected {expected:,}"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_flops_positive_and_cached(spec: ModelSpec):
    flops = spec.flops_per_sample(spec.config)
    assert flops > 0
    assert spec.flops_per_sample(spec.config) == flops
    assert spec.flops_per_sample(spec.smoke_config) < flops


def test_resnet50_flops_match_published():
    # ResNet-50 at 224x224 is ~4.1 GMACs forward: 2 FLOPs a MAC, 3x for forward + backward
    spec = get_model("resnet50")
    assert spec.flops_per_sample(spec.config) == pytest.approx(3 * 2 * 4.1e9, rel=0.15)


def test_gpt_flops_match_the_6n_rule():
    spec = get_model("gpt")
    c = spec.config
    with torch.device("meta"):
        model = spec.build(c)
    non_embedding = n_params(model) - model.wpe.weight.numel()  # the tied wte is the LM head's matmul
    expected = (6 * non_embedding + 12 * c.n_layer * c.n_embd * c.block_size) * c.block_size
    assert spec.flops_per_sample(c) == pytest.approx(expected, rel=0.15)
    assert spec.flops_per_sample(c) == pytest.approx(0.76e12 + 0.116e12, rel=0.15)


def test_lstm_flops_match_the_6n_rule():
    spec = get_model("lstm_lm")
    c = spec.config
    with torch.device("meta"):
        model = spec.build(c)
    # every weight but the embedding lookup is a matmul weight touched once per token
    matmul_params = n_params(model.rnn) + model.decoder.weight.numel()
    assert spec.flops_per_sample(c) == pytest.approx(6 * matmul_params * c.bptt, rel=0.05)


@pytest.mark.parametrize(
    "name, low, high",
    [
        ("mnist_cnn", 0.05e9, 0.1e9),  # ~12M MACs forward
        ("wide_resnet28_10", 28e9, 40e9),  # ~5.2-6 GMACs forward depending on where blocks stride
        ("resnet18", 0.85 * 3 * 2 * 1.82e9, 1.15 * 3 * 2 * 1.82e9),
        ("resnet101", 0.85 * 3 * 2 * 7.8e9, 1.15 * 3 * 2 * 7.8e9),
        ("resnet152", 0.85 * 3 * 2 * 11.5e9, 1.15 * 3 * 2 * 11.5e9),
        ("dpn92", 9e9, 15e9),  # ~2 GMACs forward at 32x32
    ],
)
def test_convnet_flops_plausible(name: str, low: float, high: float):
    spec = get_model(name)
    assert low <= spec.flops_per_sample(spec.config) <= high


def test_llama_has_llama3_8b_layer_shapes():
    spec = get_model("llama")
    with torch.device("meta"):
        model = spec.build(spec.config)
    block = model.layers[0]
    shapes = {name: tuple(m.weight.shape) for name, m in block.named_modules() if isinstance(m, torch.nn.Linear)}
    assert shapes == {
        "attention.wq": (4096, 4096), "attention.wk": (1024, 4096), "attention.wv": (1024, 4096),
        "attention.wo": (4096, 4096), "feed_forward.w1": (14336, 4096), "feed_forward.w3": (14336, 4096),
        "feed_forward.w2": (4096, 14336),
    }, f"llama block Linear shapes {shapes}"
    assert all(getattr(m, "bias", None) is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert model.output.weight is not model.tok_embeddings.weight, "llama's head is untied, as Llama 3's"


def test_llama_flops_match_the_6n_rule():
    spec = get_model("llama")
    c = spec.config
    with torch.device("meta"):
        model = spec.build(c)
    matmul_params = n_params(model) - model.tok_embeddings.weight.numel()  # the lookup is no matmul
    # causal attention counted at its full T x T cost: QK^T and AV, 2 FLOPs a MAC, 3x for training
    attention = 3 * 2 * 2 * c.n_layers * c.dim * c.seq_len
    assert spec.flops_per_sample(c) == pytest.approx((6 * matmul_params + attention) * c.seq_len, rel=0.02)


def test_llama_is_causal_and_position_aware():
    """Changing a later token leaves earlier positions' logits alone (the mask), and swapping two earlier
    tokens changes the last position's logits: without position information attention would see the
    same set of keys and values (the rotary embedding reaches attention). One block: in a second block
    the earlier positions' own causal prefixes would differ after a swap anyway."""
    spec = get_model("llama")
    torch.manual_seed(0)
    model = spec.build(dataclasses.replace(spec.smoke_config, n_layers=1)).eval()
    tokens = torch.randint(0, spec.smoke_config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, 10] = (changed[0, 10] + 1) % spec.smoke_config.vocab_size
    with torch.no_grad():
        a, b = model(tokens), model(changed)
        swapped = model(tokens[:, [1, 0, *range(2, 16)]])
    assert torch.equal(a[0, :10], b[0, :10]), "llama: a later token changed earlier positions' logits"
    assert not torch.equal(a[0, 10:], b[0, 10:]), "llama: a changed token did not change its own logits"
    # at initialisation attention is nearly uniform: the swap moves the logits by ~1e-4, rounding by ~1e-7
    assert not torch.allclose(a[0, -1], swapped[0, -1], rtol=0, atol=1e-6), (
        "llama: swapping the first two tokens left the last position's logits unchanged: no position information")
