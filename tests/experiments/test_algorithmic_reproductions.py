"""The grid reproductions of thesis ch. 5-6 beyond ndr-ctl: ``ndr-depth`` (Tab. 5.2), ``ndr-arithmetic``
(Tab. 5.3), ``ndr-listops`` (Tab. 5.4), ``ctlpp-ar`` (Tab. 6.1) and ``ctlpp-s`` (Fig. 6.4): their paper
numbers and settings, the paper's success rates, and the heat-map report of a grid over two task keys
(rendered from stored run results, no training)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from recombine.errors import UserError
from recombine.experiments import REPRODUCTIONS, ndr_ctl
from recombine.experiments.ctlpp_ar import CTLPP_AR
from recombine.experiments.ctlpp_s import CTLPP_S
from recombine.experiments.ndr_arithmetic import NDR_ARITHMETIC
from recombine.experiments.ndr_depth import NDR_DEPTH
from recombine.experiments.ndr_listops import NDR_LISTOPS
from recombine.experiments.recipe import reproduction_from_recipe
from recombine.experiments.reproduction import PaperNumber, Reproduction, Variant
from recombine.runs.by_depth import depth_points
from recombine.runs.heatmap import grid
from recombine.runs.report import collect, render
from recombine.runs.row_axis import along_axis

NEW = [NDR_DEPTH, NDR_ARITHMETIC, NDR_LISTOPS, CTLPP_AR, CTLPP_S]


@pytest.mark.parametrize("reproduction", NEW, ids=[r.name for r in NEW])
def test_registered_with_paper_numbers_for_rows_and_columns_it_has(reproduction: Reproduction) -> None:
    assert REPRODUCTIONS[reproduction.name] is reproduction
    labels = {v.label for v in reproduction.variants}
    assert len(labels) == len(reproduction.variants)
    for label, column in reproduction.paper:
        assert label in labels and column in reproduction.columns
    assert set(reproduction.quick_variants) <= labels
    assert reproduction.scale_note.startswith("CPU scale:") and "Paper" in reproduction.scale_note


def test_thesis_numbers() -> None:
    """Spot checks against the thesis's tables (the CATALOG §4 claims)."""
    arithmetic = {label: n.mean for (label, _), n in NDR_ARITHMETIC.paper.items()}
    assert arithmetic == {
        "NDR": 0.98,
        "Transformer": 0.47,
        "+rel": 0.77,
        "+abs/rel+gate": 0.80,
        "LSTM": 0.74,
        "BiLSTM": 0.82,
    }
    listops = {label: n.mean for (label, _), n in NDR_LISTOPS.paper.items()}
    assert listops["NDR"] == 0.99 and listops["Transformer"] == 0.74 and listops["+rel"] == 0.79
    depth = NDR_DEPTH.paper
    assert (depth[("L10", "forward")].mean, depth[("L10", "backward")].mean) == (0.75, 0.62)
    assert (depth[("L6", "forward")].mean, depth[("L6", "backward")].mean) == (0.22, 0.15)
    assert depth[("L14", "forward")] == depth[("L14", "backward")] == PaperNumber(1.00, 0.00)
    assert CTLPP_AR.paper[("NDR", "R")] == PaperNumber(0.75, 0.27, success_rate=0.32)
    assert CTLPP_AR.paper[("Transformer", "R")].success_rate == 0.20
    assert [CTLPP_AR.paper[("BiLSTM", c)].mean for c in "AR"] == [0.95, 1.00]
    assert CTLPP_S.paper == {}  # Fig. 6.4's cell values are not in the thesis text


def test_settings_follow_the_tables_and_share_ndr_ctls_cpu_scale() -> None:
    for reproduction in (NDR_ARITHMETIC, NDR_LISTOPS):
        assert reproduction.columns == {"depth-7-8": {"test_ood_depths": [7, 8]}}  # Tab. 5.3/5.4 "Test (7-8)"
        assert reproduction.train["grad_clip"] == 1.0  # D.3.3
        assert reproduction.train["batch_size"] == ndr_ctl.CPU_TRAIN["batch_size"]
    rows = {v.label: v for v in NDR_ARITHMETIC.variants}
    assert rows["Transformer"].model_overrides == ndr_ctl.CPU_PLAIN  # Tab. D.4 = Tab. D.3 for these
    assert rows["Transformer"].train_overrides == ndr_ctl.PLAIN_TRAIN
    assert rows["NDR"].model_overrides["test_layers"] - rows["NDR"].model_overrides["n_layers"] == (
        ndr_ctl.EXTRA_TEST_STEPS
    )
    assert (
        {v.label: v.model_overrides["n_layers"] for v in NDR_LISTOPS.variants}["NDR"]
        < 24
        == {v.label: v.model_overrides.get("test_layers") for v in NDR_LISTOPS.variants}["NDR"]
    )  # trained shallower, tested with 24 steps (D.3.1)
    # CTL++ "Transformer" is the relative-PE universal Transformer (E.1.2)
    assert {v.label: v.model for v in CTLPP_AR.variants}["Transformer"] == "transformer_rel"
    assert CTLPP_AR.iid_split == "test_iid" and CTLPP_AR.seeds >= 10  # success rates need seeds


