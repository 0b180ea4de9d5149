"""Scripted reproductions: config layering, every registered one resolves, and the CLI end to end."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from recombine.cli import main
from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS
from recombine.experiments.scripted_reproduction import (
    CONFIG_FILE,
    ScriptedRecipe,
    ScriptedReproduction,
    run_scripted,
    scripted_recipe,
)


@dataclass
class Inner:
    steps: int = 100
    lr: float = 0.1


@dataclass
class ToyConfig:
    inner: Inner = field(default_factory=Inner)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    label: str = "default"


def toy_run(out: Path, config: ToyConfig) -> dict[str, Any]:
    """A real (trivial) experiment: the 'accuracy' of seed s is s / steps."""
    results = {str(seed): seed / config.inner.steps for seed in config.seeds}
    (out / "results.json").write_text(json.dumps(results))
    summary = f"{len(config.seeds)} seeds, {config.inner.steps} steps"
    (out / "report.md").write_text(f"# toy {config.label}: {summary}\n")
    return results


TOY = ScriptedReproduction(
    "toy",
    "a toy",
    "nowhere",
    ToyConfig,
    toy_run,
    defaults={"inner": {"steps": 50}, "label": "published"},
    quick={"inner": {"steps": 5}},
)


def test_layers_apply_in_order_defaults_quick_seeds_overrides() -> None:
    assert TOY.resolve_config(None, False, {}) == ToyConfig(Inner(50, 0.1), [0, 1, 2], "published")
    assert TOY.resolve_config(None, True, {}).inner.steps == 5
    assert TOY.resolve_config(2, True, {}).seeds == [0, 1]
    config = TOY.resolve_config(2, True, {"inner": {"steps": 7}, "seeds": [4]})
    assert (config.inner.steps, config.seeds, config.label) == (7, [4], "published")


@pytest.mark.parametrize(
    ("seeds", "overrides", "message"),
    [
        (None, {"stepz": 1}, "unknown field toy.stepz"),
        (None, {"inner": {"steps": "many"}}, "bad value for toy.inner.steps"),
        (0, {}, "--seeds must be >= 1"),
        (None, {"seeds": []}, "seeds is empty"),
    ],
)
def test_bad_input_is_a_user_error(seeds: int | None, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        TOY.resolve_config(seeds, False, overrides)


def test_run_stores_the_resolved_config_and_needs_a_report(tmp_path: Path) -> None:
    report = run_scripted(TOY, tmp_path / "out", seeds=2, overrides={"label": "mine"})
    assert report.read_text() == "# toy mine: 2 seeds, 50 steps\n"
    assert "label: mine" in (tmp_path / "out" / CONFIG_FILE).read_text()
    silent = ScriptedReproduction("silent", "", "", ToyConfig, lambda out, config: None)
    with pytest.raises(RuntimeError, match="wrote no report.md"):
        run_scripted(silent, tmp_path / "silent")


def test_a_config_class_without_seeds_is_refused() -> None:
    with pytest.raises(TypeError, match="no 'seeds' field"):
        ScriptedReproduction("x", "", "", Inner, toy_run)


SCRIPTED = sorted(n for n, r in REPRODUCTIONS.items() if isinstance(r, ScriptedReproduction))


@pytest.mark.parametrize("name", SCRIPTED)
def test_every_registered_scripted_reproduction_resolves_full_and_quick(name: str) -> None:
    reproduction = REPRODUCTIONS[name]
    assert isinstance(reproduction, ScriptedReproduction)
    for quick in (False, True):
        config = reproduction.resolve_config(2, quick, {})
        assert config.seeds == [0, 1]


def test_reproduce_cli_runs_a_registered_experiment_and_report_reprints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "toy"
    argv = ["reproduce", "gdrc-toy", "--quick", "--seeds", "2", "--out", str(out), "steps=8", "grid_size=5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert len(results["runs"]) == 2
    assert "8 steps; 2 seeds" in printed
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (out / "report.md").read_text().strip()
    assert main(["reproduce", "gdrc-toy", "--out", str(out), "stepz=8"]) == 2
    assert main(["reproduce", "ndr-ctl", "--out", str(out), "train.steps=8"]) == 2


RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("name", SCRIPTED)
def test_recipe_file_is_the_registered_reproduction(name: str) -> None:
    from recombine.experiments.recipe import load_sweep_recipe

    recipe = load_sweep_recipe(RECIPES / f"{name}.yaml")
    assert isinstance(recipe, ScriptedRecipe)
    assert recipe.reproduction is REPRODUCTIONS[name]
    assert recipe.config == REPRODUCTIONS[name].defaults


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"experiment": "smfr-algoo"}, "experiment 'smfr-algoo' is not a scripted reproduction"),
        (
            {"experiment": "ndr-ctl"},
            "not a scripted reproduction; valid choices: dnc-assoc-recall, dnc-key-value, dnc-repeat-copy",
        ),
        ({"experiment": "gdrc-toy", "confg": {}}, "unknown key 'confg'"),
        ({"experiment": "gdrc-toy", "seeds": 0}, "seeds must be an integer >= 1"),
        ({"experiment": "gdrc-toy", "config": [1]}, "config must be a mapping"),
        ({"experiment": "gdrc-toy", "config": {"stepz": 1}}, "unknown field gdrc-toy.stepz"),
    ],
)
def test_malformed_scripted_recipes_are_user_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        scripted_recipe(data, REPRODUCTIONS)


def test_sweep_runs_a_scripted_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "toy.yaml"
    recipe.write_text("name: my-toy\nexperiment: gdrc-toy\nseeds: 1\nconfig: {steps: 6, grid_size: 5}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(recipe), "--quick", "--out", str(out)]) == 0
    assert "6 steps; 1 seeds" in capsys.readouterr().out
    assert "steps: 6" in (out / CONFIG_FILE).read_text()
    assert main(["sweep", str(recipe), "--executor", "ray", "--out", str(out)]) == 2


def test_default_output_directory_is_under_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "gdrc-toy", "--quick", "--seeds", "1", "steps=4", "grid_size=5"]) == 0
    assert (tmp_path / "runs" / "reproduce-gdrc-toy-quick" / "report.md").is_file()


def test_a_finished_run_of_the_same_config_is_not_repeated(tmp_path: Path) -> None:
    calls: list[list[int]] = []

    def counted(out: Path, config: ToyConfig) -> dict[str, Any]:
        calls.append(config.seeds)
        return toy_run(out, config)

    toy = ScriptedReproduction("toy", "", "", ToyConfig, counted)
    events: list[str] = []
    run_scripted(toy, tmp_path, seeds=2)
    run_scripted(toy, tmp_path, seeds=2, on_event=events.append)
    assert calls == [[0, 1]] and "already holds a finished run" in events[0]
    run_scripted(toy, tmp_path, seeds=3)  # another config: runs, and its report replaces the old one
    assert calls == [[0, 1], [0, 1, 2]]
    assert "3 seeds" in (tmp_path / "report.md").read_text()


def test_an_unfinished_run_leaves_no_report_of_another_config(tmp_path: Path) -> None:
    run_scripted(TOY, tmp_path, seeds=2)

    def crashing(out: Path, config: ToyConfig) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scripted(ScriptedReproduction("toy", "", "", ToyConfig, crashing), tmp_path, seeds=3)
    assert not (tmp_path / "report.md").exists()
    assert "- 2" in (tmp_path / CONFIG_FILE).read_text()
