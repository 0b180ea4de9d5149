"""The Transformer encoder-decoder: batched greedy decoding against a one-sample step-by-step loop,
padding invariance, causal masking, layer sharing, embedding scaling (thesis C.4), kind checks."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from recombine import models
from recombine.errors import UserError
from recombine.models.layers.positional import sinusoidal_embedding
from recombine.models.seq2seq_interface import eos_id, sos_id
from recombine.tasks.base import TaskSpec

SPEC = TaskSpec(kind="seq2seq", input_vocab_size=9, n_classes=6, max_input_length=7, max_output_length=8)
SMALL: dict[str, object] = {
    "d_model": 16,
    "n_heads": 2,
    "d_ff": 32,
    "n_encoder_layers": 2,
    "n_decoder_layers": 2,
    "dropout": 0.0,
}
SEQ2SEQ = [name for name in models.names(kind="seq2seq") if name.startswith("transformer_")]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny tensors: one thread is much faster than several fighting over a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(name: str, seed: int = 0, **extra: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return models.build(name, SPEC, **{**SMALL, **extra}).double().eval()


def random_sources(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, SPEC.max_input_length + 1, (batch,), generator=generator)
    tokens = torch.randint(1, SPEC.input_vocab_size, (batch, int(lengths.max())), generator=generator)
    tokens[torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]] = 0
    return tokens, lengths


def decode_alone(model: torch.nn.Module, src: torch.Tensor, max_length: int) -> list[int]:
    """Greedy decoding of one unpadded source, written independently of the model's decoder loop: run
    the whole (uncached, teacher-forced) model on the growing prefix and append the argmax."""
    prefix = [sos_id(SPEC.n_classes)]
    output: list[int] = []
    for _ in range(max_length):
        tgt_in = torch.tensor([prefix])
        logits = model(src[None], torch.tensor([len(src)]), tgt_in, torch.tensor([len(prefix)]))[0, -1]
        token = int(logits[1:].argmax()) + 1  # never the pad id 0
        if token == eos_id(SPEC.n_classes):
            break
        output.append(token)
        prefix.append(token)
    return output


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_batched_greedy_decoding_equals_step_by_step_decoding_of_each_sample(name: str) -> None:
    max_length = 6
    src, src_len = random_sources(12, seed=1)
    model = build(name, tied_embedding=False)
    with torch.no_grad():
        # raise the EOS bias until some, but not all, outputs end within max_length, at different steps
        for eos_bias in torch.arange(0.0, 20.0, 0.25):
            model.output.bias[eos_id(SPEC.n_classes)] = eos_bias
            tokens, lengths = model.greedy_decode(src, src_len, max_length)
            if len(set(lengths.tolist())) > 2:
                break
        assert len(set(lengths.tolist())) > 2, "no EOS bias gave outputs of varied lengths"
        for b in range(len(src)):
            expected = decode_alone(model, src[b, : src_len[b]], max_length)
            assert int(lengths[b]) == len(expected)
            assert tokens[b, : len(expected)].tolist() == expected
            assert (tokens[b, len(expected) :] == 0).all()


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_padding_does_not_change_logits(name: str) -> None:
    """A sample's logits are the same alone and batched with longer sources and targets."""
    model = build(name)
    src = torch.tensor([[3, 1, 4]])
    tgt_in = torch.tensor([[sos_id(SPEC.n_classes), 2, 5]])
    with torch.no_grad():
        alone = model(src, torch.tensor([3]), tgt_in, torch.tensor([3]))
        long_src, long_len = torch.tensor([[2, 7, 1, 8, 2, 8, 1]]), torch.tensor([7])
        long_tgt = torch.tensor([[sos_id(SPEC.n_classes), 1, 2, 3, 4, 5, 1]])
        batched_src = torch.cat([torch.nn.functional.pad(src, (0, 4)), long_src])
        batched_tgt = torch.cat([torch.nn.functional.pad(tgt_in, (0, 4)), long_tgt])
        batched_len = torch.cat([torch.tensor([3]), long_len])
        mixed = model(batched_src, batched_len, batched_tgt, torch.tensor([3, 7]))
    assert alone.shape == (1, 3, SPEC.n_classes + 1)
    torch.testing.assert_close(mixed[:1, :3], alone)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_decoder_is_causal(name: str) -> None:
    """Changing decoder input k changes no logits before k, and some from k on."""
    model = build(name)
    src, src_len = random_sources(3, seed=2)
    tgt_in = torch.tensor([[7, 1, 2, 3, 4, 5]] * 3)
    changed = tgt_in.clone()
    changed[:, 3] = 5
    with torch.no_grad():
        a = model(src, src_len, tgt_in, torch.tensor([6] * 3))
        b = model(src, src_len, changed, torch.tensor([6] * 3))
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_universal_variants_share_one_encoder_and_one_decoder_layer() -> None:
    standard = build("transformer_seq2seq_rel", n_encoder_layers=3, n_decoder_layers=3)
    universal = build("transformer_seq2seq_rel_universal", n_encoder_layers=3, n_decoder_layers=3)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    per_layer = count(standard.encoder_layers[0]) + count(standard.decoder_layers[0])
    assert len(universal.encoder_layers) == len(universal.decoder_layers) == 1
    assert count(standard) - count(universal) == 2 * per_layer


