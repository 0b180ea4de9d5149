"""Tests for geometric attention (Csordás PhD thesis, Sec. 5.1.2, eqs. 5.6-5.10)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pytest
import torch

from recombine.errors import UserError
from recombine.models import build
from recombine.models.layers.geometric_attention import GeometricSelfAttention, geometric_attention_weights
from recombine.models.transformer_classifier import TransformerClassifierConfig
from recombine.tasks.base import TaskSpec

Weights = Callable[..., torch.Tensor]


@pytest.fixture(params=["compiled", "torch"])
def weights(request: pytest.FixtureRequest) -> Weights:
    """geometric_attention_weights with the compiled CPU scan, or with gather/cumsum (the other devices')."""
    return functools.partial(geometric_attention_weights, implementation=request.param)


def closer_set(i: int, j: int, n: int) -> list[int]:
    """S_ij of thesis eq. 5.8, literally."""
    if j > i:
        return [k for k in range(n) if k not in (i, j) and abs(i - k) < abs(i - j)]
    return [k for k in range(n) if k not in (i, j) and abs(i - k) <= abs(i - j)]


def naive_geometric_attention_weights(logits: torch.Tensor, complement: str = "one_minus") -> torch.Tensor:
    """Thesis eqs. 5.6-5.8 with explicit products over every (query, key) pair; [..., N, N].

    ``complement="sigmoid"`` computes ``1 - P`` as ``sigmoid(-logits)``, exact also where ``P`` rounds to 1.
    """
    p = torch.sigmoid(logits)
    not_p = 1 - p if complement == "one_minus" else torch.sigmoid(-logits)
    n = logits.shape[-1]
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append(p[..., i, j] * 0)  # zeroed diagonal
                continue
            closer = torch.tensor(closer_set(i, j, n), dtype=torch.long)
            row.append(p[..., i, j] * not_p[..., i, closer].prod(-1))
        rows.append(torch.stack(row, dim=-1))
    return torch.stack(rows, dim=-2)


def _logits(*shape: int, seed: int = 0, scale: float = 2.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_()


def test_closer_set_matches_thesis_figure() -> None:
    # Fig. 5.2/Right (N = 5, query in the middle): order i+1, i-1, i+2, i-2.
    assert closer_set(2, 3, 5) == []
    assert closer_set(2, 1, 5) == [3]
    assert closer_set(2, 4, 5) == [1, 3]
    assert closer_set(2, 0, 5) == [1, 3, 4]


@pytest.mark.parametrize("n", range(1, 13))
def test_values_match_naive(n: int, weights: Weights) -> None:
    x = _logits(3, n, n, seed=n)
    torch.testing.assert_close(weights(x), naive_geometric_attention_weights(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13, 40])
def test_values_and_gradients_match_naive(n: int, weights: Weights) -> None:
    x = _logits(2, n, n, seed=100 + n)
    weight = torch.randn(2, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    fast = weights(x)
    ref = naive_geometric_attention_weights(x)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)
    (g_fast,) = torch.autograd.grad((fast * weight).sum(), x)
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), x)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-9, atol=1e-12)


def test_ties_prefer_right(weights: Weights) -> None:
    # With P = 1 everywhere the query attends only to its closest key; at distance 1 that is i+1.
    a = weights(torch.full((5, 5), 50.0, dtype=torch.float64))
    assert a[2, 3] == pytest.approx(1.0)
    assert a[2, 1] == pytest.approx(0.0, abs=1e-15)
    # Every row picks i+1, except the last, which can only go left.
    expected = torch.zeros(5, 5, dtype=torch.float64)
    expected[torch.arange(4), torch.arange(1, 5)] = 1.0
    expected[4, 3] = 1.0
    torch.testing.assert_close(a, expected, rtol=0, atol=1e-15)


def test_zero_diagonal_and_rows_sum_to_at_most_one(weights: Weights) -> None:
    a = weights(_logits(4, 3, 9, 9, seed=7))
    assert torch.all(torch.diagonal(a, dim1=-2, dim2=-1) == 0)
    assert torch.all(a >= 0)
    assert torch.all(a.sum(-1) <= 1 + 1e-12)


def test_diagonal_logit_has_no_effect(weights: Weights) -> None:
    x = _logits(9, 9, seed=3).detach()
    y = x.clone()
    y.diagonal().fill_(50.0)
    torch.testing.assert_close(weights(x), weights(y))


