"""Train a DNC variant on bAbI (thesis 2.3, Tab. 2.1) and score it by per-task error rate.

The stories come from :mod:`recombine.tasks.babi` (official files from a user path; one story is one
sequence, with thinking steps before each answer). The model embeds each input word ("a word embedding
layer, instead of one-hot input representation", thesis 2.3), runs the DNC over the sequence and reads an
answer word out at every step; the loss is the cross-entropy at the answer steps only. Stories are
drawn uniformly from all configured tasks (joint training, as in the thesis). The thesis trains for
0.5M iterations with batch size 2 on a GPU; at CPU scale expect far fewer steps and higher errors.

    from recombine.tasks.babi import BabiConfig, build_babi
    from recombine.experiments.dnc_babi import BabiRunConfig, train_babi
    data = build_babi(BabiConfig(data_dir="data/babi/en-valid-10k"))
    result = train_babi(data, BabiRunConfig(steps=20000))
    result.test_errors, result.summary   # per-task error, {"mean_error", "failed_tasks", "solved"}
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recombine.errors import UserError
from recombine.experiments.dnc_memory import DNCSequenceConfig, MemoryTrainConfig, make_optimizer
from recombine.models.dnc import DNC
from recombine.tasks.babi import NO_TARGET, BabiData, BabiSequences, error_rates, summarise_errors


@dataclass
class BabiRunConfig:
    model: DNCSequenceConfig = field(
        default_factory=lambda: DNCSequenceConfig(
            variant="dnc_md", d_controller=256, n_cells=64, cell_width=32
        )
    )
    d_embedding: int = 64  # E of thesis 2.3
    train: MemoryTrainConfig = field(
        default_factory=lambda: MemoryTrainConfig(steps=2000, batch_size=2, optimizer="rmsprop", lr=1e-4)
    )
    eval_stories: int = (
        256  # valid stories scored at every evaluation, spread over the tasks (all test stories at the end)
    )

    def __post_init__(self) -> None:
        if self.d_embedding < 1 or self.eval_stories < 1:
            raise UserError("d_embedding and eval_stories must be >= 1")


class BabiDNC(nn.Module):
    """Word embedding -> DNC -> answer logits at every step: ``[B, T]`` ids -> ``[B, T, n_answers]``."""

    def __init__(self, n_words: int, n_answers: int, d_embedding: int, config: DNCSequenceConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_words, d_embedding)
        self.dnc = DNC(d_embedding, n_answers, config.d_controller, config.memory_config())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dnc(self.embedding(tokens))[0]


def padded_batch(sequences: BabiSequences, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``[B, T]`` right-padded with word 0 (``<pad>``) and targets ``[B, T]`` padded with
    ``NO_TARGET``. The DNC is causal, so padding after a story changes none of its outputs."""
    length = max(len(sequences.inputs[i]) for i in indices)
    inputs = np.zeros((len(indices), length), dtype=np.int64)
    targets = np.full((len(indices), length), NO_TARGET, dtype=np.int64)
    for row, i in enumerate(indices):
        inputs[row, : len(sequences.inputs[i])] = sequences.inputs[i]
        targets[row, : len(sequences.targets[i])] = sequences.targets[i]
    return torch.as_tensor(inputs), torch.as_tensor(targets)


def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the answer steps."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=NO_TARGET)


@torch.no_grad()
def predict(
    model: BabiDNC, sequences: BabiSequences, indices: np.ndarray, batch_size: int = 32
) -> list[np.ndarray]:
    """The argmax answer at every step of each story in ``indices``."""
    model.eval()
    predictions: list[np.ndarray] = []
    for start in range(0, len(indices), batch_size):
        chunk = indices[start : start + batch_size]
        inputs, _ = padded_batch(sequences, chunk)
        argmax = model(inputs).argmax(-1).numpy()
        predictions += [argmax[row, : len(sequences.inputs[i])] for row, i in enumerate(chunk)]
    return predictions


def per_task_sample(tasks: np.ndarray, n: int) -> np.ndarray:
    """Indices of the first ``ceil(n / n_tasks)`` stories of every task in ``tasks`` (in order), so that
    an evaluation on at most ``n`` stories covers every task, not only the first ones read."""
    present = np.unique(tasks)
    if len(present) == 0:
        return np.zeros(0, dtype=np.int64)
    each = -(-n // len(present))
    return np.sort(np.concatenate([np.flatnonzero(tasks == task)[:each] for task in present]))


def _subset(sequences: BabiSequences, indices: np.ndarray) -> BabiSequences:
    return BabiSequences(
        [sequences.inputs[i] for i in indices],
        [sequences.targets[i] for i in indices],
        sequences.tasks[indices],
    )


@dataclass
class BabiTrainResult:
    model: BabiDNC
    train_loss: np.ndarray  # [steps]
    eval_steps: list[int]
    valid_mean_error: list[float]  # mean over tasks on per_task_sample(valid, eval_stories), at eval_steps
    test_errors: dict[int, float]  # per task, all test stories, at the end
    summary: dict[str, object]  # summarise_errors(test_errors)
    seconds: float


def train_babi(data: BabiData, config: BabiRunConfig | None = None) -> BabiTrainResult:
    """Train one DNC on the train stories; deterministic given the config."""
    config = config or BabiRunConfig()
    train = config.train
    if train.threads:
        torch.set_num_threads(train.threads)
    torch.manual_seed(train.seed)
    rng = np.random.default_rng([train.seed, 3])
    model = BabiDNC(len(data.words), len(data.answers), config.d_embedding, config.model)
    optimizer = make_optimizer(model, train)
    stories = data.parts["train"]
    if not stories.inputs:
        raise UserError("bAbI has no training stories for the configured tasks")
    valid = data.parts["valid"]
    valid_indices = per_task_sample(valid.tasks, config.eval_stories)

    def valid_error() -> float:
        rates = error_rates(predict(model, valid, valid_indices), _subset(valid, valid_indices))
        return float(np.mean(list(rates.values()))) if rates else float("nan")

    start = time.perf_counter()
    eval_steps, valid_mean_error = [0], [valid_error()]
    train_loss = np.zeros(train.steps)
    for step in range(train.steps):
        model.train()
        inputs, targets = padded_batch(stories, rng.integers(0, len(stories.inputs), train.batch_size))
        loss = answer_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
        train_loss[step] = loss.item()
        if (step + 1) % train.eval_every == 0 or step + 1 == train.steps:
            eval_steps.append(step + 1)
            valid_mean_error.append(valid_error())
    test = data.parts["test"]
    test_indices = np.arange(len(test.inputs))
    test_errors = error_rates(predict(model, test, test_indices), test)
    return BabiTrainResult(
        model,
        train_loss,
        eval_steps,
        valid_mean_error,
        test_errors,
        summarise_errors(test_errors),
        time.perf_counter() - start,
    )