@pytest.mark.parametrize("scaling", ["teu", "none", "ped"])
def test_embedding_scaling_follows_thesis_c4(scaling: str) -> None:
    """H_i = s E_w + c P_i: (s, c) = (sqrt(d), 1) for TEU, (1, 1) without scaling, (1, 1/sqrt(d)) for PED;
    initial E Glorot-uniform, N(0, 1), N(0, 1/sqrt(d)) respectively."""
    d = 256
    torch.manual_seed(0)
    model = models.build("transformer_seq2seq", SPEC, **{**SMALL, "d_model": d, "embedding_scaling": scaling})
    weight = model.src_embedding.weight
    expected_std = {"teu": math.sqrt(2 / (d + SPEC.input_vocab_size)), "none": 1.0, "ped": 1 / math.sqrt(d)}
    assert weight.std().item() == pytest.approx(expected_std[scaling], rel=0.1)
    s, c = {"teu": (math.sqrt(d), 1.0), "none": (1.0, 1.0), "ped": (1.0, 1 / math.sqrt(d))}[scaling]
    tokens = torch.tensor([[4, 2, 8]])
    expected = s * weight[tokens] + c * sinusoidal_embedding(torch.arange(3), d)
    torch.testing.assert_close(model._embed(model.src_embedding, tokens), expected)


def test_factories_refuse_other_task_kinds() -> None:
    classify = TaskSpec(kind="classify", input_vocab_size=9, n_classes=6, max_input_length=7)
    with pytest.raises(UserError, match="seq2seq"):
        models.build("transformer_seq2seq", classify)
    with pytest.raises(UserError, match="classifier"):
        models.build("transformer", SPEC)
    with pytest.raises(UserError, match="model.attention"):
        models.build("transformer_seq2seq", SPEC, attention="geometric")
    assert set(SEQ2SEQ) == {
        "transformer_seq2seq",
        "transformer_seq2seq_universal",
        "transformer_seq2seq_rel",
        "transformer_seq2seq_rel_universal",
    }


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_teacher_forcing_computes_real_positions_only_and_equals_the_padded_computation(name: str) -> None:
    """``forward`` packs the real target positions (``layers/token_packing.py``): their logits equal the
    decoder run on the whole padded batch, the padding's logits are 0."""
    model = build(name)
    src, src_len = random_sources(4, seed=3)
    tgt_len = torch.tensor([6, 1, 3, 4])
    tgt_in = torch.randint(1, SPEC.n_classes, (4, 6), generator=torch.Generator().manual_seed(3))
    tgt_in[:, 0] = sos_id(SPEC.n_classes)
    with torch.no_grad():
        packed = model(src, src_len, tgt_in, tgt_len)
        memory, padding = model.encode(src, src_len)
        padded = model.decode(memory, padding, tgt_in)
    real = torch.arange(6)[None, :] < tgt_len[:, None]
    torch.testing.assert_close(packed[real], padded[real])
    assert (packed[~real] == 0).all()


FFN_BLOCKS = {"topk": "TopKMLP", "pkm": "ProductKeyMemory", "sigma_moe": "SigmaMoE", "switch": "SigmaMoE"}
FFN_BLOCKS["s_base"] = "SBaseMoE"


