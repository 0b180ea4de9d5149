"""Differentiable binary weight masks over a frozen trained model (thesis 3.1 and appendix B.1-B.3).

The probe asks which weights a *target function* (a subset of the data, a split) needs. The model's
weights stay frozen; every chosen weight ``w_i`` gets a learned logit ``l_i``, initialised so that the
weight is kept with probability 0.9 (thesis 3.1). A training step

1. draws ``n_samples`` (4-8, thesis 3.1 / B.3.2) binary masks with the Gumbel-sigmoid and the
   straight-through estimator,

   ``s_i = sigma((l_i - log(log U_1 / log U_2)) / tau)``,  ``U_1, U_2 ~ U(0, 1)``     (thesis eq. 3.1 / B.6)

   ``b_i = [1[s_i > 0.5] - s_i]_stop + s_i``                                          (thesis eq. 3.2 / B.10)

   so the forward pass sees a hard 0/1 mask and the backward pass the gradient of the soft ``s_i``;
   ``b_i ~ Bernoulli(sigma(l_i))`` whatever the temperature (B.1.3, B.1.4; ``tau = 1`` in the thesis);
2. applies sample ``k`` to the ``k``-th slice of the batch, ``w'_i = w_i * b_i``, all slices in one call
   (``torch.func.functional_call`` under ``torch.vmap``; a loop over the slices for models vmap cannot
   batch, such as ``nn.LSTM``: the same numbers, slower);
3. minimises the target-task loss plus ``r = alpha * sum_i l_i`` (thesis 3.1) with Adam.

At the end, ``M_i = 1[sigma(l_i) > 0.5] = 1[l_i > 0]`` is the binary mask (a
:class:`~recombine.probes.mask_sets.MaskSet`); :class:`MaskedModel` evaluates the model under it or
under its inverse.

Part of a mask can be *fixed* (``train_weight_mask(..., fixed=...)``): those parameters get no logits and
every sample uses the given binary mask for them. Thesis 3.4 fixes the output layer's mask to the
control mask's while the class-removal masks train, so that the analysis inspects the feature layers.

By default every weight matrix and convolution kernel is masked (every parameter with 2 or more
dimensions: ``nn.Linear``, ``nn.Conv*``, ``nn.LSTM``'s ``weight_ih``/``weight_hh``,
``nn.MultiheadAttention``'s ``in_proj_weight``/``out_proj``, our attention layers), not embedding
tables (thesis B.3.7 leaves the word embeddings unmasked) and not 1-D parameters (biases,
normalisation gains); ``biases=True`` and ``embeddings=True`` add those.

The regulariser strength: the thesis mostly gives ``beta = b * alpha`` with ``b`` the mask-training
batch size (B.3.2); :func:`alpha_from_beta` converts.
"""

from __future__ import annotations

import contextlib
import math
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call

from recombine.errors import UserError, choices_hint
from recombine.probes.mask_sets import MaskSet

Application = Literal["auto", "vmap", "loop"]
APPLICATIONS: tuple[str, ...] = ("auto", "vmap", "loop")
ModelOutput = torch.Tensor | tuple[torch.Tensor, ...]

#: models on which vmap failed once; ``application="auto"`` uses the loop for them from then on
_VMAP_UNSUPPORTED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def logit(probability: float) -> float:
    """The logit ``l`` with ``sigma(l) = probability`` (0.9 -> log 9 = 2.197, thesis 3.1)."""
    if not 0.0 < probability < 1.0:
        raise UserError(f"a keep probability must be in (0, 1), got {probability}")
    return math.log(probability / (1.0 - probability))


def alpha_from_beta(beta: float, batch_size: int) -> float:
    """The thesis's ``beta = b * alpha`` (B.3.2) solved for the regulariser ``alpha``."""
    return beta / batch_size


# --- thesis eqs. 3.1 and 3.2 ---


