"""BLOCK A.2 architecture grids: expansion, size buckets (A.2.1), aggregation per family and bucket, and
the two grid reproductions (Tab. 7 / Tab. 2 on ALGO, Tab. 4 / Tab. 5 on add/mul) end to end with resume."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS
from recombine.experiments.block_architecture_grid import (
    TRIALS_FILE,
    BlockArchitectureGrid,
    BucketMean,
    GridValue,
    TrialLog,
    aggregate_by_family_and_bucket,
    parameter_count,
    size_bucket,
)
from recombine.experiments.scripted_reproduction import DONE_FILE, ScriptedReproduction, run_scripted
from recombine.experiments.smfr_algo import AlgoResult, SMFRAlgoConfig
from recombine.experiments.smfr_algo_grid import (
    AlgoGridTrial,
    SMFRAlgoGridConfig,
    algo_grid_tables,
    run_algo_grid,
)
from recombine.experiments.smfr_interference_grid import SMFRInterferenceGridConfig, run_interference_grid
from recombine.models.smfr import BlockShape
from recombine.tasks.algo import AlgoConfig

ALGO_SHAPE = BlockShape(6, 5, 10)  # five variable blocks + the task indicator -> five blocks (BLOCK 5.3)
DIGITS_SHAPE = BlockShape(3, 1, 10)  # x, y, task -> one digit block (BLOCK 5.1)


def independent_bucket(n: int) -> str:
    """BLOCK A.2.1 written out again: HIGH >= 200,000, LOW < 50,000, MID the rest."""
    return "low" if n < 50000 else ("mid" if n < 200000 else "high")


# -- size buckets and grids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "bucket"),
    [(0, "low"), (49_999, "low"), (50_000, "mid"), (199_999, "mid"), (200_000, "high"), (10**6, "high")],
)
def test_size_bucket_thresholds_of_a21(n: int, bucket: str) -> None:
    assert size_bucket(n) == bucket


def _product(grid: BlockArchitectureGrid) -> int:
    """Architectures the lists allow: product per family; depth 0 once per (contained-FNN depth, routing)."""
    fnn = len(grid.fnn_widths) * len(grid.fnn_depths)
    positive_depths = [d for d in grid.smfr_depths if d > 0]
    smfr = len(grid.smfr_routings) * len(grid.smfr_fnn_depths) * len(grid.smfr_widths) * len(positive_depths)
    if 0 in grid.smfr_depths and grid.smfr_widths:
        smfr += len(grid.smfr_routings) * len(grid.smfr_fnn_depths)
    transformer = len(grid.transformer_heads) * len(grid.transformer_dims) * len(grid.transformer_layers)
    return fnn + smfr + transformer


@pytest.mark.parametrize(
    "grid",
    [
        BlockArchitectureGrid.paper_interference(),
        BlockArchitectureGrid.paper_algo(),
        BlockArchitectureGrid.algo_cpu_subset(),
        BlockArchitectureGrid.interference_cpu_subset(),
    ],
    ids=["paper-a21", "paper-a23", "cpu-algo", "cpu-interference"],
)
def test_expansion_counts_are_the_products_and_labels_are_unique(grid: BlockArchitectureGrid) -> None:
    architectures = grid.expand()
    assert len(architectures) == _product(grid)
    assert len({a.label for a in architectures}) == len(architectures)
    assert len({json.dumps([a.model, a.model_config], sort_keys=True) for a in architectures}) == len(
        architectures
    )


def test_paper_grids_have_the_papers_sizes() -> None:
    # A.2.1: 9 FNNs and 7 x 3 x 3 x 2 = 126 SMFRs (no depth 0 there); A.2.3: 15 FNNs, 3 x 3 x 6 = 54
    # Transformers, 3 x 10 x 3 = 90 SMFRs of depth >= 1 plus 3 of depth 0
    families = [a.family for a in BlockArchitectureGrid.paper_interference().expand()]
    assert (families.count("fnn"), families.count("smfr_softmax"), families.count("smfr_gumbel")) == (
        9,
        63,
        63,
    )
    families = [a.family for a in BlockArchitectureGrid.paper_algo().expand()]
    assert (families.count("fnn"), families.count("transformer"), families.count("smfr_softmax")) == (
        15,
        54,
        93,
    )


def test_labels_name_the_grid_point() -> None:
    grid = BlockArchitectureGrid(
        fnn_widths=[200],
        fnn_depths=[3],
        smfr_widths=[6],
        smfr_depths=[0, 1],
        smfr_fnn_depths=[1],
        smfr_routings=["softmax", "gumbel"],
        transformer_heads=[4],
        transformer_dims=[400],
        transformer_layers=[2],
    )
    by_label = {a.label: a for a in grid.expand()}
    assert list(by_label) == [
        "FNN 3x200",
        "SMFR softmax d0 f1",
        "SMFR softmax d1 w6 f1",
        "SMFR gumbel d0 f1",
        "SMFR gumbel d1 w6 f1",
        "Transformer h4 d400 l2",
    ]
    assert by_label["FNN 3x200"].model_config == {"width": 200, "depth": 3}
    assert by_label["SMFR gumbel d1 w6 f1"].family == "smfr_gumbel"
    assert by_label["Transformer h4 d400 l2"].model_config == {
        "d_model": 32,
        "n_heads": 4,
        "d_ff": 400,
        "n_layers": 2,
    }


def test_an_empty_list_disables_its_family() -> None:
    grid = BlockArchitectureGrid.paper_algo()
    grid.transformer_layers = []
    grid.smfr_routings = []
    assert {a.family for a in grid.expand()} == {"fnn"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"smfr_routings": ["sparsemax"]}, "valid choices"),
        ({"fnn_widths": [0]}, "fnn_widths must hold integers >= 1"),
        ({"smfr_depths": [1, 1]}, "smfr_depths must hold distinct"),
        ({"transformer_heads": [3]}, "divisible"),
    ],
)
def test_bad_grids_are_user_errors(fields: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        BlockArchitectureGrid(**fields)


EVERY_BUCKET = {(f, b) for f in ("fnn", "smfr_softmax", "smfr_gumbel") for b in ("high", "mid", "low")}


@pytest.mark.parametrize(
    ("grid", "shape", "cells"),
    [
        # the ALGO subset has no Transformer >= 200k parameters (one costs ~1,100 s; docs/reproductions)
        (
            BlockArchitectureGrid.algo_cpu_subset(),
            ALGO_SHAPE,
            {(f, b) for f in ("fnn", "smfr_softmax", "transformer") for b in ("high", "mid", "low")}
            - {("transformer", "high")},
        ),
        (BlockArchitectureGrid.interference_cpu_subset(), DIGITS_SHAPE, EVERY_BUCKET),
        (BlockArchitectureGrid.paper_interference(), DIGITS_SHAPE, EVERY_BUCKET),
        (
            BlockArchitectureGrid.paper_algo(),
            ALGO_SHAPE,
            {(f, b) for f in ("fnn", "smfr_softmax", "transformer") for b in ("high", "mid", "low")},
        ),
    ],
    ids=["cpu-algo", "cpu-interference", "paper-a21", "paper-a23"],
)
def test_every_architecture_builds_and_lands_in_its_bucket(
    grid: BlockArchitectureGrid, shape: BlockShape, cells: set[tuple[str, str]]
) -> None:
    """Every config builds for its task's shape, size_bucket agrees with the thresholds written out
    again, and the (family, bucket) cells of Tab. 4 / Tab. 7 that have models are the expected ones."""
    seen: set[tuple[str, str]] = set()
    for architecture in grid.expand(shape):
        n = parameter_count(architecture, shape)
        assert size_bucket(n) == independent_bucket(n)
        seen.add((architecture.family, size_bucket(n)))
    assert seen == cells


def test_known_parameter_counts_of_the_paper() -> None:
    # A.2.1: "model sizes in the range of roughly 13k to 280k parameters for both FNNs and SMFRs"
    counts = [parameter_count(a, DIGITS_SHAPE) for a in BlockArchitectureGrid.paper_interference().expand()]
    assert 12_000 < min(counts) < 14_000 and 260_000 < max(counts) < 290_000


# -- aggregation --------------------------------------------------------------------------------------


def test_aggregation_by_hand() -> None:
    values = [
        GridValue("fnn", 49_999, 0.2),  # low
        GridValue("fnn", 10_000, 0.4),  # low
        GridValue("fnn", 50_000, 0.9),  # mid
        GridValue("fnn", 200_000, 1.0),  # high
        GridValue("smfr_softmax", 199_999, 0.3),  # mid
        GridValue("smfr_softmax", 60_000, 0.6),  # mid
    ]
    table = aggregate_by_family_and_bucket(values)
    assert table == {
        ("fnn", "low"): BucketMean(pytest.approx(0.3), 2),
        ("fnn", "mid"): BucketMean(0.9, 1),
        ("fnn", "high"): BucketMean(1.0, 1),
        ("smfr_softmax", "mid"): BucketMean(pytest.approx(0.45), 2),
    }
    grouped = aggregate_by_family_and_bucket(
        [GridValue("fnn", 1, 0.1, 0.7), GridValue("fnn", 2, 0.5, 0.7), GridValue("fnn", 3, 0.8, 1.0)]
    )
    assert grouped == {
        ("fnn", "low", 0.7): BucketMean(pytest.approx(0.3), 2),
        ("fnn", "low", 1.0): BucketMean(0.8, 1),
    }
    with pytest.raises(ValueError, match="every value has a group"):
        aggregate_by_family_and_bucket([GridValue("fnn", 1, 0.1, 0.7), GridValue("fnn", 1, 0.1)])


def _algo_trial(label: str, family: str, n: int, accuracy: dict[int, float]) -> AlgoGridTrial:
    even = statistics.fmean(accuracy[k] for k in (4, 6, 8))
    odd = statistics.fmean(accuracy[k] for k in (1, 3, 5, 7, 9))
    result = AlgoResult(accuracy, even, odd, 10, accuracy, n, 1.0, [])
    return AlgoGridTrial(label, family, family.split("_")[0], {}, 0, result)


def test_algo_tables_by_hand() -> None:
    def flat(value: float, at4: float | None = None) -> dict[int, float]:
        accuracy = dict.fromkeys(range(1, 10), value)
        if at4 is not None:
            accuracy[4] = at4
        return accuracy

    trials = [_algo_trial(f"F{i}", "fnn", 10_000 * (i + 1), flat(i / 10)) for i in range(7)]  # 10k..70k
    trials.append(_algo_trial("S", "smfr_softmax", 300_000, flat(1.0)))
    tables = algo_grid_tables(trials, best_per_family=5, threshold=1.0)
    # FNN low: 10k..40k (values 0, .1, .2, .3), mid: 50k..70k (.4, .5, .6); OOD_odd = the flat value
    assert tables.table_7["fnn"]["low"]["ood_odd"] == BucketMean(pytest.approx(0.15), 4)
    assert tables.table_7["fnn"]["mid"]["ood_even"] == BucketMean(pytest.approx(0.5), 3)
    assert "high" not in tables.table_7["fnn"]
    # Tab. 2: the five best by 4-iteration accuracy are F6..F2
    assert tables.table_2_labels["fnn"] == [f"F{i} seed 0" for i in (6, 5, 4, 3, 2)]
    assert tables.table_2["fnn"]["ood_odd"].mean == pytest.approx(0.4)
    assert tables.fraction_perfect == {
        "fnn": dict.fromkeys(range(1, 10), 0.0),
        "smfr_softmax": dict.fromkeys(range(1, 10), 1.0),
    }
    assert tables.mean_accuracy["fnn"][3] == pytest.approx(0.3)
    # selection uses the 4-iteration accuracy, not OOD_odd
    trials = [_algo_trial("A", "fnn", 1, flat(0.9, at4=0.1)), _algo_trial("B", "fnn", 1, flat(0.2, at4=0.5))]
    assert algo_grid_tables(trials, 1, 1.0).table_2_labels["fnn"] == ["B seed 0"]


# -- the reproductions end to end ---------------------------------------------------------------------


def _table_rows(report: str, heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table after ``heading``, as lists of cells."""
    lines = report.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    stop = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2 : stop]]


