"""The ``recombine`` command line: thin, parses and calls the library.

Errors a user can cause print one line (``error: ...``) and exit with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from recombine.errors import UserError
from recombine.stop_signals import sigterm_as_keyboard_interrupt


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def _registry_listing(registry: Any, as_json: bool) -> str:
    entries = registry.entries()
    if as_json:
        data = [
            {
                "name": e.name,
                "description": e.description,
                "config": dataclasses.asdict(e.default_config()),
            }
            for e in entries
        ]
        return json.dumps(data, indent=2)
    width = max(len(e.name) for e in entries)
    return "\n".join(f"{e.name:<{width}}  {e.description}" for e in entries)


def cmd_tasks(args: argparse.Namespace) -> int:
    from recombine import tasks

    print(_registry_listing(tasks.TASKS, args.json))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from recombine import models

    print(_registry_listing(models.MODELS, args.json))
    return 0


def _default_run_dir(config: Any) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{config.task_name}-{config.model_name}-seed{config.seed}-{stamp}"


def _add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        help="where supervised runs train: cpu (default), cuda or cuda:N (docs/gpu.md)",
    )


def _add_grid_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress over the grid's training steps (a bar on a terminal, a line per tenth in a log)",
    )


def _grid_progress(args: argparse.Namespace) -> bool:
    return not args.no_progress


def _add_compile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compile",
        help="torch.compile supervised training steps: off (default), default, reduce-overhead (CUDA "
        "graphs), max-autotune, max-autotune-no-cudagraphs (docs/gpu.md)",
    )


def _forward_to_field(
    name: str, option: str, value: Any, config_class: type, overrides: dict[str, Any]
) -> None:
    """A command-line option (``--jobs``, ``--device``) given to a scripted reproduction becomes its config
    field of the same name, if it has one; refused in one line otherwise, or when ``field=`` disagrees."""
    field_name = option.removeprefix("--")
    if field_name not in {f.name for f in dataclasses.fields(config_class)}:
        raise UserError(
            f"{name} has no `{field_name}` setting; {option} applies to grids and to scripted "
            f"reproductions with a `{field_name}` field"
        )
    if overrides.setdefault(field_name, value) != value:
        raise UserError(
            f"{option} {value} and {field_name}={overrides[field_name]} disagree; give one of them"
        )


def _forward_session_options(
    args: argparse.Namespace, name: str, config_class: type, overrides: dict[str, Any]
) -> None:
    """``--device`` and ``--compile`` given to a scripted reproduction: forwarded to its config fields."""
    if args.device is not None:
        from recombine.train.device import resolve_device

        resolve_device(args.device)
        _forward_to_field(name, "--device", args.device, config_class, overrides)
    if args.compile is not None:
        _forward_to_field(name, "--compile", args.compile, config_class, overrides)


def _scripted_overrides(args: argparse.Namespace, name: str, config_class: type) -> dict[str, Any]:
    from recombine import run_config

    overrides = run_config.parse_overrides(args.overrides)
    if args.jobs != 1:
        _forward_to_field(name, "--jobs", args.jobs, config_class, overrides)
    _forward_session_options(args, name, config_class, overrides)
    return overrides


def cmd_train(args: argparse.Namespace) -> int:
    from recombine import run_config
    from recombine.runs.store import RunDir
    from recombine.train import fit
    from recombine.train.compilation import resolve_compile_mode
    from recombine.train.device import resolve_device

    device = resolve_device(args.device or "cpu")
    compile_mode = resolve_compile_mode(args.compile or "off")
    if args.resume:
        run = RunDir(args.resume)
        if args.recipe:
            raise UserError("--resume continues a run with its stored config; drop the recipe")
        config = run_config.resolve(run.read_config())
        config = run_config.extend_steps(config, run_config.parse_overrides(args.overrides))
        if run.is_complete() and run.read_result()["steps"] >= config.train.steps:  # type: ignore[index]
            print(f"{run.path} is already complete")
            return 0
        run_dir, resume = run.path, True
    else:
        values = run_config.load_recipe(args.recipe) if args.recipe else {}
        config = run_config.resolve(run_config.merge(values, run_config.parse_overrides(args.overrides)))
        run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(config)
        if (run_dir / "metrics.jsonl").exists():
            raise UserError(f"{run_dir} already holds a run; continue it with --resume {run_dir}")
        resume = False
    result = fit(
        config,
        run_dir,
        resume=resume,
        progress=not args.no_progress,
        on_start=lambda: print(f"run directory: {run_dir}", file=sys.stderr),
        device=device,
        compile_mode=compile_mode,
    )
    selected = ", ".join(f"{k} {v:.4f}" for k, v in result["selected"].items())
    print(f"done: step {result['best_step']} selected by {result['selection_split']}: {selected}")
    return 0


def _print_event(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_seeds(seeds: int | None) -> None:
    if seeds is not None and seeds < 1:
        raise UserError("--seeds must be >= 1")


def _output_dir(args: argparse.Namespace, prefix: str, name: str) -> Path:
    """``--out``, or ``runs/<prefix><name>[-quick]``."""
    if args.out:
        return Path(args.out)
    return Path("runs") / (prefix + name + ("-quick" if args.quick else ""))


def _comma_list(text: str | None) -> list[str] | None:
    """``--models a,b`` / ``--columns A,R`` as a list (None when the option is absent)."""
    return [item.strip() for item in text.split(",")] if text else None


def cmd_reproduce(args: argparse.Namespace) -> int:
    from recombine import experiments
    from recombine.experiments.reproduction import run_grid
    from recombine.experiments.scripted_reproduction import ScriptedReproduction, run_scripted
    from recombine.runs.directory_lock import exclusive_use
    from recombine.runs.report import render_reproduction
    from recombine.train.compilation import resolve_compile_mode
    from recombine.train.device import resolve_device

    if args.list:
        width = max(len(name) for name in experiments.REPRODUCTIONS)
        for name, known in sorted(experiments.REPRODUCTIONS.items()):
            print(f"{name:<{width}}  {known.description}")
        return 0
    if not args.name:
        names = ", ".join(sorted(experiments.REPRODUCTIONS))
        raise UserError(f"name a reproduction (or --list); valid choices: {names}")
    reproduction = experiments.get(args.name)
    _check_seeds(args.seeds)
    out = _output_dir(args, "reproduce-", args.name)
    if isinstance(reproduction, ScriptedReproduction):
        if args.models or args.columns:
            raise UserError(
                f"--models and --columns pick cells of grid reproductions; "
                f"{args.name} takes overrides instead"
            )
        if args.no_progress:
            raise UserError(f"--no-progress is for grid reproductions; {args.name} shows its own progress")
        overrides = _scripted_overrides(args, args.name, reproduction.config_class)
        report = run_scripted(reproduction, out, args.seeds, args.quick, overrides, on_event=_print_event)
        print(report.read_text())
        print(f"report: {report}, data: {out / 'results.json'}")
        return 0
    if args.overrides:
        raise UserError(f"{args.name} is a grid of runs; change it with a recipe (recombine sweep)")
    device = args.device or "cpu"
    resolve_device(device)  # before any run starts
    compile_mode = resolve_compile_mode(args.compile or "off")
    with exclusive_use(out):  # the report too is written by this process alone
        run_grid(
            reproduction,
            out,
            seeds=args.seeds if args.seeds is not None else reproduction.seeds,
            quick=args.quick,
            jobs=args.jobs,
            labels=_comma_list(args.models),
            on_event=_print_event,
            columns=_comma_list(args.columns),
            device=device,
            compile_mode=compile_mode,
            progress=_grid_progress(args),
        )
        print(render_reproduction(out))
    print(f"report: {out / 'report.md'}, data: {out / 'results.json'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if args.index:
        from recombine.runs.html_index import render_index

        print(render_index(Path(args.path)))
        print(f"html: {Path(args.path) / 'index.html'}")
        return 0
    from recombine.runs.report import render, report_page

    page = report_page(Path(args.path))
    print(render(Path(args.path), html=args.html))
    if args.html:
        print(f"html: {page}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from recombine.runs.archive import archive_grid
    from recombine.runs.report import render_reproduction

    n_runs = archive_grid(Path(args.path), Path(args.dest), with_checkpoints=args.with_checkpoints)
    print(render_reproduction(Path(args.dest), html=True))
    kept = "with last.pt and best.pt" if args.with_checkpoints else "no checkpoints"
    print(f"archived {n_runs} runs' records ({kept}, no TensorBoard events) in {args.dest}")
    print(f"report: {Path(args.dest) / 'report.md'}, {Path(args.dest) / 'report.html'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from recombine.experiments.executors import make_executor
    from recombine.experiments.recipe import load_sweep_recipe
    from recombine.experiments.reproduction import run_trials
    from recombine.experiments.scripted_reproduction import ScriptedRecipe
    from recombine.runs.directory_lock import exclusive_use
    from recombine.runs.report import render_reproduction
    from recombine.train.compilation import resolve_compile_mode
    from recombine.train.device import resolve_device

    recipe = load_sweep_recipe(args.recipe)
    if isinstance(recipe, ScriptedRecipe):
        return _sweep_scripted(recipe, args)
    device = args.device or "cpu"
    if args.executor == "ray" and device != "cpu":
        if device != "cuda":  # Ray hands each trial its GPU(s) as CUDA_VISIBLE_DEVICES
            raise UserError(
                f"--device {device}: under --executor ray Ray assigns the GPUs; use --device cuda"
            )
    else:
        resolve_device(device)  # before any trial starts
    if args.gpus_per_trial is not None and (args.executor != "ray" or device == "cpu"):
        raise UserError("--gpus-per-trial is for --executor ray with --device cuda")
    gpus = (1.0 if args.gpus_per_trial is None else args.gpus_per_trial) if device != "cpu" else 0.0
    compile_mode = resolve_compile_mode(args.compile or "off")
    executor = make_executor(args.executor, args.workers, args.address, gpus)
    seeds = recipe.seeds if args.seeds is None else args.seeds
    _check_seeds(seeds)
    out = _output_dir(args, "sweep-", recipe.name)
    with exclusive_use(out):  # the report too is written by this process alone
        grid = run_trials(
            recipe,
            out,
            seeds=seeds,
            quick=args.quick,
            executor=executor,
            labels=_comma_list(args.models),
            on_event=_print_event,
            columns=_comma_list(args.columns),
            device=device,
            compile_mode=compile_mode,
            progress=_grid_progress(args),
        )
        print(render_reproduction(out, html=True))
    print(f"report: {out / 'report.md'}, {out / 'report.html'}, data: {out / 'results.json'}")
    if grid.failed:
        broken, stopped = len(grid.failed) - len(grid.interrupted), len(grid.interrupted)
        counts = [f"{broken} failed"] * bool(broken) + [f"{stopped} interrupted"] * bool(stopped)
        print(
            f"{' and '.join(counts)} of {len(grid.outcomes)} trials; re-run the same command to continue",
            file=sys.stderr,
        )
        return 1
    return 0


def _sweep_scripted(recipe: Any, args: argparse.Namespace) -> int:
    """A recipe naming a scripted reproduction: its experiment runs in this process."""
    if args.executor != "local" or args.models or args.columns or args.no_progress:
        raise UserError(
            f"{recipe.name} runs the scripted experiment {recipe.reproduction.name} in this process; "
            "--executor ray, --models, --columns and --no-progress apply to grid recipes"
        )
    config = dict(recipe.config)
    _forward_session_options(args, recipe.name, recipe.reproduction.config_class, config)
    recipe = dataclasses.replace(recipe, config=config)
    _check_seeds(args.seeds)
    out = _output_dir(args, "sweep-", recipe.name)
    report = recipe.run(out, args.seeds, args.quick, on_event=_print_event)
    print(report.read_text())
    print(f"report: {report}, data: {out / 'results.json'}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from recombine.runs.listing import filter_runs, find_runs, format_table, varying_fields

    root = Path(args.dir)
    runs = filter_runs(find_runs(root), args.task, args.model, args.status, args.where)
    if args.json:
        print(json.dumps([run.to_dict() for run in runs], indent=2))
        return 0
    if runs:
        print(format_table(runs, root, varying_fields(runs) if args.compare else None))
    # the DNC reproductions keep their runs in a store of their own; the filters are for run directories
    filtered = any(value is not None for value in (args.task, args.model, args.status)) or bool(args.where)
    reproductions = [] if filtered else _dnc_reproductions(root)
    for index, (directory, table) in enumerate(reproductions):
        print(("\n" if runs or index else "") + f"DNC runs in {directory}:\n{table}")
    if not runs and not reproductions:
        print(f"no runs under {root} match", file=sys.stderr)
    return 0


def _dnc_reproductions(root: Path) -> list[tuple[Path, str]]:
    """Each DNC reproduction directory under ``root`` with the table of its kept and in-progress runs."""
    from recombine.experiments.dnc_trial_listing import dnc_trials, find_dnc_reproductions, format_dnc_trials

    tables = []
    for directory in find_dnc_reproductions(root):
        trials = dnc_trials(directory)
        if trials:
            tables.append((directory, format_dnc_trials(trials)))
    return tables


def cmd_inspect(args: argparse.Namespace) -> int:
    from recombine.probes.attention_maps import load_run_model, plot_step_maps, step_maps

    model, task = load_run_model(args.run, args.checkpoint)
    maps = step_maps(model, task, args.split, args.index)
    out = Path(args.out) if args.out else Path(args.run) / "figures" / f"maps-{args.split}-{args.index}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_step_maps(maps, out, title=" ".join(maps.tokens[1:-1]) + ":")
    print(f"prediction {maps.prediction}, target {maps.target}; figure: {out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from recombine.runs.reevaluation import evaluate_run, format_evaluations
    from recombine.train.device import resolve_device

    layers: list[int | None] = [None]
    if args.test_layers:
        try:
            layers = [int(value) for value in _comma_list(args.test_layers) or []]
        except ValueError:
            raise UserError(
                f"--test-layers takes comma-separated integers, got {args.test_layers!r}"
            ) from None
    splits = _comma_list(args.splits)
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    result = evaluate_run(
        args.run, args.checkpoint, layers, splits, args.batch_size, resolve_device(args.device)
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_evaluations(result))
    return 0


#: Tasks with an official file format: name -> module with ``export_official(data, part, out)``.
EXPORTERS = {"scan": "recombine.tasks.scan", "pcfg": "recombine.tasks.pcfg_set"}


def cmd_export(args: argparse.Namespace) -> int:
    import importlib

    import yaml

    from recombine import tasks  # not run_config: exporting needs no torch
    from recombine.errors import choices_hint

    if args.task not in EXPORTERS:
        raise UserError(
            f"no official file format for task {args.task!r}; {choices_hint(args.task, EXPORTERS)}"
        )
    if args.seed < 0:
        raise UserError("--seed must be a non-negative integer")
    config: dict[str, Any] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item!r} is not of the form field=value (e.g. official_dir=DIR)")
        try:
            config[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            config[key] = value
    config["split"] = args.split
    data = tasks.get(args.task, seed=args.seed, **config)
    written = importlib.import_module(EXPORTERS[args.task]).export_official(data, args.part, args.out)
    for path in written:
        print(path)
    return 0


def cmd_probe_masks(args: argparse.Namespace) -> int:
    from recombine.probes.attention_maps import load_run_model
    from recombine.probes.mask_probe import MaskProbeConfig, MaskTarget, probe_masks, write_probe_outputs

    targets = [MaskTarget.parse(text) for text in args.target]
    overrides = {
        "steps": args.steps,
        "alpha": args.alpha,
        "learning_rate": args.lr,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "eval_examples": args.eval_examples,
    }
    config = MaskProbeConfig(**{key: value for key, value in overrides.items() if value is not None})
    if config.steps < 1 or config.alpha < 0 or config.learning_rate <= 0:
        raise UserError("--steps must be >= 1, --alpha >= 0 and --lr > 0")
    model, task = load_run_model(args.run, args.checkpoint)
    for target in targets:  # check every target before the (slow) mask training
        target.select(task)
    stem = "-".join(target.file_stem for target in targets)
    out = Path(args.out) if args.out else Path(args.run) / "probes" / f"masks-{stem}"
    result = probe_masks(model, task, targets, config)
    written = write_probe_outputs(result, targets, out)
    print(result.accuracy_table())
    if result.iou is not None:
        print(f"IoU {100 * result.iou:.1f} %, IoMin {100 * result.iomin:.1f} %")  # type: ignore[operator]
    print(f"written: {', '.join(str(path) for path in written)}")
    return 0


def cmd_probe_attention(args: argparse.Namespace) -> int:
    from recombine.probes.attention_probe import attention_probe, example_file_stem

    out = (
        Path(args.out)
        if args.out
        else Path(args.run) / "probes" / f"attention-{example_file_stem(args.example)}"
    )
    written = attention_probe(args.run, args.example, out, args.checkpoint)
    print(f"written: {', '.join(str(path) for path in written)}")
    return 0


def cmd_probe_representations(args: argparse.Namespace) -> int:
    from recombine.probes.representation_compatibility import representation_compatibility, write_outputs
    from recombine.runs.store import RunDir

    if not RunDir(Path(args.run)).config_path.is_file():
        return _representation_seed_study(args)
    result = representation_compatibility(
        args.run, args.checkpoint, args.clusters, args.linkage, args.min_distance
    )
    out = Path(args.out) if args.out else Path(args.run) / "probes" / "representations"
    written = write_outputs(result, out)
    print(result.summary_table())
    print(result.summary())
    print(f"written: {', '.join(str(path) for path in written)}")
    return 0


def _representation_seed_study(args: argparse.Namespace) -> int:
    """``probe representations DIR`` on a directory of runs: the probe on each, beside its OOD accuracy."""
    from recombine.probes.representation_seed_study import seed_study, write_study

    out = Path(args.out) if args.out else Path(args.run) / "probes" / "representations"
    study = seed_study(
        args.run,
        args.checkpoint,
        args.split,
        args.threshold,
        args.clusters,
        args.linkage,
        args.min_distance,
        out_dir=out,
    )
    written = write_study(study, out)
    print(study.table())
    print(f"written: {', '.join(str(path) for path in written)} and one folder per run under {out}")
    return 0


def cmd_probe_dnc_trace(args: argparse.Namespace) -> int:
    from recombine.probes.dnc_stored_trace import draw_stored_trace

    path = draw_stored_trace(
        args.directory,
        args.out,
        variant=args.variant,
        seed=args.seed,
        steps=args.steps,
        run_name=args.run,
        example=args.example,
        head=args.head,
    )
    print(f"written: {path}")
    return 0


def cmd_probe_dnc_errors(args: argparse.Namespace) -> int:
    from recombine.probes.dnc_position_errors import format_position_errors, probe_position_errors

    results, path = probe_position_errors(
        args.directory, args.out, args.sequences, args.sequence_seed, args.bin, args.min_sequences
    )
    print(format_position_errors(results, args.bin))
    print(f"written: {path}")
    return 0


def cmd_probe_listops_operators(args: argparse.Namespace) -> int:
    from recombine.probes.listops_operators import (
        format_operator_accuracy,
        operator_accuracy,
        save_operator_accuracy,
    )

    result = operator_accuracy(args.run, args.split, args.checkpoint)
    out = Path(args.out) if args.out else Path(args.run) / "probes" / f"listops-operators-{args.split}.json"
    print(format_operator_accuracy(result))
    print(f"written: {save_operator_accuracy(result, out)}")
    return 0


#: what a user can do after Ctrl-C, by command
INTERRUPT_HINTS = {
    "train": ": resume with `recombine train --resume RUN`",
    "reproduce": ": the same command again resumes it (grids and most scripted ones keep their runs)",
    "sweep": ": run the same command again to resume (finished trials are kept)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="recombine", description="compositional generalization laboratory")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    for name, handler, what in (("tasks", cmd_tasks, "tasks"), ("models", cmd_models, "models")):
        sub = commands.add_parser(name, help=f"list registered {what}")
        sub.add_argument("--json", action="store_true", help="machine-readable output with config fields")
        sub.set_defaults(handler=handler)

    train = commands.add_parser(
        "train", help="train one run: recombine train task=ctl model=ndr train.steps=3000"
    )
    train.add_argument("items", nargs="*", help="an optional recipe.yaml, then key=value overrides")
    train.add_argument(
        "--run-dir", help="where to store the run (default runs/<task>-<model>-seed<k>-<time>)"
    )
    train.add_argument(
        "--resume",
        metavar="RUN",
        help="continue an interrupted run from its last checkpoint (train.steps=N extends a finished one)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_device_argument(train)
    _add_compile_argument(train)
    train.set_defaults(handler=cmd_train)

    reproduce = commands.add_parser("reproduce", help="run a paper table at CPU scale and write a report")
    reproduce.add_argument("name", nargs="?", help="reproduction name, e.g. ndr-ctl")
    reproduce.add_argument("--list", action="store_true", help="list the named reproductions")
    reproduce.add_argument(
        "overrides", nargs="*", help="key=value changes to a scripted reproduction's config (e.g. steps=500)"
    )
    reproduce.add_argument("--seeds", type=int, help="number of seeds (default: the reproduction's own)")
    reproduce.add_argument(
        "--quick", action="store_true", help="a few hundred steps: checks the pipeline only"
    )
    reproduce.add_argument("--out", help="output directory (default runs/reproduce-NAME)")
    reproduce.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs in parallel (each on one thread; grids and scripted reproductions with a jobs field)",
    )
    reproduce.add_argument("--models", help="comma-separated row labels to run (default: all rows)")
    reproduce.add_argument("--columns", help="comma-separated column names to run (default: all columns)")
    _add_device_argument(reproduce)
    _add_compile_argument(reproduce)
    _add_grid_progress_argument(reproduce)
    reproduce.set_defaults(handler=cmd_reproduce)

    inspect = commands.add_parser(
        "inspect", help="plot attention and gate maps of a trained run, step by step"
    )
    inspect.add_argument("run", help="a run directory")
    inspect.add_argument("--split", default="test_ood")
    inspect.add_argument("--index", type=int, default=0, help="example index within the split")
    inspect.add_argument("--checkpoint", default="best", choices=["best", "last"])
    inspect.add_argument("--out", help="PNG path (default RUN/figures/maps-SPLIT-INDEX.png)")
    inspect.set_defaults(handler=cmd_inspect)

    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a stored run's checkpoint again, e.g. with other shared-layer step counts",
    )
    evaluate.add_argument("run", help="a run directory")
    evaluate.add_argument("--checkpoint", default="best", choices=["best", "last"])
    evaluate.add_argument(
        "--test-layers",
        help="comma-separated shared-layer step counts (model.test_layers); default: the run's own",
    )
    evaluate.add_argument("--splits", help="comma-separated splits (default: those the run evaluated)")
    evaluate.add_argument(
        "--batch-size", type=int, help="evaluation batch size (default: train.eval_batch_size)"
    )
    evaluate.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    evaluate.add_argument("--json", action="store_true", help="machine-readable output")
    evaluate.set_defaults(handler=cmd_evaluate)

    probe = commands.add_parser(
        "probe",
        help="analyses of a trained run (weight masks, attention maps, CTL++ representations, DNC traces, "
        "ListOps operators)",
    )
    probes = probe.add_subparsers(dest="probe", required=True, parser_class=_Parser)
    masks = probes.add_parser(
        "masks", help="train a weight mask on a target split; accuracy with the mask and its inverse"
    )
    masks.add_argument(
        "run", help="a run directory of a classification or seq2seq task (e.g. from `recombine train`)"
    )
    masks.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="SPLIT[:depth=N]",
        help="the mask's target: a split, or one depth of a classification split (train:depth=3); "
        "give two to compare",
    )
    masks.add_argument("--steps", type=int, help="mask training steps (default 2000; thesis 20000)")
    masks.add_argument("--alpha", type=float, help="regulariser weight (default beta/batch = 1e-4/128)")
    masks.add_argument("--lr", type=float, help="mask learning rate (default 1e-2)")
    masks.add_argument("--batch-size", type=int, help="mask training batch size (default 128)")
    masks.add_argument("--seed", type=int, help="mask sampling and batch seed (default 0)")
    masks.add_argument(
        "--eval-examples",
        type=int,
        help="evaluate on a seeded sample of this many examples per split (default 0: all)",
    )
    masks.add_argument("--checkpoint", default="best", choices=["best", "last"])
    masks.add_argument("--out", help="output directory (default RUN/probes/masks-TARGETS)")
    masks.set_defaults(handler=cmd_probe_masks)
    attention = probes.add_parser(
        "attention",
        help="attention maps per step and head and copy-gate activations of one example (Figs. 5.3-5.4)",
    )
    attention.add_argument("run", help="a run directory of a Transformer/NDR classifier")
    attention.add_argument(
        "--example", required=True, help='space-separated tokens of the task vocabulary, e.g. "c b a 3"'
    )
    attention.add_argument("--checkpoint", default="best", choices=["best", "last"])
    attention.add_argument("--out", help="output directory (default RUN/probes/attention-<example>)")
    attention.set_defaults(handler=cmd_probe_attention)
    representations = probes.add_parser(
        "representations",
        help="CTL++ symbol-representation similarity across functions, clusters, E.2.1 score (Fig. 6.3, E.2)",
    )
    representations.add_argument(
        "run",
        help="a run directory of a CTL++ classification run, or a directory of runs (a reproduction's or "
        "sweep's output): then every CTL++ run is probed and set beside its OOD accuracy (seed study, E.2.2)",
    )
    representations.add_argument("--checkpoint", default="best", choices=["best", "last"])
    representations.add_argument(
        "--clusters", type=int, default=2, help="flat clusters per symbol (C_1, C_2)"
    )
    representations.add_argument(
        "--linkage", default="average", choices=["average", "complete", "single", "weighted"]
    )
    representations.add_argument(
        "--min-distance",
        type=float,
        default=0.1,
        help="keep clusters closer than this cosine distance merged (0: force the cut)",
    )
    representations.add_argument(
        "--split", default="test_ood", help="directory of runs only: the split whose accuracy decides success"
    )
    representations.add_argument(
        "--threshold",
        type=float,
        default=0.95,
        help="directory of runs only: a run succeeds at this accuracy or above",
    )
    representations.add_argument("--out", help="output directory (default RUN/probes/representations)")
    representations.set_defaults(handler=cmd_probe_representations)
    dnc_trace = probes.add_parser(
        "dnc-trace",
        help="memory trace of a stored DNC run: weightings, links, read modes, read mask (Figs. 2.2b-2.4)",
    )
    dnc_trace.add_argument(
        "directory", help="output directory of dnc-repeat-copy, dnc-assoc-recall or dnc-key-value"
    )
    dnc_trace.add_argument("--variant", help="e.g. dnc_m (needed when the directory holds several)")
    dnc_trace.add_argument("--seed", type=int, help="the run's seed (needed when it holds several)")
    dnc_trace.add_argument(
        "--steps",
        type=int,
        help="the run's training steps, for a run still training its target (when it holds several)",
    )
    dnc_trace.add_argument(
        "--run", help="the run's weights file, e.g. dnc_m-seed0-1a2b3c4d5e (as errors list them)"
    )
    dnc_trace.add_argument("--example", type=int, default=0, help="index into the seed's evaluation set")
    dnc_trace.add_argument("--head", type=int, default=0, help="read head to show")
    dnc_trace.add_argument(
        "--out", help="figure path, .png/.pdf/.svg (default DIR/probes/trace_<run>_ex<K>.png)"
    )
    dnc_trace.set_defaults(handler=cmd_probe_dnc_trace)
    dnc_errors = probes.add_parser(
        "dnc-errors",
        help="bit error by answer position of every run of a DNC reproduction (the blur of Fig. 2.3a)",
    )
    dnc_errors.add_argument(
        "directory", help="output directory of dnc-repeat-copy, dnc-assoc-recall or dnc-key-value"
    )
    dnc_errors.add_argument("--sequences", type=int, default=256, help="sequences each run answers")
    dnc_errors.add_argument("--sequence-seed", type=int, default=0, help="seed of those sequences")
    dnc_errors.add_argument("--bin", type=int, default=16, help="answer positions per bin (table, figure)")
    dnc_errors.add_argument(
        "--min-sequences", type=int, default=10, help="the figure leaves out bins fewer sequences reach"
    )
    dnc_errors.add_argument(
        "--out", help="figure path, .png/.pdf/.svg (default DIR/probes/position_errors.png)"
    )
    dnc_errors.set_defaults(handler=cmd_probe_dnc_errors)
    listops_operators = probes.add_parser(
        "listops-operators",
        help="accuracy of a ListOps run by the operator at each example's root and dependency depth",
    )
    listops_operators.add_argument("run", help="a run directory of task listops")
    listops_operators.add_argument(
        "--split", default="valid_iid", help="the split to read (default valid_iid)"
    )
    listops_operators.add_argument("--checkpoint", default="best", choices=["best", "last"])
    listops_operators.add_argument(
        "--out", help="JSON path (default RUN/probes/listops-operators-SPLIT.json)"
    )
    listops_operators.set_defaults(handler=cmd_probe_listops_operators)

    export = commands.add_parser(
        "export", help="write a task split in its official file format (SCAN .txt, PCFG SET .src/.tgt)"
    )
    export.add_argument("task", help="scan or pcfg")
    export.add_argument("--split", required=True, help="split name, e.g. length or productivity")
    export.add_argument(
        "--part", required=True, choices=("train", "test"), help="train = train + valid_iid, test = the rest"
    )
    export.add_argument(
        "--out", required=True, help="scan: a file; pcfg: a directory (DIR/) or a file prefix"
    )
    export.add_argument("--seed", type=int, default=0, help="task seed (default 0)")
    export.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="task config field, e.g. official_dir=DIR (repeatable)",
    )
    export.set_defaults(handler=cmd_export)

    report = commands.add_parser("report", help="re-render the report of a run or reproduction directory")
    report.add_argument("path")
    report.add_argument(
        "--html",
        action="store_true",
        help="also write a static report.html (an unfinished DNC reproduction: progress.html)",
    )
    report.add_argument(
        "--index",
        action="store_true",
        help="write PATH/index.html and PATH/index.md over every reproduction and sweep directory under PATH",
    )

    archive = commands.add_parser(
        "archive",
        help="copy a reproduction or sweep directory without TensorBoard events (and without checkpoints, "
        "unless --with-checkpoints); report from the copy",
    )
    archive.add_argument("path", help="a reproduction or sweep directory")
    archive.add_argument("dest", help="where the archive goes (e.g. docs/reproductions/results/NAME)")
    archive.add_argument(
        "--with-checkpoints",
        action="store_true",
        help="also copy each run's last.pt and best.pt (about four times the model's float32 size per run), "
        "so that the runs can be resumed, extended and probed from a copy of the archive; refused while "
        "the grid trains",
    )
    archive.set_defaults(handler=cmd_archive)

    sweep = commands.add_parser(
        "sweep", help="run a grid recipe (models x settings x seeds) locally or on Ray, then report"
    )
    sweep.add_argument("recipe", help="a sweep recipe, e.g. recipes/ndr-ctl.yaml (docs/sweeps.md)")
    sweep.add_argument("--executor", default="local", help="local (process pool, default) or ray")
    sweep.add_argument("--workers", type=int, default=1, help="trials at once (each on one thread when > 1)")
    sweep.add_argument("--address", help="Ray cluster address (default: a local Ray instance)")
    sweep.add_argument(
        "--gpus-per-trial",
        type=float,
        help="GPUs Ray reserves per trial with --device cuda (default 1; 0.25: four trials share a GPU)",
    )
    sweep.add_argument("--out", help="output directory (default runs/sweep-NAME)")
    sweep.add_argument("--seeds", type=int, help="seeds 1..N (default: the recipe's)")
    sweep.add_argument("--quick", action="store_true", help="the recipe's quick_train settings")
    sweep.add_argument("--models", help="comma-separated row labels to run (default: all rows)")
    sweep.add_argument("--columns", help="comma-separated column names to run (default: all columns)")
    _add_device_argument(sweep)
    _add_compile_argument(sweep)
    _add_grid_progress_argument(sweep)
    sweep.set_defaults(handler=cmd_sweep)

    runs = commands.add_parser("runs", help="list and filter the runs under a directory")
    runs.add_argument("dir", nargs="?", default="runs", help="where to look (default runs/)")
    runs.add_argument("--task")
    runs.add_argument("--model")
    runs.add_argument("--status", help="finished, failed, running or interrupted")
    runs.add_argument("--where", action="append", metavar="KEY=VALUE", help="config field, e.g. seed=2")
    runs.add_argument(
        "--json", action="store_true", help="machine-readable output with full configs (run directories only)"
    )
    runs.add_argument(
        "--compare", action="store_true", help="add a column per config field that differs between the runs"
    )
    runs.set_defaults(handler=cmd_runs)
    report.set_defaults(handler=cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # `train` takes key=value overrides before and after its options (argparse stops at the first)
    if extra and (args.command not in ("train", "reproduce") or any(item.startswith("-") for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "train":
        items = list(args.items) + extra
        args.recipe = items.pop(0) if items and items[0].endswith((".yaml", ".yml")) else None
        args.overrides = items
    if args.command == "reproduce":
        args.overrides = list(args.overrides) + extra
    try:
        with sigterm_as_keyboard_interrupt():  # `kill PID` ends a command as Ctrl-C does
            return args.handler(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted{INTERRUPT_HINTS.get(args.command, '')}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        sys.stderr.close()
        return 0
