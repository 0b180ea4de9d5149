"""``recombine probe dnc-errors``: bit errors by answer position, against a plain loop over sequences and
steps, and summing to the bit error the evaluation reports on the same sequences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dnc_in_progress import stopped_reproduction
from recombine.cli import main
from recombine.experiments.dnc_memory import evaluate
from recombine.probes.dnc_position_errors import answer_position_errors, position_errors, probe_batch
from recombine.probes.dnc_stored_trace import load_checkpoint_model, load_model
from recombine.tasks.memory_tasks import MemoryTaskBatch


def test_errors_by_answer_position_against_a_loop() -> None:
    rng = np.random.default_rng(0)
    batch_size, steps, outputs = 5, 9, 3
    loss_mask = rng.random((batch_size, steps)) < 0.5
    loss_mask[0] = False  # a sequence with no scored step
    loss_mask[1] = True  # one scored everywhere: the longest
    batch = MemoryTaskBatch(
        inputs=np.zeros((batch_size, steps, 2), dtype=np.float32),
        targets=(rng.random((batch_size, steps, outputs)) < 0.5).astype(np.float32),
        loss_mask=loss_mask,
        lengths=np.full(batch_size, steps),
    )
    logits = torch.randn(batch_size, steps, outputs)
    wrong, bits = answer_position_errors(logits, batch)

    expected_wrong, expected_bits = np.zeros(steps, dtype=int), np.zeros(steps, dtype=int)
    for b in range(batch_size):
        k = 0
        for t in range(steps):
            if not loss_mask[b, t]:
                continue
            for y in range(outputs):
                predicted = 1.0 if logits[b, t, y] > 0 else 0.0
                expected_wrong[k] += predicted != batch.targets[b, t, y]
                expected_bits[k] += 1
            k += 1
    assert wrong.tolist() == expected_wrong.tolist()
    assert bits.tolist() == expected_bits.tolist()


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dnc") / "repro"
    stopped_reproduction(out)
    return out


def test_every_run_sums_to_its_bit_error_on_the_probe_sequences(reproduction: Path) -> None:
    results = position_errors(reproduction, sequences=70, seed=3)  # two chunks of the batch
    assert [(r.run.train.seed, r.run.at_step) for r in results] == [(0, None), (1, 3)]
    for result in results:
        run = result.run
        model = (
            load_model(reproduction, run)
            if run.at_step is None
            else load_checkpoint_model(reproduction, run)[0]
        )
        batch = probe_batch(run.task, 70, 3)
        assert result.bit_error == pytest.approx(evaluate(model, batch).bit_error, abs=1e-9)
        assert result.sequences[0] == 70  # every sequence has a first answer step
        answers = batch.loss_mask.sum(1)
        assert len(result.bits) == int(answers.max())
        assert result.sequences.tolist() == [int((answers > k).sum()) for k in range(len(result.bits))]


def test_cli_table_and_figure(reproduction: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figure = tmp_path / "errors.png"
    assert (
        main(
            ["probe", "dnc-errors", str(reproduction), "--sequences", "8", "--bin", "2", "--out", str(figure)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert figure.read_bytes()[:4] == b"\x89PNG"
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "bit", "error", "0-1"]
    assert lines[3].split()[:3] == ["sequences", "8", "8"]  # all 8 reach positions 0-1
    assert any(line.startswith("dnc_ds seed 0 (6 steps)") for line in lines)
    assert any(line.startswith("dnc_ds seed 1 (step 3)") for line in lines)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--sequences", "0"], "--sequences must be >= 1"),
        (["--sequence-seed", "-1"], "--sequence-seed must be >= 0"),
        (["--bin", "0"], "--bin and --min-sequences must be >= 1"),
        (["--min-sequences", "0"], "--bin and --min-sequences must be >= 1"),
        (["--out", "errors.txt"], "--out must end in one of"),
    ],
)
def test_bad_arguments_are_one_line(
    reproduction: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "dnc-errors", str(reproduction), *arguments]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err