def test_every_ndr_row_starts_from_the_released_initialisation() -> None:
    # the authors' released NDR layer (ReLU) is Glorot-initialised; ctlpp's GELU ndr_modified cannot be
    grids = [r for r in REPRODUCTIONS.values() if isinstance(r, Reproduction)]
    rows = [(r.name, v) for r in grids for v in r.variants if v.model == "ndr"]
    assert {"ndr-ctl", "ndr-depth", "ndr-arithmetic", "ndr-listops"} <= {name for name, _ in rows}
    assert all(v.model_overrides.get("weight_init") == "glorot" for _, v in rows)


def test_ndr_depth_evaluates_every_row_at_its_training_depth() -> None:
    depths = sorted(v.model_overrides["n_layers"] for v in NDR_DEPTH.variants)
    assert depths == [4, 6, 8, 10, 12, 14, 20]
    for variant in NDR_DEPTH.variants:
        assert variant.model == "ndr"
        assert variant.model_overrides == {
            **ndr_ctl.CPU_NDR,
            "n_layers": variant.model_overrides["n_layers"],
            "test_layers": variant.model_overrides["n_layers"],
        }
    assert NDR_DEPTH.columns == ndr_ctl.NDR_CTL.columns
    l14 = NDR_DEPTH.variants[[v.label for v in NDR_DEPTH.variants].index("L14")]
    steps = {c: NDR_DEPTH.run_config(l14, c, 1, quick=False)["train"]["steps"] for c in NDR_DEPTH.columns}
    assert steps["backward"] > steps["forward"] >= ndr_ctl.NDR_CTL.train["steps"]
    assert {c: NDR_DEPTH.run_config(l14, c, 1, quick=True)["train"]["steps"] for c in steps} == {
        c: NDR_DEPTH.quick_train["steps"] for c in steps
    }


def test_ctlpp_s_columns_span_the_fig_6_4_grid() -> None:
    ys, xs, points = grid(CTLPP_S)
    assert (ys, xs) == ([4, 8, 12, 16], [2, 3, 4, 5, 6])
    assert len(points) == len(CTLPP_S.columns) == 20
    for (functions, symbols), column in points.items():
        assert CTLPP_S.columns[column] == {
            "variant": "S",
            "shared_functions": functions,
            "shared_symbols": symbols,
        }
    assert CTLPP_S.variants[0].label == "NDR" and CTLPP_S.quick_variants == ("NDR",)
    assert {v.label for v in CTLPP_S.variants} == {v.label for v in CTLPP_AR.variants}


def test_paper_success_rates_round_trip_through_recipes() -> None:
    recipe = CTLPP_AR.to_recipe()
    assert recipe["paper"]["NDR"]["R"] == {"mean": 0.75, "std": 0.27, "success_rate": 0.32}
    assert recipe["paper"]["BiLSTM"]["A"] == {"mean": 0.95, "std": 0.03}  # none stated: none written
    assert reproduction_from_recipe(recipe) == CTLPP_AR
    assert PaperNumber(0.75, 0.27, 0.32).format() == "0.75 ± 0.27 (32%)"
    with pytest.raises(UserError, match="success_rate"):
        reproduction_from_recipe({**recipe, "paper": {"NDR": {"R": {"mean": 1, "std": 0, "rate": 1}}}})