def _expected_cell(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} (n={len(values)})" if values else "–, n=0"


NAMES = {
    "fnn": "FNN",
    "transformer": "Transformer",
    "smfr_softmax": "SMFR softmax",
    "smfr_gumbel": "SMFR gumbel",
}


def test_algo_grid_quick_report_matches_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reproduction = REPRODUCTIONS["smfr-algo-grid"]
    assert isinstance(reproduction, ScriptedReproduction)
    report = run_scripted(reproduction, tmp_path, quick=True).read_text()
    # interrupted before it was marked finished: `recombine reproduce` again trains nothing
    (tmp_path / DONE_FILE).unlink()
    capsys.readouterr()
    assert (
        run_scripted(reproduction, tmp_path, quick=True).read_text().split("## Per")[0]
        == report.split("## Per")[0]
    )
    progress = capsys.readouterr().err.strip().splitlines()
    assert len(progress) == 6 and all(line.endswith("from trials.jsonl") for line in progress)
    results = json.loads((tmp_path / "results.json").read_text())
    trials = results["trials"]
    config = reproduction.resolve_config(None, True, {})
    assert results["complete"] and len(trials) == len(config.grid.expand())
    assert (tmp_path / "accuracy_by_iterations.png").stat().st_size > 0
    rows = _table_rows(report, "## Tab. 7")
    families = list(
        dict.fromkeys(t["family"] for t in sorted(trials, key=lambda t: list(NAMES).index(t["family"])))
    )
    assert [(r[0], r[1]) for r in rows] == [(NAMES[f], b) for f in families for b in ("high", "mid", "low")]
    paper = {"fnn": "fnn", "transformer": "transformer", "smfr_softmax": "smfr"}
    for row in rows:
        family = next(f for f, name in NAMES.items() if name == row[0])
        mine = [
            t for t in trials if t["family"] == family and independent_bucket(t["n_parameters"]) == row[1]
        ]
        assert row[2] == _expected_cell([t["ood_even"] for t in mine])
        assert row[3] == _expected_cell([t["ood_odd"] for t in mine])
        paper_cell = results["paper_table_7"][paper[family]][row[1]]
        assert [float(x) for x in row[4:6]] == [paper_cell["ood_even"], paper_cell["ood_odd"]]
    per_architecture = _table_rows(report, "## Per architecture")
    assert [r[0] for r in per_architecture] == [t["label"] for t in trials]
    assert [r[3] for r in per_architecture] == [independent_bucket(t["n_parameters"]) for t in trials]