@pytest.mark.parametrize("ffn", sorted(FFN_BLOCKS))
@pytest.mark.parametrize("name", ["transformer_seq2seq", "transformer_seq2seq_rel_universal"])
def test_ffn_blocks_replace_the_dense_mlp_and_keep_decoding_and_padding_exact(name: str, ffn: str) -> None:
    """``model.ffn`` (thesis ch. 7) in every encoder and decoder layer: batched greedy decoding still
    equals the one-sample loop, and padding still changes no logits of a sample."""
    small_blocks = {"topk": {"k": 8}, "pkm": {"k": 4, "heads": 2}, "sigma_moe": {"n_experts": 4, "k": 2}}
    model = build(name, tied_embedding=False, ffn=ffn, d_ff=64, **{ffn: small_blocks.get(ffn, {})})
    layers = [*model.encoder_layers, *model.decoder_layers]
    assert {type(layer.ffn).__name__ for layer in layers} == {FFN_BLOCKS[ffn]}
    src, src_len = random_sources(6, seed=4)
    with torch.no_grad():
        tokens, lengths = model.greedy_decode(src, src_len, 5)
        for b in range(len(src)):
            expected = decode_alone(model, src[b, : src_len[b]], 5)
            assert tokens[b, : int(lengths[b])].tolist() == expected
        one = model(src[:1, : src_len[0]], src_len[:1], torch.tensor([[7, 1, 2]]), torch.tensor([3]))
        padded_tgt = torch.tensor([[7, 1, 2, 0, 0], [7, 3, 4, 5, 1]])
        both = model(src[:2], src_len[:2], padded_tgt, torch.tensor([3, 5]))
    torch.testing.assert_close(both[:1, :3], one)


def test_sigma_moe_regulariser_reaches_the_training_loss_only() -> None:
    model = build("transformer_seq2seq_universal", ffn="sigma_moe", d_ff=64).train()
    src, src_len = random_sources(4, seed=5)
    tgt_in, tgt_len = torch.tensor([[7, 1, 2, 3]] * 4), torch.tensor([4, 2, 3, 1])
    model(src, src_len, tgt_in, tgt_len)
    first = model.auxiliary_loss()
    assert first is not None and first.requires_grad and torch.isfinite(first)
    assert model.auxiliary_loss() is None  # popped
    with torch.no_grad():
        model(src, src_len, tgt_in, tgt_len)
    assert model.auxiliary_loss() is None
    assert build("transformer_seq2seq").train().auxiliary_loss() is None
    # a training forward whose regulariser was never collected does not leak into the next one
    model(src, src_len, tgt_in, tgt_len)
    model(src, src_len, tgt_in, tgt_len)
    torch.testing.assert_close(model.auxiliary_loss(), first)


def padded_layer_by_layer(
    model: torch.nn.Module, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor
) -> torch.Tensor:
    """The model on the padded batch, one layer application after the other: no token packing in the
    encoder or the decoder, the keys and values of the encoder output computed anew in every application."""
    padding = torch.arange(src.shape[1])[None, :] >= src_len[:, None]
    h = model._embed(model.src_embedding, src)
    for step in range(model.config.n_encoder_layers):
        h, _ = model.encoder_layers[step % len(model.encoder_layers)](h, padding)
    g = model._embed(model.tgt_embedding, tgt_in)
    for step in range(model.config.n_decoder_layers):
        g = model.decoder_layers[step % len(model.decoder_layers)](g, h, padding)
    return torch.nn.functional.linear(g, model.tgt_embedding.weight[: SPEC.n_classes + 1])


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_forward_equals_the_padded_layer_by_layer_computation_values_and_gradients(name: str) -> None:
    """``forward`` packs the encoder and decoder positions and computes the keys and values of the encoder
    output once per decoder layer (universal: once): the same logits at every real target position, and
    the same gradients for every parameter, as the plain padded computation."""
    model = build(name, n_encoder_layers=3, n_decoder_layers=3)
    src, src_len = random_sources(5, seed=6)
    tgt_len = torch.tensor([7, 1, 4, 6, 2])
    tgt_in = torch.randint(1, SPEC.n_classes, (5, 7), generator=torch.Generator().manual_seed(6))
    tgt_in[:, 0] = sos_id(SPEC.n_classes)
    real = torch.arange(7)[None, :] < tgt_len[:, None]
    fast = model(src, src_len, tgt_in, tgt_len)[real]
    plain = padded_layer_by_layer(model, src, src_len, tgt_in)[real]
    torch.testing.assert_close(fast, plain)
    weights = torch.randn_like(fast)
    params = list(model.parameters())
    fast_grads = torch.autograd.grad((fast * weights).sum(), params, allow_unused=True)
    plain_grads = torch.autograd.grad((plain * weights).sum(), params, allow_unused=True)
    names = [param_name for param_name, _ in model.named_parameters()]
    for param_name, fast_grad, plain_grad in zip(names, fast_grads, plain_grads, strict=True):
        assert (fast_grad is None) == (plain_grad is None), param_name
        if plain_grad is not None:
            torch.testing.assert_close(fast_grad, plain_grad, msg=param_name)