def test_batch_and_head_dims(weights: Weights) -> None:
    x = _logits(2, 3, 7, 7, seed=11)
    a = weights(x)
    assert a.shape == (2, 3, 7, 7)
    torch.testing.assert_close(a[1, 2], weights(x[1, 2]), rtol=0, atol=0)


def test_padding(weights: Weights) -> None:
    b, h, n = 3, 2, 10
    lengths = [10, 6, 1]
    x = _logits(b, h, n, n, seed=5)
    mask = torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]  # [B, N]
    a = weights(x, mask[:, None, :])
    for bi, length in enumerate(lengths):
        # Padded keys get zero weight ...
        assert torch.all(a[bi, :, :, length:] == 0)
        # ... and the other weights are as if the sequence were only the unpadded prefix.
        prefix = weights(x[bi, :, :length, :length])
        torch.testing.assert_close(a[bi, :, :length, :length], prefix, rtol=1e-12, atol=1e-15)
    weight = torch.randn(b, h, n, n, dtype=torch.float64)
    (grad,) = torch.autograd.grad((a * weight).sum(), x)
    assert torch.isfinite(grad).all()
    for bi, length in enumerate(lengths):
        assert torch.all(grad[bi, :, :, length:] == 0)
        prefix = x[bi, :, :length, :length]
        (grad_prefix,) = torch.autograd.grad((weights(prefix) * weight[bi, :, :length, :length]).sum(), x)
        torch.testing.assert_close(grad[bi, :, :length, :length], grad_prefix[bi, :, :length, :length])


def test_padding_mask_broadcasts_over_heads(weights: Weights) -> None:
    x = _logits(2, 4, 6, 6, seed=9).detach()
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    a_bcast = weights(x, mask[:, None, :])
    a_full = weights(x, mask[:, None, None, :].expand(2, 4, 6, 6)[..., 0, :])
    torch.testing.assert_close(a_bcast, a_full, rtol=0, atol=0)


def test_extreme_logits_are_finite(weights: Weights) -> None:
    gen = torch.Generator().manual_seed(0)
    sign = torch.randint(0, 2, (16, 4, 64, 64), generator=gen).float() * 2 - 1
    x = (50.0 * sign).requires_grad_()
    a = weights(x)
    assert torch.isfinite(a).all()
    (grad,) = torch.autograd.grad((a * torch.randn(a.shape, generator=gen)).sum(), x)
    assert torch.isfinite(grad).all()
    # float32 agrees with float64 on extreme inputs.
    a64 = weights(x.detach().double())
    torch.testing.assert_close(a.detach().double(), a64, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [24, 33])
def test_rows_that_stop_early_match_naive(n: int, weights: Weights) -> None:
    # Logits around 19 (1 - P ~ 1e-8; below 20, where softplus turns linear) drive prod (1 - P) below the
    # float64 flush threshold (~1e-154) after about 18 keys: the compiled kernels stop walking such rows
    # and the backward skips the rest.
    gen = torch.Generator().manual_seed(n)
    x = (18.5 + 1.5 * torch.rand(2, n, n, generator=gen, dtype=torch.float64)).requires_grad_()
    weight = torch.randn(2, n, n, dtype=torch.float64, generator=gen)
    fast = weights(x)
    ref = naive_geometric_attention_weights(x, complement="sigmoid")  # 1 - P to the last digit
    assert ((fast == 0) & (ref > 0)).any()  # flushed weights
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)
    (g_fast,) = torch.autograd.grad((fast * weight).sum(), x)
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), x)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("dtype", "shift"), [(torch.float32, 3.0), (torch.float64, 20.0)])
def test_small_weights_are_flushed_to_zero(dtype: torch.dtype, shift: float, weights: Weights) -> None:
    # No weight between 0 and sqrt(smallest normal) (denormals would slow A @ V and the backward down).
    gen = torch.Generator().manual_seed(0)
    x = (shift + 4.0 * torch.randn(4, 2, 70, 70, generator=gen, dtype=dtype)).to(dtype)
    a = weights(x)
    nonzero = a[a > 0]
    assert nonzero.numel() < a.numel() - 4 * 2 * 70  # something was flushed
    assert nonzero.min() >= torch.finfo(dtype).tiny ** 0.5


def test_minus_inf_logits_act_as_padding(weights: Weights) -> None:
    x = _logits(2, 3, 8, 8, seed=19).detach()
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, 5:] = True
    mask[1, :2] = True
    minus_inf = x.masked_fill(mask[:, None, None, :], -math.inf)
    torch.testing.assert_close(weights(minus_inf), weights(x, mask[:, None, :]), rtol=0, atol=0)


