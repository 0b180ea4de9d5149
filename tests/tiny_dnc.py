"""Overrides that make a DNC reproduction (``dnc-repeat-copy``, ``dnc-assoc-recall``) train in about a second:
3 steps of a controller of 8 on cells of width 4, no compiling (it would take most of such a run)."""

TINY_DNC_REPRODUCTION = {
    "steps": 3,
    "eval_every": 3,
    "eval_size": 4,
    "batch_size": 4,
    "smooth": 2,
    "d_controller": 8,
    "cell_width": 4,
    "compile_steps": False,
}