def test_interference_grid_quick_report_matches_its_results(tmp_path: Path) -> None:
    reproduction = REPRODUCTIONS["smfr-interference-grid"]
    assert isinstance(reproduction, ScriptedReproduction)
    report = run_scripted(reproduction, tmp_path, quick=True).read_text()
    results = json.loads((tmp_path / "results.json").read_text())
    trials = results["trials"]
    assert results["complete"] and {independent_bucket(t["n_parameters"]) for t in trials} == {
        "low",
        "mid",
        "high",
    }
    rows = _table_rows(report, "## Tab. 4")
    thresholds = [0.7, 0.8, 0.9, 0.95, 1.0]
    families = ["fnn", "smfr_softmax", "smfr_gumbel"]
    assert [(float(r[0]), r[1]) for r in rows] == [(t, NAMES[f]) for t in thresholds for f in families]
    checked = 0
    for row in rows:
        threshold, family = float(row[0]), next(f for f, name in NAMES.items() if name == row[1])
        for i, bucket in enumerate(("high", "mid", "low")):
            mine = [
                t for t in trials if t["family"] == family and independent_bucket(t["n_parameters"]) == bucket
            ]
            after = [
                o["preparation_only_after"]
                for t in mine
                for o in t["outcomes"]
                if o["threshold"] == threshold
            ]
            unreached = sum(threshold in t["unreached"] for t in mine)
            expected = _expected_cell(after) + (f", {unreached} not reached" if unreached else "")
            assert row[2 + 2 * i] == expected
            assert float(row[3 + 2 * i]) == results["paper_table_4"][str(threshold)][family][bucket]
            checked += len(after)
    assert checked > 10  # the quick settings reach most thresholds: the cells are not all empty