@pytest.mark.parametrize(
    ("heatmap", "message"),
    [
        ({"y": "shared_functions"}, "must be {y: TASK_KEY, x: TASK_KEY}"),
        ({"y": "shared_functions", "x": "n_symbols"}, "does not set the heatmap keys"),
        ("shared_functions", "heatmap must be a mapping"),
    ],
)
def test_malformed_heatmaps_are_one_line_user_errors(heatmap: Any, message: str) -> None:
    with pytest.raises(UserError) as error:
        reproduction_from_recipe({**CTLPP_S.to_recipe(), "heatmap": heatmap})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_two_columns_at_the_same_heatmap_point_are_rejected() -> None:
    recipe = CTLPP_S.to_recipe()
    recipe["columns"]["again"] = dict(recipe["columns"]["fn4-sym2"])
    with pytest.raises(UserError, match="'fn4-sym2' and 'again' are the same heatmap point"):
        reproduction_from_recipe(recipe)


def _fake_run(out: Path, run: str, ood: float, iid: float) -> None:
    """A finished run directory as the trainer leaves it (result.json and two evaluations)."""
    path = out / run
    path.mkdir(parents=True)
    splits = {"test_iid": iid, "valid_iid": iid, "valid_ood": ood, "test_ood": ood}
    result = {
        "status": "completed",
        "selection_split": "valid_ood",
        "best_step": 20,
        "selected": splits,
        "last": splits,
        "wall_time_s": 12.0,
    }
    (path / "result.json").write_text(json.dumps(result))
    evals = [
        {"step": s, "kind": "eval", "splits": {k: {"accuracy": v * s / 20} for k, v in splits.items()}}
        for s in (10, 20)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


def _write_manifest(out: Path, reproduction: Reproduction, runs: list[dict[str, Any]], seeds: int) -> None:
    """The grid's manifest.json as run_trials writes it, over the fake runs ``runs``."""
    manifest = {
        "reproduction": reproduction.name,
        "quick": False,
        "seeds": seeds,
        "runs": runs,
        "recipe": reproduction.to_recipe(),
    }
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_heatmap_report_from_stored_runs(tmp_path: Path) -> None:
    """A 2 x 2 corner of ctlpp-s with two rows (one with a paper number), one run missing: matrices per
    row with the successes, the missing cell marked, heatmap.png, and the HTML page."""
    columns = {c: CTLPP_S.columns[c] for c in ("fn4-sym2", "fn4-sym3", "fn8-sym2", "fn8-sym3")}
    tiny = replace(
        CTLPP_S,
        columns=columns,
        variants=CTLPP_S.variants[:2],
        paper={(CTLPP_S.variants[1].label, "fn8-sym3"): PaperNumber(0.5, 0.1, 0.2)},
    )
    ndr, other = (v.label for v in tiny.variants)
    accuracy = {"fn4-sym2": 0.1, "fn4-sym3": 0.4, "fn8-sym2": 0.7, "fn8-sym3": 1.0}
    runs = []
    for label in (ndr, other):
        for column, value in accuracy.items():
            for seed in (1, 2):
                run = f"runs/{label}--{column}--seed{seed}"
                runs.append({"variant": label, "column": column, "seed": seed, "run": run, "config": {}})
                if not (label == other and column == "fn4-sym2"):
                    _fake_run(tmp_path, run, value if seed == 1 else value - 0.1 * (value > 0.9), 0.99)
    _write_manifest(tmp_path, tiny, runs, seeds=2)

    markdown = render(tmp_path, html=True)
    lines = markdown.splitlines()
    assert f"**{ndr}: test_ood** (rows: shared_functions, columns: shared_symbols)" in lines
    assert "| shared_functions \\ shared_symbols | 2 | 3 |" in lines
    start = lines.index(f"**{ndr}: test_ood** (rows: shared_functions, columns: shared_symbols)")
    assert lines[start + 4] == "| 4 | 0.10 ± 0.00 (0/2) | 0.40 ± 0.00 (0/2) |"
    assert lines[start + 5] == "| 8 | 0.70 ± 0.00 (0/2) | 0.95 ± 0.07 (1/2) |"
    start = lines.index(f"**{other}: test_ood** (rows: shared_functions, columns: shared_symbols)")
    assert lines[start + 4].startswith("| 4 | – |")  # not run: no results
    assert f"**{other}: paper** (rows: shared_functions, columns: shared_symbols)" in lines
    assert "| 8 | – | 0.50 ± 0.10 (20%) |" in lines
    assert f"**{ndr}: paper** (rows: shared_functions, columns: shared_symbols)" not in lines
    assert "![test_ood accuracy, mean over seeds](heatmap.png)" in lines
    assert (tmp_path / "heatmap.png").stat().st_size > 0 and (tmp_path / "curves.png").is_file()
    assert "Missing or unfinished runs (2)" in markdown
    page = (tmp_path / "report.html").read_text()
    assert "<table>" in page and "data:image/png;base64," in page
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["table"][other]["fn8-sym3"]["paper"] == {"mean": 0.5, "std": 0.1, "success_rate": 0.2}


def test_depth_ablation_report_plots_accuracy_against_the_layer_count(tmp_path: Path) -> None:
    """ndr-depth's rows are an ablation over n_layers: the report's rows.png follows the stored runs
    in layer order, the paper's numbers beside them, and the HTML page embeds it with the curves."""
    labels = ["L14", "L6", "L10"]  # L10 forward not run; L14 seed 2 never evaluated valid_iid
    accuracy = {"L14": (1.0, 0.9), "L6": (0.2, 0.1), "L10": (0.7, 0.5)}
    runs = []
    for label in labels:
        for column in ("forward", "backward"):
            for seed in (1, 2):
                run = f"runs/{label}--{column}--seed{seed}"
                runs.append({"variant": label, "column": column, "seed": seed, "run": run, "config": {}})
                if not (label == "L10" and column == "forward"):
                    _fake_run(tmp_path, run, accuracy[label][seed - 1], 1.0)
    lacking_iid = tmp_path / "runs/L14--forward--seed2/result.json"
    result = json.loads(lacking_iid.read_text())
    del result["selected"]["valid_iid"]
    lacking_iid.write_text(json.dumps(result))
    _write_manifest(tmp_path, NDR_DEPTH, runs, seeds=2)

    markdown = render(tmp_path, html=True)
    _, results = collect(tmp_path)
    forward = along_axis(results, NDR_DEPTH, "forward", "ood")
    assert [x for x, _ in forward] == [6.0, 14.0]
    assert [summary["values"] for _, summary in forward] == [[0.2, 0.1], [1.0, 0.9]]
    assert [x for x, _ in along_axis(results, NDR_DEPTH, "backward", "ood")] == [6.0, 10.0, 14.0]
    paper = along_axis(results, NDR_DEPTH, "forward", "paper")
    assert [(x, number["mean"]) for x, number in paper] == [
        (4.0, 0.14),
        (6.0, 0.22),
        (8.0, 0.23),
        (10.0, 0.75),
        (12.0, 1.0),
        (14.0, 1.0),
    ]
    assert "![test_ood accuracy by n_layers: ours and the paper's](rows.png)" in markdown.splitlines()
    assert (tmp_path / "rows.png").stat().st_size > 0
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 2  # rows and curves
    l14 = next(line for line in markdown.splitlines() if line.startswith("| L14 |")).split(" | ")
    assert l14[1] == "0.95 ± 0.07 (1/2)"  # forward test_ood
    assert l14[5] == "n/a (2 runs, not every one evaluated)"  # forward valid_iid: one seed lacks it
    assert l14[6] == "1.00 ± 0.00 (2/2)"  # backward valid_iid


def test_row_axis_rows_must_each_set_their_own_number() -> None:
    twin = Variant("L14b", "ndr", {"n_layers": 14})
    with pytest.raises(UserError, match="'L14' and 'L14b' are the same row_axis point n_layers=14"):
        replace(NDR_DEPTH, variants=(*NDR_DEPTH.variants, twin))
    with pytest.raises(UserError, match="'L14b' does not set the row_axis model key 'n_layers'"):
        replace(NDR_DEPTH, variants=(Variant("L14b", "ndr", {}),))


def test_listops_report_breaks_accuracy_down_by_dependency_depth(tmp_path: Path) -> None:
    """ndr-listops declares depth_axis: the report gets a table of the mean per-depth accuracy over
    seeds (hand-computed here), in depth order across valid_iid / valid_ood / test_ood, and depths.png,
    embedded in the HTML page. A depth fewer seeds recorded than the cell has runs says how many; a run
    without records, a -1 group and a row without any records are handled."""
    per_depth: dict[tuple[str, int], dict[str, dict[str, float]] | None] = {
        ("NDR", 1): {
            "valid_iid": {"1": 1.0, "5": 0.9},
            "valid_ood": {"6": 0.9},
            "test_ood": {"7": 0.8, "8": 0.6},
        },
        ("NDR", 2): {
            "valid_iid": {"1": 1.0, "5": 0.7, "-1": 0.5},
            "valid_ood": {"6": 0.7},
            "test_ood": {"7": 0.6},
        },
        ("NDR", 3): None,  # an older run without per-depth records
        ("Transformer", 1): {
            "valid_iid": {"1": 0.9},
            "valid_ood": {"6": 0.3},
            "test_ood": {"7": 0.2, "8": 0.1},
        },
        ("LSTM", 1): None,
    }
    runs = []
    for (label, seed), splits in per_depth.items():
        run = f"runs/{label}--depth-7-8--seed{seed}"
        runs.append({"variant": label, "column": "depth-7-8", "seed": seed, "run": run, "config": {}})
        _fake_run(tmp_path, run, 0.5, 1.0)
        if splits is not None:
            path = tmp_path / run / "result.json"
            path.write_text(json.dumps(json.loads(path.read_text()) | {"selected_per_depth": splits}))
    _write_manifest(tmp_path, NDR_LISTOPS, runs, seeds=3)

    markdown = render(tmp_path, html=True).splitlines()

    heading = next(
        i for i, line in enumerate(markdown) if line.startswith("**Accuracy by dependency depth, depth-7-8**")
    )
    header = markdown[heading + 2]
    assert header == "| model | 1 valid_iid | 5 valid_iid | 6 valid_ood | 7 test_ood | 8 test_ood |"
    # NDR: 3 runs, 2 with records; depth 8 recorded by seed 1 only
    assert markdown[heading + 4] == "| NDR | 1.00 (n=2) | 0.80 (n=2) | 0.80 (n=2) | 0.70 (n=2) | 0.60 (n=1) |"
    assert markdown[heading + 5] == "| Transformer | 0.90 | – | 0.30 | 0.20 | 0.10 |"
    assert markdown[heading + 7] == "Rows whose runs recorded no per-dependency depth accuracy: LSTM"
    _, results = collect(tmp_path)
    assert results["table"]["NDR"]["depth-7-8"]["per_depth"] == [per_depth[("NDR", s)] for s in (1, 2, 3)]
    caption = "accuracy by dependency depth per split, mean ± std over seeds"
    assert f"![{caption}](depths.png)" in markdown
    page = (tmp_path / "report.html").read_text()
    assert "<td>0.80 (n=2)</td>" in page and page.count("data:image/png;base64,") == 2  # depths and curves
    assert "<footer>" in page  # the styled grid page, with the depth table converted into it


def test_per_depth_records_are_kept_only_where_the_reproduction_declares_a_depth_axis(tmp_path: Path) -> None:
    without = replace(NDR_LISTOPS, depth_axis=None)
    run = "runs/NDR--depth-7-8--seed1"
    _fake_run(tmp_path, run, 0.5, 1.0)
    path = tmp_path / run / "result.json"
    path.write_text(
        json.dumps(json.loads(path.read_text()) | {"selected_per_depth": {"test_ood": {"7": 0.5}}})
    )
    _write_manifest(
        tmp_path, without, [{"variant": "NDR", "column": "depth-7-8", "seed": 1, "run": run}], seeds=1
    )
    markdown = render(tmp_path)
    _, results = collect(tmp_path)
    assert "per_depth" not in results["table"]["NDR"]["depth-7-8"]
    assert "Accuracy by" not in markdown and not (tmp_path / "depths.png").exists()
    with pytest.raises(UserError, match="depth_axis must be a non-empty label"):
        replace(NDR_LISTOPS, depth_axis=" ")


def test_depth_points_keep_overlapping_splits_apart() -> None:
    """CTL++'s test_iid and test_ood cover the same lengths: each split stays one run of the axis,
    splits ordered by their smallest depth (ties: first seen); -1 (no meaningful group) is left out."""
    cells = [
        {"per_depth": [{"test_iid": {"2": 1.0, "10": 1.0, "3": 1.0}, "test_ood": {"2": 0.5}}, None]},
        {"per_depth": [{"test_ood": {"3": 0.5}, "valid_ood": {"1": 0.1, "-1": 0.2}, "other": {"-1": 0.3}}]},
    ]
    assert depth_points(cells) == [
        ("valid_ood", "1"),
        ("test_iid", "2"),
        ("test_iid", "3"),
        ("test_iid", "10"),
        ("test_ood", "2"),
        ("test_ood", "3"),
    ]
