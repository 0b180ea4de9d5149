"""The scripted reproductions ``dnc-repeat-copy`` and ``dnc-assoc-recall`` (thesis 2.3, Figs. 2.2a-2.4):
steps-to-threshold and the chance loss against independent references, config resolution, and a tiny
end-to-end run of each through the scripted-reproduction machinery."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from recombine.errors import UserError
from recombine.experiments.dnc_memory import (
    DNC_ASSOC_RECALL,
    DNC_REPEAT_COPY,
    DNCRepeatCopyConfig,
    batch_loss,
    chance_loss,
    steps_to_threshold,
)
from recombine.experiments.dnc_trial_checkpoint import load_training_state, save_training_state
from recombine.experiments.scripted_reproduction import ScriptedReproduction, is_complete, run_scripted
from recombine.tasks.memory_tasks import AssociativeRecallConfig, RepeatedCopyConfig, sample_batch
from tiny_dnc import TINY_DNC_REPRODUCTION

REPEAT_COPY, ASSOC_RECALL = DNC_REPEAT_COPY, DNC_ASSOC_RECALL
TINY = TINY_DNC_REPRODUCTION


def naive_steps_to_threshold(loss: np.ndarray, threshold: float, smooth: int) -> int | None:
    for end in range(smooth, len(loss) + 1):  # the average of steps end-smooth+1 .. end (1-based)
        if sum(loss[end - smooth : end]) / smooth < threshold:
            return end
    return None


def test_steps_to_threshold_matches_a_loop() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        loss = np.cumsum(rng.normal(-0.1, 1.0, size=60)) + 5
        threshold, smooth = float(rng.uniform(-3, 5)), int(rng.integers(1, 12))
        assert steps_to_threshold(loss, threshold, smooth) == naive_steps_to_threshold(
            loss, threshold, smooth
        )
    assert steps_to_threshold(np.array([3.0, 1.0, 0.0]), 2.5, 2) == 2  # (3 + 1) / 2 = 2 < 2.5
    assert steps_to_threshold(np.ones(10), 0.5, 3) is None
    short = np.array([0.1, 0.1])  # fewer steps than the window: no window average exists
    assert steps_to_threshold(short, 1.0, 5) is None and naive_steps_to_threshold(short, 1.0, 5) is None


@pytest.mark.parametrize(
    "task",
    [AssociativeRecallConfig(width=3, block_words=2, blocks_range=(2, 5)), RepeatedCopyConfig(width=4)],
)
def test_chance_loss_is_the_loss_of_predicting_one_half(
    task: AssociativeRecallConfig | RepeatedCopyConfig,
) -> None:
    """Zero logits predict p = 1/2 for every answer bit: BCE ln 2 per bit (the trainer's own loss)."""
    batch = sample_batch(task, 256, np.random.default_rng([0, 2]))
    zeros = torch.zeros(batch.targets.shape, dtype=torch.float64)
    assert chance_loss(task) == pytest.approx(float(batch_loss(zeros, batch, "output_steps")), rel=1e-9)
    assert chance_loss(task) > math.log(2) * task.output_size  # at least one answer step per sequence


def test_configs_resolve_for_the_cli_and_reject_bad_values() -> None:
    config = REPEAT_COPY.resolve_config(2, True, {})
    assert config.seeds == [0, 1] and config.steps == 40 and config.variants == ["dnc", "dnc_ds", "dnc_mds"]
    assert config.task().exceed_memory == config.n_cells  # always more words than memory cells
    recall = ASSOC_RECALL.resolve_config(None, False, {"width": 5})
    assert recall.variants == ["dnc", "dnc_m"] and recall.task().width == 5 and recall.seeds == [0, 1, 2]
    with pytest.raises(UserError, match="unknown DNC variant"):
        ASSOC_RECALL.resolve_config(None, False, {"variants": ["dnc", "dnc_x"]})
    with pytest.raises(UserError, match="stepz"):
        REPEAT_COPY.resolve_config(None, False, {"stepz": 3})
    with pytest.raises(UserError, match="exceed_memory"):  # 1 x 2 words can never exceed 6 cells
        DNCRepeatCopyConfig(max_length=1, max_repeats=2)


@pytest.mark.parametrize(
    ("reproduction", "n_seeds", "variants"),
    [(REPEAT_COPY, 2, ["dnc_ds"]), (ASSOC_RECALL, 1, ["dnc", "dnc_m"])],  # two small runs each
    ids=["dnc-repeat-copy", "dnc-assoc-recall"],
)
def test_a_tiny_run_writes_the_report_results_and_figures(
    reproduction: ScriptedReproduction, n_seeds: int, variants: list[str], tmp_path: Path
) -> None:
    out = tmp_path / reproduction.name
    overrides = {**TINY, "variants": variants}
    report = run_scripted(reproduction, out, seeds=n_seeds, overrides=overrides)
    assert is_complete(out)
    config = reproduction.resolve_config(n_seeds, False, overrides)
    results = json.loads((out / "results.json").read_text())
    assert results["reproduction"] == reproduction.name
    assert set(results["runs"]) == set(config.variants)
    threshold = results["loss_threshold"]
    assert threshold == pytest.approx(config.threshold_fraction * chance_loss(config.task()))
    text = report.read_text()
    for variant, runs in results["runs"].items():
        assert [run["seed"] for run in runs] == list(range(n_seeds))
        for run in runs:
            assert len(run["train_loss"]) == TINY["steps"] and run["eval_steps"] == [0, TINY["steps"]]
            expected = naive_steps_to_threshold(np.array(run["train_loss"]), threshold, TINY["smooth"])
            assert run["steps_to_threshold"] == expected
        assert f"| {variant} |" in text
        for run in runs:
            assert run["exact_at_end"] == (run["eval_sequence_accuracy"][-1] == 1.0)
        assert (out / f"trace_{variant}.png").stat().st_size > 0
    figures = [line[line.index("(") + 1 : -1] for line in text.splitlines() if line.startswith("![")]
    assert figures and all((out / name).is_file() for name in figures)
    assert (out / "links.png").is_file() == (reproduction is REPEAT_COPY)


def test_the_report_counts_seeds_exact_at_the_end_separately_from_the_threshold() -> None:
    """Two seeds below the loss threshold, one of them wrong in one bit of one evaluation sequence: the
    threshold counts both, "exact at the end" (the thesis's zero error) only the other; an earlier exact
    evaluation does not count."""
    from recombine.experiments.dnc_memory import (
        MemoryTrainResult,
        VariantComparison,
        build_sequence_dnc,
        render_dnc_report,
        small_dnc,
    )

    config = REPEAT_COPY.resolve_config(2, False, {**TINY, "variants": ["dnc_ds"]})
    model = build_sequence_dnc(config.task(), small_dnc("dnc_ds"))

    def run(final_accuracy: float, final_bit_error: float) -> MemoryTrainResult:
        accuracy = np.array([0.0, 1.0, final_accuracy])  # exact at the middle evaluation in both seeds
        bit_error = np.array([0.5, 0.0, final_bit_error])
        loss = np.array([100.0, 0.01, 0.1])
        return MemoryTrainResult(model, np.ones(4), np.array([0, 2, 4]), loss, bit_error, accuracy, 1.0)

    one_bit = 1 / (64 * 8 * 4)  # one wrong bit among 64 sequences of 4 answer words of 8 bits
    comparison = VariantComparison({"dnc_ds": [run(1.0, 0.0), run(63 / 64, one_bit)]}, None, {}, None)
    text = render_dnc_report(config, "repeated copy", comparison, 10.0, {"dnc_ds": [2, 3]}, [])
    row = next(line for line in text.splitlines() if line.startswith("| dnc_ds |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    header = next(line for line in text.splitlines() if line.startswith("| variant |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert len(cells) == len(columns)
    assert cells[columns.index("seeds reaching it")] == "2/2"
    assert cells[columns.index("seeds exact at the end")] == "1/2"


def test_runs_of_different_variants_into_one_directory_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two reproductions of one variant each, one after the other, then one of both variants:
    the last trains nothing, reads both runs back with their curves and weights, and reports both."""
    out = tmp_path / "repeat-copy"
    for variant in ["dnc", "dnc_ds"]:
        run_scripted(REPEAT_COPY, out, seeds=1, overrides={**TINY, "variants": [variant]})
    single = json.loads((out / "results.json").read_text())
    lines = (out / "trials.jsonl").read_text().splitlines()
    assert len(lines) == 2
    capsys.readouterr()
    report = run_scripted(REPEAT_COPY, out, seeds=1, overrides={**TINY, "variants": ["dnc", "dnc_ds"]})
    log = capsys.readouterr().err
    assert log.count("from ") == 2 and "final eval loss" not in log  # both read back, none trained
    assert (out / "trials.jsonl").read_text().splitlines() == lines
    both = json.loads((out / "results.json").read_text())
    assert both["runs"]["dnc_ds"] == single["runs"]["dnc_ds"]  # same curves, same seconds
    assert "| dnc |" in report.read_text() and "| dnc_ds |" in report.read_text()
    # another training setting is another run: trained, and kept next to the others
    run_scripted(REPEAT_COPY, out, seeds=1, overrides={**TINY, "variants": ["dnc"], "steps": 4})
    assert len((out / "trials.jsonl").read_text().splitlines()) == 3
    assert "final eval loss" in capsys.readouterr().err


def test_a_stored_run_gives_back_the_trained_model(tmp_path: Path) -> None:
    import dataclasses

    from recombine.experiments.dnc_memory import (
        MemoryTrainConfig,
        StoredTrials,
        model_inputs,
        small_dnc,
        small_repeated_copy,
        train_memory_task,
    )

    task, model = small_repeated_copy(), small_dnc("dnc_mds")
    train = MemoryTrainConfig(steps=2, batch_size=2, eval_every=2, eval_size=2, optimizer="adam", lr=1e-2)
    trained = train_memory_task(task, model, train)
    store = StoredTrials(tmp_path)
    assert store.load(task, model, train) is None
    store.save(task, model, train, trained)
    loaded = store.load(task, model, train)
    assert loaded is not None and loaded.seconds == trained.seconds
    np.testing.assert_array_equal(loaded.train_loss, trained.train_loss)
    inputs = model_inputs(sample_batch(task, 3, np.random.default_rng(5)).inputs)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(inputs)[0], trained.model(inputs)[0], rtol=0, atol=0)
    for name in ("eval_steps", "eval_loss", "eval_bit_error", "eval_sequence_accuracy"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(trained, name))
    assert store.load(task, small_dnc("dnc"), train) is None  # another variant is not this run
    assert store.load(dataclasses.replace(task, width=task.width + 1), model, train) is None  # another task
    # compiling and the thread count change only float rounding: the stored run stands for them too
    compiled = dataclasses.replace(model, compile_steps=True)
    assert store.load(task, compiled, dataclasses.replace(train, threads=2)) is not None


def test_an_unreadable_stored_run_is_trained_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "repeat-copy"
    overrides = {**TINY, "variants": ["dnc"]}
    run_scripted(REPEAT_COPY, out, seeds=1, overrides=overrides)
    (stored,) = (out / "trials").glob("*.pt")
    first = json.loads((out / "results.json").read_text())["runs"]["dnc"][0]["train_loss"]
    stored.write_bytes(stored.read_bytes()[:100])  # cut short, as by a full disk
    (out / "experiment.done").unlink()
    capsys.readouterr()
    run_scripted(REPEAT_COPY, out, seeds=1, overrides=overrides)
    log = capsys.readouterr().err
    assert "cannot be read" in log and "final eval loss" in log  # said so, and trained again
    assert json.loads((out / "results.json").read_text())["runs"]["dnc"][0]["train_loss"] == first
    torch.load(stored, weights_only=True)  # written anew


def _without_seconds(results: dict[str, Any]) -> dict[str, Any]:
    return {
        variant: [{k: v for k, v in run.items() if k != "seconds"} for run in runs]
        for variant, runs in results["runs"].items()
    }


def test_a_run_killed_midway_continues_from_its_last_evaluation(tmp_path: Path) -> None:
    """SIGKILL a reproduction once its first mid-run checkpoint exists, start it again: it resumes from that
    checkpoint (the evaluations before it are not recomputed) and ends with exactly the curves of an
    uninterrupted run; the checkpoint is removed once the run is stored."""
    overrides = {**TINY, "steps": 120, "eval_every": 10, "variants": ["dnc_ds"]}
    reference = tmp_path / "reference"
    run_scripted(REPEAT_COPY, reference, seeds=1, overrides=overrides)

    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "recombine", "reproduce", "dnc-repeat-copy", "--seeds", "1", "--out"]
    command += [str(killed), *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    partial = killed / "trials" / "partial"
    while not (partial.is_dir() and any(partial.glob("*.pt"))):
        assert proc.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if (killed / "trials.jsonl").exists():
        pytest.skip("the run finished before it could be killed (machine too fast for this test)")
    (checkpoint,) = partial.glob("*.pt")
    resumed_from = load_training_state(checkpoint)
    assert resumed_from is not None and 0 < resumed_from.step < 120
    # mark the checkpoint's seconds: a run that starts over instead of resuming cannot carry them
    resumed_from.seconds = 1e6
    save_training_state(checkpoint, resumed_from)

    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((killed / "results.json").read_text())
    assert results["runs"]["dnc_ds"][0]["seconds"] >= 1e6
    assert _without_seconds(results) == _without_seconds(json.loads((reference / "results.json").read_text()))
    assert not any(partial.glob("*.pt"))


def test_a_checkpoint_that_does_not_fit_the_run_is_said_and_the_run_starts_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint of another model (here: weights of other shapes) under a run's name is not loaded half:
    one line on stderr, and the run trains from the start to the curves of a run without it."""
    from recombine.experiments.dnc_memory import (
        MemoryTrainConfig,
        small_dnc,
        small_repeated_copy,
        train_memory_task,
    )

    task = small_repeated_copy()
    train = MemoryTrainConfig(steps=6, batch_size=2, eval_every=2, eval_size=2, optimizer="adam", lr=1e-2)
    reference = train_memory_task(task, small_dnc("dnc"), train)
    checkpoint = tmp_path / "partial.pt"
    train_memory_task(
        task, dataclasses.replace(small_dnc("dnc"), d_controller=8), train, checkpoint=checkpoint
    )
    state = load_training_state(checkpoint)
    assert state is not None and state.step == 4  # the last evaluation before the end
    capsys.readouterr()
    again = train_memory_task(task, small_dnc("dnc"), train, checkpoint=checkpoint)
    assert "cannot be resumed" in capsys.readouterr().err
    np.testing.assert_array_equal(again.train_loss, reference.train_loss)
    np.testing.assert_array_equal(again.eval_loss, reference.eval_loss)


def test_a_run_with_more_steps_continues_the_kept_shorter_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reproduction with ``steps=12`` into a directory holding the 5-step run of the same settings trains
    only steps 6-12 and ends with exactly the curves of a 12-step run trained from the start (the 5-step
    run's last evaluation, off the every-3-steps schedule, is not among them); a kept run without its final
    state (as stored before runs kept it) is said and the longer run starts over."""
    overrides = {**TINY, "eval_every": 3, "variants": ["dnc_ds"]}
    reference = tmp_path / "reference"
    run_scripted(REPEAT_COPY, reference, seeds=1, overrides={**overrides, "steps": 12})
    expected = _without_seconds(json.loads((reference / "results.json").read_text()))

    continued = tmp_path / "continued"
    run_scripted(REPEAT_COPY, continued, seeds=1, overrides={**overrides, "steps": 5})
    (short_file,) = (continued / "trials").glob("*.pt")
    stored = torch.load(short_file, weights_only=True)
    stored["training_state"]["seconds"] = 1e6  # mark it: only a continued run carries these seconds
    torch.save(stored, short_file)
    capsys.readouterr()
    run_scripted(REPEAT_COPY, continued, seeds=1, overrides={**overrides, "steps": 12})
    assert "continuing the stored 5-step run to 12 steps" in capsys.readouterr().err
    results = json.loads((continued / "results.json").read_text())
    assert results["runs"]["dnc_ds"][0]["seconds"] >= 1e6
    assert _without_seconds(results) == expected
    assert len((continued / "trials.jsonl").read_text().splitlines()) == 2  # both runs kept

    without_state = tmp_path / "without-state"
    run_scripted(REPEAT_COPY, without_state, seeds=1, overrides={**overrides, "steps": 5})
    (short_file,) = (without_state / "trials").glob("*.pt")
    stored = torch.load(short_file, weights_only=True)
    del stored["training_state"]
    torch.save(stored, short_file)
    capsys.readouterr()
    run_scripted(REPEAT_COPY, without_state, seeds=1, overrides={**overrides, "steps": 12})
    log = capsys.readouterr().err
    assert "was kept without its training state" in log and "continuing" not in log
    assert _without_seconds(json.loads((without_state / "results.json").read_text())) == expected


def test_an_unreadable_checkpoint_of_the_longer_run_falls_back_on_the_shorter_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The longer run's own checkpoint comes first; when it cannot be read (cut short), the kept shorter run
    is continued instead of training from step 0, and the state handed in is not changed by the training."""
    from recombine.experiments.dnc_memory import (
        MemoryTrainConfig,
        StoredTrials,
        small_dnc,
        small_repeated_copy,
        train_memory_task,
    )

    task, model = small_repeated_copy(), small_dnc("dnc")
    train = MemoryTrainConfig(steps=8, batch_size=2, eval_every=2, eval_size=2)  # RMSprop: momentum buffers
    reference = train_memory_task(task, model, train)
    short = train_memory_task(task, model, dataclasses.replace(train, steps=4))
    assert short.final_state is not None
    store = StoredTrials(tmp_path)
    store.save(task, model, dataclasses.replace(train, steps=4), short)
    found = store.shorter_run(task, model, train)
    assert found is not None and found.state.step == 4
    moments_before = {k: v.clone() for k, v in found.state.optimizer["state"][0].items()}
    checkpoint = store.partial_path(task, model, train)
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"cut short")
    capsys.readouterr()
    continued = train_memory_task(task, model, train, checkpoint=checkpoint, continue_from=found)
    log = capsys.readouterr().err
    assert "cannot be resumed" in log and "continuing the stored 4-step run to 8 steps" in log
    np.testing.assert_array_equal(continued.train_loss, reference.train_loss)
    np.testing.assert_array_equal(continued.eval_loss, reference.eval_loss)
    for name, value in found.state.optimizer["state"][0].items():
        torch.testing.assert_close(value, moments_before[name], rtol=0, atol=0)
    # a state of another model (weights of other shapes) is said in one line, and the run starts over
    capsys.readouterr()
    again = train_memory_task(task, dataclasses.replace(model, d_controller=8), train, continue_from=found)
    log = capsys.readouterr().err.splitlines()
    assert len(log) == 2 and "cannot be resumed" in log[0] and log[1] == "training dnc seed 0 from the start"
    assert again.eval_steps.tolist() == reference.eval_steps.tolist()


def test_keys_the_configs_cannot_hold_are_skipped_not_fatal(tmp_path: Path) -> None:
    """A trials.jsonl line whose key names a field the configs no longer have (renamed since it was kept), or
    that is no JSON at all, is passed over when the store lists its runs or looks for a shorter one."""
    from recombine.experiments.dnc_memory import (
        STORE_VERSION,
        MemoryTrainConfig,
        StoredTrials,
        small_dnc,
        small_repeated_copy,
    )

    task, model, train = small_repeated_copy(), small_dnc("dnc"), MemoryTrainConfig(steps=8)
    store = StoredTrials(tmp_path)
    stale = json.loads(store.key(task, model, dataclasses.replace(train, steps=4)))
    assert stale["version"] == STORE_VERSION
    stale["train"]["renamed_field"] = stale["train"].pop("grad_clip")
    store.log.add(json.dumps(stale), {"file": "trials/missing.pt"})
    store.log.add("not json", {"file": "trials/missing.pt"})
    assert store.finished() == []
    assert store.shorter_run(task, model, train) is None


def test_runs_trained_side_by_side_equal_runs_trained_one_after_another(tmp_path: Path) -> None:
    """``--jobs 2`` (config field ``jobs``): the runs train in two worker processes, this process keeps them
    as they finish, and the curves equal those of the same reproduction run one run at a time."""
    overrides = {**TINY, "steps": 6, "variants": ["dnc", "dnc_ds"], "seeds": [0, 1]}
    one_by_one, side_by_side = tmp_path / "one-by-one", tmp_path / "side-by-side"
    run_scripted(REPEAT_COPY, one_by_one, overrides=overrides)
    command = [sys.executable, "-m", "recombine", "reproduce", "dnc-repeat-copy", "--jobs", "2", "--out"]
    command += [str(side_by_side), *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    finished = subprocess.run(command, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr.count("final eval loss") == 4  # four runs trained, none read back
    results = json.loads((side_by_side / "results.json").read_text())
    assert results["config"]["jobs"] == 2
    assert _without_seconds(results) == _without_seconds(
        json.loads((one_by_one / "results.json").read_text())
    )
    assert len((side_by_side / "trials.jsonl").read_text().splitlines()) == 4


def test_with_jobs_the_runs_train_in_worker_processes(tmp_path: Path) -> None:
    """A run sets its process's torch thread count (``threads``): with ``jobs=2`` this process's count stays
    as it was, so the runs trained elsewhere; with ``jobs=1`` it is the run's."""
    before = torch.get_num_threads()
    try:
        for jobs, expected in [(2, 2), (1, 1)]:
            torch.set_num_threads(2)
            overrides = {**TINY, "variants": ["dnc", "dnc_ds"], "seeds": [0], "threads": 1, "jobs": jobs}
            run_scripted(REPEAT_COPY, tmp_path / f"jobs-{jobs}", overrides=overrides)
            assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)


def test_a_failed_run_stops_the_runs_training_beside_it(tmp_path: Path) -> None:
    """With ``--jobs 2``, one run fails at its first checkpoint (its checkpoint path is a directory) while the
    other has 200,000 steps ahead of it: the reproduction ends with the failure instead of waiting for the
    other run, and nothing of either run is kept."""
    from recombine.experiments.dnc_memory import StoredTrials, model_and_train_configs

    out = tmp_path / "failing"
    overrides = {**TINY, "steps": 200_000, "eval_every": 10, "variants": ["dnc", "dnc_ds"], "seeds": [0]}
    config = REPEAT_COPY.resolve_config(None, False, overrides)
    model, train = model_and_train_configs(config)
    failing = StoredTrials(out).partial_path(config.task(), model, dataclasses.replace(train, seed=0))
    failing.mkdir(parents=True)  # the run of variant dnc cannot write its checkpoint
    command = [sys.executable, "-m", "recombine", "reproduce", "dnc-repeat-copy", "--jobs", "2", "--out"]
    command += [str(out), *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    started = time.monotonic()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
    # the sibling alone needs far longer than this (200,000 steps at >= 2 ms each)
    assert time.monotonic() - started < 300
    assert finished.returncode != 0 and "Is a directory" in finished.stderr.splitlines()[-1]
    assert not (out / "trials.jsonl").exists()
