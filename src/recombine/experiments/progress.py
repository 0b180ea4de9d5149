"""Progress output of the experiments with their own training loops (the scripted reproductions).

Two kinds, both on stderr so that stdout and the reports stay clean:

* :func:`training_bar`: a tqdm bar over the steps of one training loop, shown only when stderr is a
  terminal (``disable=None``) and removed when the loop ends (``leave=False``);
* :func:`trial_done`: one line per finished trial, always printed and flushed, so that the log file of a
  long background run shows how far it got, e.g.
  ``[3/6] dnc_ds seed 1: 2000 steps, 203 s, final eval loss 0.12``.

Neither touches a random number generator, so results do not depend on whether progress is shown.
"""

from __future__ import annotations

import sys

from tqdm import tqdm


def training_bar(total: int, description: str) -> tqdm:
    """A bar over ``total`` training steps, labelled ``description`` (e.g. ``"dnc_ds seed 1"``).

    Use it as a context manager and call ``bar.update()`` once per step. Hidden when stderr is not a
    terminal (a log file, a pipe, pytest's capture)."""
    return tqdm(
        total=total,
        desc=description,
        file=sys.stderr,  # looked up now: stderr may have been replaced since import
        leave=False,
        dynamic_ncols=True,
        disable=None,
    )


def trial_done(
    index: int, total: int, name: str, seconds: float, headline: str = "", steps: int | None = None
) -> str:
    """Print ``[index/total] name: [steps steps, ]seconds s[, headline]`` to stderr and flush; the line.

    ``index`` counts from 1; ``headline`` is one number the trial already computed, formatted by the
    caller (``"final eval loss 0.12"``)."""
    parts = [f"{steps} steps"] if steps is not None else []
    parts.append(f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s")
    if headline:
        parts.append(headline)
    line = f"[{index}/{total}] {name}: {', '.join(parts)}"
    print(line, file=sys.stderr, flush=True)
    return line