@pytest.mark.parametrize("shift", [-5.0, 3.0])  # no row stops early / most rows stop early (float32)
def test_implementations_agree_on_long_rows(shift: float) -> None:
    n = 130
    gen = torch.Generator().manual_seed(29)
    x = (shift + 2.0 * torch.randn(2, 2, n, n, generator=gen)).requires_grad_()
    mask = torch.arange(n)[None, :] >= torch.tensor([n, 97])[:, None]
    weight = torch.randn(2, 2, n, n, generator=gen)
    results = []
    for implementation in ("compiled", "torch"):
        a = geometric_attention_weights(x, mask[:, None, :], implementation=implementation)
        (grad,) = torch.autograd.grad((a * weight).sum(), x)
        results.append((a, grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-6)


def test_module_shapes_and_padding() -> None:
    torch.manual_seed(0)
    layer = GeometricSelfAttention(d_model=16, n_heads=4, dropout=0.1)
    h = torch.randn(3, 7, 16)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[1, 5:] = True
    out, attention = layer(h, key_padding_mask=mask)
    assert out.shape == (3, 7, 16)
    assert attention.shape == (3, 4, 7, 7)
    assert torch.all(attention[1, :, :, 5:] == 0)
    out.sum().backward()
    assert all(p.grad is not None for p in layer.parameters())


def test_module_initialisation() -> None:
    layer = GeometricSelfAttention(d_model=32, n_heads=4)
    torch.testing.assert_close(layer.alpha, torch.full((4,), 8**-0.5))  # d_head = 8
    torch.testing.assert_close(layer.beta, torch.ones(4))
    torch.testing.assert_close(layer.gamma, torch.zeros(4))


def test_directional_encoding_attends_right() -> None:
    torch.manual_seed(0)
    d_model, n_heads, n = 8, 2, 6
    layer = GeometricSelfAttention(d_model, n_heads)
    with torch.no_grad():
        layer.query.weight.zero_()
        layer.key.weight.zero_()
        layer.direction.weight.zero_()
        layer.direction.bias[:n_heads] = 10.0  # b_LR >> 0: keys j >= i match
        layer.direction.bias[n_heads:] = -10.0  # b_RL << 0: keys j < i do not match
        layer.beta.fill_(5.0)
    _, attention = layer(torch.randn(2, n, d_model))
    left = torch.ones(n, n, dtype=torch.bool).tril(-1)
    assert attention[..., left].abs().max() < 1e-20
    # Every query except the last attends (almost) entirely to its right neighbour.
    right_neighbour = attention[..., torch.arange(n - 1), torch.arange(1, n)]
    assert torch.all(right_neighbour > 0.999)
    # The last query has no key to its right.
    assert attention[..., n - 1, :].sum(-1).max() < 1e-20


def test_module_dropout_only_on_query() -> None:
    torch.manual_seed(0)
    layer = GeometricSelfAttention(d_model=8, n_heads=2, dropout=0.5)
    with torch.no_grad():
        layer.query.weight.zero_()
        layer.query.bias.zero_()
    h = torch.randn(2, 5, 8)
    layer.train()
    out_train, att_train = layer(h)
    layer.eval()
    out_eval, att_eval = layer(h)
    # With a zero content query, dropout can change nothing: directional term and values are untouched.
    torch.testing.assert_close(att_train, att_eval)
    torch.testing.assert_close(out_train, out_eval)


def test_index_cache_survives_inference_mode(weights: Weights) -> None:
    with torch.inference_mode():
        weights(torch.randn(17, 17))
    x = torch.randn(17, 17, requires_grad=True)
    weights(x).sum().backward()
    assert x.grad is not None


def test_non_contiguous_and_expanded_logits(weights: Weights) -> None:
    x = _logits(2, 3, 8, 8, seed=13).detach()
    expected = weights(x.contiguous())
    transposed = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    torch.testing.assert_close(weights(transposed), expected, rtol=0, atol=0)
    expanded = x[:1].expand(4, 3, 8, 8)
    torch.testing.assert_close(weights(expanded), expected[:1].expand(4, 3, 8, 8))


def test_half_precision_is_computed_in_float32(weights: Weights) -> None:
    x = _logits(2, 16, 16, seed=17).detach().float()
    x_bf16 = x.bfloat16().requires_grad_()
    a = weights(x_bf16)
    assert a.dtype == torch.bfloat16
    torch.testing.assert_close(a.float(), weights(x_bf16.detach().float()), rtol=1e-2, atol=1e-3)
    a.float().sum().backward()
    assert x_bf16.grad is not None and x_bf16.grad.dtype == torch.bfloat16


def test_implementations_agree_on_a_model_sized_batch() -> None:
    x = _logits(4, 2, 37, 37, seed=23).detach().float().requires_grad_()
    mask = torch.arange(37)[None, :] >= torch.tensor([37, 30, 5, 1])[:, None]
    weight = torch.randn(4, 2, 37, 37, generator=torch.Generator().manual_seed(1))
    results = []
    for implementation in ("compiled", "torch"):
        a = geometric_attention_weights(x, mask[:, None, :], implementation=implementation)
        (grad,) = torch.autograd.grad((a * weight).sum(), x)
        results.append((a, grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-6)


def test_unknown_implementation_is_refused() -> None:
    with pytest.raises(ValueError, match="valid choices: auto, compiled, torch"):
        geometric_attention_weights(torch.zeros(3, 3), implementation="cuda")


@pytest.mark.slow
def test_under_torch_compile_auto_takes_the_traceable_path() -> None:
    """torch.compile cannot trace the numba scan: ``auto`` switches to the torch path while it traces (same
    values as the scan), in one graph."""
    torch._dynamo.reset()
    logits = torch.randn(2, 6, 6)
    eager = geometric_attention_weights(logits)  # the scan, on a CPU tensor
    traced = torch.compile(geometric_attention_weights, fullgraph=True)(logits)
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-6)


def test_normalized_rows_are_the_naive_weights_over_their_sum() -> None:
    """``normalize=True`` (the authors' released code): each row of eqs. 5.7-5.8, divided by its sum; a row
    that matches nothing (the last query when only keys to the right match) stays zero."""
    torch.manual_seed(0)
    plain = GeometricSelfAttention(d_model=8, n_heads=2)
    normalized = GeometricSelfAttention(d_model=8, n_heads=2, normalize=True)
    normalized.load_state_dict(plain.state_dict())
    h = torch.randn(3, 6, 8, requires_grad=True)
    out, attention = normalized(h)
    _, raw = plain(h)
    naive = naive_geometric_attention_weights(_module_logits(plain, h).double()).float()
    torch.testing.assert_close(raw, naive, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(attention, naive / naive.sum(-1, keepdim=True), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2, 6))
    out.sum().backward()
    assert h.grad is not None and torch.isfinite(h.grad).all()
    with torch.no_grad():  # only keys to the right match: the last query's row is all zeros
        for layer in (plain, normalized):
            layer.query.weight.zero_()
            layer.key.weight.zero_()
            layer.direction.weight.zero_()
            layer.direction.bias[:2] = 10.0
            layer.direction.bias[2:] = -10.0
            layer.beta.fill_(5.0)
    _, attention = normalized(torch.randn(2, 6, 8))
    assert torch.all(attention[..., -1, :] == 0) and torch.isfinite(attention).all()


def _module_logits(layer: GeometricSelfAttention, h: torch.Tensor) -> torch.Tensor:
    """Eq. 5.10's logits of ``layer`` in evaluation mode, written out."""
    b, n, _ = h.shape
    heads, d_head = layer.n_heads, layer.d_head
    q = layer.query(h).view(b, n, heads, d_head).transpose(1, 2)
    k = layer.key(h).view(b, n, heads, d_head).transpose(1, 2)
    direction = layer.direction(h).view(b, n, 2, heads)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    d = torch.where(
        i <= j, direction[:, :, 0].transpose(1, 2)[..., None], direction[:, :, 1].transpose(1, 2)[..., None]
    )
    return (
        layer.alpha[:, None, None] * (q @ k.transpose(-1, -2))
        + layer.beta[:, None, None] * d
        + layer.gamma[:, None, None]
    )


def test_geometric_normalize_reaches_the_ndr_and_needs_geometric_attention() -> None:
    spec = TaskSpec(kind="classify", input_vocab_size=12, n_classes=8, max_input_length=10)
    model = build("ndr", spec, d_model=16, n_heads=2, d_ff=32, n_layers=2, geometric_normalize=True)
    assert model.layers[0].attention.normalize
    assert not build("ndr", spec, d_model=16, n_heads=2, d_ff=32, n_layers=2).layers[0].attention.normalize
    with pytest.raises(UserError, match="geometric_normalize applies to attention=geometric, not softmax"):
        TransformerClassifierConfig(geometric_normalize=True)