# -- resume ---------------------------------------------------------------------------------------------


def _tiny_algo(steps: int = 4) -> SMFRAlgoGridConfig:
    return SMFRAlgoGridConfig(
        grid=BlockArchitectureGrid(
            fnn_widths=[8],
            fnn_depths=[1, 2],
            smfr_widths=[2],
            smfr_depths=[1],
            smfr_fnn_depths=[1],
            smfr_routings=["softmax"],
        ),
        seeds=[0, 1],
        base=SMFRAlgoConfig(
            task=AlgoConfig(n_train=64, n_eval=8, eval_iterations=[1, 2, 4]), steps=steps, eval_every=2
        ),
    )


def test_algo_grid_resumes_from_its_trial_log(tmp_path: Path) -> None:
    first = run_algo_grid(tmp_path, _tiny_algo())
    assert len(first.trained) == 6
    again = run_algo_grid(tmp_path, _tiny_algo())
    assert again.trained == []
    assert [t.to_record() for t in again.trials] == [t.to_record() for t in first.trials]
    assert (
        again.report.read_text().split("Training time")[0]
        == first.report.read_text().split("Training time")[0]
    )
    # a crash: the log holds two finished trials and half a line -> only the other four are trained
    log = tmp_path / TRIALS_FILE
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    resumed = run_algo_grid(tmp_path, _tiny_algo())
    assert resumed.trained == [f"{t.label} seed {t.seed}" for t in first.trials[2:]]
    assert [t.to_record()["ood_odd"] for t in resumed.trials] == [
        t.to_record()["ood_odd"] for t in first.trials
    ]
    assert len(TrialLog(log).finished()) == 6
    # another config (more steps) is not taken for a finished one
    assert len(run_algo_grid(tmp_path, _tiny_algo(steps=6)).trained) == 6