def straight_through(logits: torch.Tensor, noise: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``b = [1[s > 0.5] - s]_stop + s`` with ``s = sigma((l - noise) / tau)`` (thesis eqs. 3.1, 3.2)."""
    soft = torch.sigmoid((logits - noise) / temperature)  # thesis eq. 3.1
    hard = (soft > 0.5).to(soft.dtype)
    return (hard - soft).detach() + soft  # thesis eq. 3.2


def straight_through_gumbel_sigmoid(
    logits: torch.Tensor, uniforms: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Thesis eq. 3.1 literally: hard 0/1 samples from given uniforms ``[2, *logits.shape]``.

    ``uniforms[0]``, ``uniforms[1]`` are ``U_1``, ``U_2``; they must lie in (0, 1)."""
    noise = torch.log(torch.log(uniforms[0]) / torch.log(uniforms[1]))
    return straight_through(logits, noise, temperature)


def sample_masks(
    logits: torch.Tensor,
    n_samples: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``n_samples`` straight-through binary masks, ``[n_samples, *logits.shape]``.

    The noise ``log(log U_1 / log U_2) = -(g_1 - g_2)`` of eq. 3.1 is minus a difference of two
    independent Gumbel(0, 1) variables (B.4), i.e. Logistic(0, 1), which is ``logit(U)`` for one
    uniform ``U``: the same distribution from half the random numbers and a third of the logarithms
    (mask sampling dominates the cost of a mask-training step)."""
    uniforms = torch.rand(
        (n_samples, *logits.shape), generator=generator, dtype=logits.dtype, device=logits.device
    )
    noise = torch.logit(uniforms, eps=torch.finfo(logits.dtype).eps)  # U = 0 would give -inf
    return straight_through(logits.unsqueeze(0), noise, temperature)


# --- which parameters are masked ---


def maskable_parameter_names(
    model: nn.Module, *, biases: bool = False, embeddings: bool = False
) -> list[str]:
    """Names of the parameters masked by default: weight matrices and kernels (``ndim >= 2``).

    ``biases`` adds the 1-D parameters (biases, normalisation gains); ``embeddings`` adds the tables
    of ``nn.Embedding`` modules (thesis B.3.7 excludes word embeddings)."""
    embedding_names = {
        f"{module_name}.{param_name}" if module_name else param_name
        for module_name, module in model.named_modules()
        if isinstance(module, nn.Embedding | nn.EmbeddingBag)
        for param_name, _ in module.named_parameters(recurse=False)
    }
    names = []
    for name, parameter in model.named_parameters():
        if name in embedding_names:
            if embeddings:
                names.append(name)
        elif parameter.ndim >= 2 or biases:
            names.append(name)
    return names


# --- the learned logits ---


class WeightMask(nn.Module):
    """Learned mask logits ``l_i`` for named parameters of a model (the model itself is not held)."""

    def __init__(self, shapes: Mapping[str, torch.Size], keep_probability: float = 0.9) -> None:
        super().__init__()
        if not shapes:
            raise UserError("no parameters to mask: the selection is empty")
        self.names = list(shapes)
        initial = logit(keep_probability)
        self.logits = nn.ParameterList([nn.Parameter(torch.full(tuple(s), initial)) for s in shapes.values()])

    @classmethod
    def for_model(
        cls,
        model: nn.Module,
        names: Sequence[str] | None = None,
        *,
        keep_probability: float = 0.9,
        biases: bool = False,
        embeddings: bool = False,
    ) -> WeightMask:
        parameters = dict(model.named_parameters())
        if names is None:
            names = maskable_parameter_names(model, biases=biases, embeddings=embeddings)
        for name in names:
            if name not in parameters:
                raise UserError(f"the model has no parameter {name!r}; {choices_hint(name, parameters)}")
        return cls({name: parameters[name].shape for name in names}, keep_probability)

    def items(self) -> Iterator[tuple[str, nn.Parameter]]:
        return zip(self.names, self.logits, strict=True)

    def keep_probabilities(self) -> dict[str, torch.Tensor]:
        """``sigma(l_i)`` per parameter (thesis Fig. B.3 histograms these)."""
        return {name: torch.sigmoid(l.detach()) for name, l in self.items()}

    def sample(
        self, n_samples: int, temperature: float = 1.0, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Straight-through samples per parameter, each ``[n_samples, *shape]`` (eqs. 3.1, 3.2)."""
        return {name: sample_masks(l, n_samples, temperature, generator) for name, l in self.items()}

    def regularizer(self) -> torch.Tensor:
        """``sum_i l_i`` over all masked weights (thesis 3.1; multiplied by alpha in the loss)."""
        return torch.stack([l.sum() for l in self.logits]).sum()

    def binary(self) -> MaskSet:
        """The final mask ``M_i = 1[sigma(l_i) > 0.5]`` (thesis 3.1)."""
        return MaskSet({name: (l.detach() > 0).cpu() for name, l in self.items()})


# --- applying masks ---


def _frozen(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters()}


def _masked_parameters(model: nn.Module, masks: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    parameters = _frozen(model)
    for name, mask in masks.items():
        if name not in parameters:
            raise UserError(f"the model has no parameter {name!r}; {choices_hint(name, parameters)}")
        parameters[name] = parameters[name] * mask.to(parameters[name].dtype)
    return parameters


def _concatenate(outputs: Sequence[ModelOutput]) -> ModelOutput:
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(outputs))  # type: ignore[arg-type]
    if isinstance(first, tuple | list):
        return tuple(torch.cat([o[i] for o in outputs]) for i in range(len(first)))  # type: ignore[index]
    raise TypeError(f"masked models must return a tensor or a tuple of tensors, got {type(first).__name__}")


def _flatten_samples(output: ModelOutput) -> ModelOutput:
    if isinstance(output, torch.Tensor):
        return output.flatten(0, 1)
    if isinstance(output, tuple | list):
        return tuple(o.flatten(0, 1) for o in output)
    raise TypeError(f"masked models must return a tensor or a tuple of tensors, got {type(output).__name__}")


def _loop_forward(
    model: nn.Module,
    samples: Mapping[str, torch.Tensor],
    inputs: Sequence[torch.Tensor],
    kwargs: Mapping[str, object],
    n_samples: int,
) -> ModelOutput:
    slices = [torch.tensor_split(x, n_samples) for x in inputs]
    outputs = []
    for k in range(n_samples):
        parameters = _masked_parameters(model, {name: s[k] for name, s in samples.items()})
        outputs.append(functional_call(model, parameters, tuple(x[k] for x in slices), dict(kwargs)))
    return _concatenate(outputs)


def _vmap_forward(
    model: nn.Module,
    samples: Mapping[str, torch.Tensor],
    inputs: Sequence[torch.Tensor],
    kwargs: Mapping[str, object],
    n_samples: int,
) -> ModelOutput:
    frozen = _frozen(model)
    unmasked = {name: p for name, p in frozen.items() if name not in samples}
    split = [x.reshape(n_samples, x.shape[0] // n_samples, *x.shape[1:]) for x in inputs]

    def one_sample(sample: dict[str, torch.Tensor], *xs: torch.Tensor) -> ModelOutput:
        masked = {name: frozen[name] * b for name, b in sample.items()}
        return functional_call(model, {**unmasked, **masked}, xs, dict(kwargs))

    with warnings.catch_warnings(), _without_attention_fastpath():
        # ops without a batching rule fall back to a loop: correct, slower
        warnings.filterwarnings("ignore", message="There is a performance drop")
        output = torch.vmap(one_sample, randomness="different")(dict(samples), *split)
    return _flatten_samples(output)


@contextlib.contextmanager
def _without_attention_fastpath() -> Iterator[None]:
    """Under vmap, ``nn.MultiheadAttention`` in eval mode takes its fused fast path, which has no
    derivative: the mask logits would get no gradient. Disable it for the masked forward."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def forward_with_mask_samples(
    model: nn.Module,
    samples: Mapping[str, torch.Tensor],
    inputs: Sequence[torch.Tensor],
    kwargs: Mapping[str, object] | None = None,
    application: Application = "auto",
) -> ModelOutput:
    """Run ``model`` with mask sample ``k`` on the ``k``-th slice of the batch (thesis 3.1, B.3.2).

    ``samples[name]`` is ``[n_samples, *shape]``; every tensor in ``inputs`` is split along dim 0
    into ``n_samples`` contiguous slices (``torch.tensor_split`` sizes); ``kwargs`` go unchanged to
    every slice. The output is the slices' outputs concatenated along dim 0, in batch order.

    ``application``: ``"vmap"`` one vectorised call (the batch must divide evenly); ``"loop"`` one call
    per sample; ``"auto"`` vmap where it works, the loop otherwise (remembered per model)."""
    if application not in APPLICATIONS:
        raise UserError(
            f"unknown mask application {application!r}; {choices_hint(application, APPLICATIONS)}"
        )
    if not samples:
        raise UserError("no mask samples given")
    n_samples = next(iter(samples.values())).shape[0]
    kwargs = kwargs or {}
    batch = inputs[0].shape[0]
    if batch < n_samples:
        raise UserError(f"a batch of {batch} cannot be split between {n_samples} mask samples")
    divisible = all(x.shape[0] % n_samples == 0 for x in inputs)
    if application == "vmap" and not divisible:
        raise UserError(f"vmap needs a batch divisible by the {n_samples} mask samples, got {batch}")
    if application == "loop" or not divisible or model in _VMAP_UNSUPPORTED:
        return _loop_forward(model, samples, inputs, kwargs, n_samples)
    if application == "vmap":
        return _vmap_forward(model, samples, inputs, kwargs, n_samples)
    try:
        return _vmap_forward(model, samples, inputs, kwargs, n_samples)
    except RuntimeError:  # e.g. "Batching rule not implemented for aten::lstm", in-place ops, .item()
        _VMAP_UNSUPPORTED.add(model)
        return _loop_forward(model, samples, inputs, kwargs, n_samples)


class MaskedModel(nn.Module):
    """``model`` with a fixed binary mask applied to its weights; the model itself is not changed.

    Drop-in for evaluation code: ``MaskedModel(model, mask)(*args)`` equals ``model(*args)`` with every
    masked weight multiplied by its 0/1 mask; ``MaskedModel(model, ~mask)`` is the inverted mask."""

    def __init__(self, model: nn.Module, mask: MaskSet | Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.mask = mask if isinstance(mask, MaskSet) else MaskSet(dict(mask))

    def forward(self, *args: object, **kwargs: object) -> object:
        device = next(self.model.parameters()).device
        masks = {name: m.to(device) for name, m in self.mask.masks.items()}
        return functional_call(self.model, _masked_parameters(self.model, masks), args, kwargs)


# --- training ---


@dataclass
class MaskTrainingConfig:
    """Mask training hyperparameters; defaults follow thesis B.3.2 / B.3.4 where they are given."""

    steps: int = 20_000  # B.3.4: 20k steps per mask
    learning_rate: float = 1e-2  # B.3.4
    alpha: float = 1e-4 / 128  # regulariser weight; B.3.4: beta = 1e-4 at batch size 128
    n_samples: int = 4  # mask samples per batch (B.3.2: 4; B.3.6 and Mathematics: 8)
    keep_probability: float = 0.9  # initial P(keep) (thesis 3.1)
    temperature: float = 1.0  # tau (B.1.4)
    grad_clip: float = 1.0  # B.3.2; 0 disables
    biases: bool = False
    embeddings: bool = False
    application: str = "auto"
    names: list[str] | None = field(default=None)  # explicit parameter names; None: the default selection

    def __post_init__(self) -> None:
        if self.steps < 0 or self.n_samples < 1:
            raise UserError("mask steps must be >= 0 and n_samples >= 1")
        if self.learning_rate <= 0 or self.alpha < 0 or self.temperature <= 0 or self.grad_clip < 0:
            raise UserError("mask learning_rate and temperature must be > 0, alpha and grad_clip >= 0")
        logit(self.keep_probability)
        if self.application not in APPLICATIONS:
            hint = choices_hint(self.application, APPLICATIONS)
            raise UserError(f"unknown mask application {self.application!r}; {hint}")


Batch = tuple[Sequence[torch.Tensor], torch.Tensor]
LossFunction = Callable[[ModelOutput, torch.Tensor], torch.Tensor]


@dataclass
class MaskTrainingResult:
    mask: WeightMask
    binary: MaskSet
    task_losses: list[float]  # target-task loss per step (mean over the samples' slices)
    kept_fraction: list[float]  # expected kept fraction, mean sigma(l), per step


def train_weight_mask(
    model: nn.Module,
    batches: Iterable[Batch],
    loss_fn: LossFunction,
    config: MaskTrainingConfig,
    *,
    seed: int = 0,
    mask: WeightMask | None = None,
    fixed: MaskSet | None = None,
    description: str = "weight mask",
) -> MaskTrainingResult:
    """Train a mask for the target function the ``batches`` define, on the frozen ``model``.

    ``batches`` yields ``(inputs, targets)``: ``inputs`` the positional arguments of ``model`` (each
    with the batch on dim 0), ``targets`` whatever ``loss_fn(outputs, targets)`` expects. The model
    runs in eval mode (no dropout) and its parameters receive no gradient; its train/eval mode is
    restored at the end. ``mask`` continues training existing logits instead of fresh ones.

    ``fixed``: binary masks of parameters that are not learned (thesis 3.4: the output layer, fixed to
    the control mask's). They are left out of the learned logits, every sample applies them unchanged,
    and the result's ``binary`` contains them, so :class:`MaskedModel` evaluates the whole mask.

    ``description`` labels the progress output over the steps
    (:func:`recombine.experiments.progress.training_bar`)."""
    from recombine.experiments.progress import training_bar  # not at the top: the package imports us

    fixed_masks = dict(fixed.masks) if fixed is not None else {}
    parameters = dict(model.named_parameters())
    for name, fixed_mask in fixed_masks.items():
        if name not in parameters:
            raise UserError(f"the model has no parameter {name!r}; {choices_hint(name, parameters)}")
        if fixed_mask.shape != parameters[name].shape:
            shapes = f"{tuple(fixed_mask.shape)} vs {tuple(parameters[name].shape)}"
            raise UserError(f"the fixed mask of {name!r} has the wrong shape: {shapes}")
    if mask is None:
        names = config.names
        if names is None:
            names = maskable_parameter_names(model, biases=config.biases, embeddings=config.embeddings)
        mask = WeightMask.for_model(
            model,
            [name for name in names if name not in fixed_masks],
            keep_probability=config.keep_probability,
        )
    elif set(mask.names) & set(fixed_masks):
        raise UserError(f"parameters both learned and fixed: {sorted(set(mask.names) & set(fixed_masks))}")
    device = next(model.parameters()).device
    mask = mask.to(device)
    fixed_samples = {
        name: m.to(device=device, dtype=parameters[name].dtype).expand(config.n_samples, *m.shape)
        for name, m in fixed_masks.items()
    }
    generator = torch.Generator(device=device).manual_seed(seed)
    optimizer = torch.optim.Adam(mask.parameters(), lr=config.learning_rate)
    n_weights = sum(l.numel() for l in mask.logits)
    was_training = model.training
    model.eval()
    task_losses: list[float] = []
    kept: list[float] = []
    iterator = iter(batches)
    bar = training_bar(config.steps, description)
    try:
        for step in range(config.steps):
            try:
                inputs, targets = next(iterator)
            except StopIteration:
                raise UserError(f"the batches ran out after {step} of {config.steps} mask steps") from None
            samples = {**mask.sample(config.n_samples, config.temperature, generator), **fixed_samples}
            outputs = forward_with_mask_samples(
                model,
                samples,
                inputs,
                application=config.application,  # type: ignore[arg-type]
            )
            task_loss = loss_fn(outputs, targets)
            loss = task_loss + config.alpha * mask.regularizer()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(mask.parameters(), config.grad_clip)
            optimizer.step()
            task_losses.append(float(task_loss.detach()))
            with torch.no_grad():
                kept.append(float(sum(torch.sigmoid(l).sum() for l in mask.logits)) / n_weights)
            bar.update()
    finally:
        bar.close()
        model.train(was_training)
    binary = mask.binary()
    if fixed_masks:  # learned and fixed parts together, in the model's parameter order
        learned = binary.masks
        binary = MaskSet(
            {
                name: learned[name] if name in learned else fixed_masks[name].cpu().clone()
                for name in parameters
                if name in learned or name in fixed_masks
            }
        )
    return MaskTrainingResult(mask=mask, binary=binary, task_losses=task_losses, kept_fraction=kept)