def test_interference_grid_resumes_from_its_trial_log(tmp_path: Path) -> None:
    config = SMFRInterferenceGridConfig(
        grid=BlockArchitectureGrid(fnn_widths=[16], fnn_depths=[1, 2]),
        thresholds=[0.7],
        max_preparation_steps=20,
        interference_steps=5,
    )
    first = run_interference_grid(tmp_path, config)
    assert len(first.trained) == 2
    again = run_interference_grid(tmp_path, config)
    assert again.trained == [] and [g.to_record() for g in again.trials] == [
        g.to_record() for g in first.trials
    ]


def test_interference_grid_refuses_transformers() -> None:
    with pytest.raises(UserError, match="no Transformers"):
        SMFRInterferenceGridConfig(
            grid=BlockArchitectureGrid(transformer_heads=[1], transformer_dims=[8], transformer_layers=[1])
        )


def test_results_json_is_written_after_every_trial(tmp_path: Path) -> None:
    seen: list[int] = []

    def on_trial(trial: AlgoGridTrial) -> None:
        results = tmp_path / "results.json"
        seen.append(json.loads(results.read_text())["n_trials"] if results.exists() else 0)

    run_algo_grid(tmp_path, _tiny_algo(), on_trial=on_trial)
    # on_trial runs before results.json is rewritten: it sees the previous trial's file
    assert seen == [0, 1, 2, 3, 4, 5]
    assert json.loads((tmp_path / "results.json").read_text())["n_trials"] == 6
