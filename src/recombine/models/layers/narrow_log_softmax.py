"""``log_softmax`` over a short last dimension, computed along the first axis of a transposed copy.

PyTorch's CPU ``log_softmax`` vectorises along the softmax dimension itself. When that dimension is
short (the 8 outputs of the hyperteacher, HNET C.2.2; a handful of actions in the grid worlds) and
there are many rows, most of each vector register is wasted: on the development machine, one
thread, ``[2048, 8]`` takes ~250 us forward + backward, against ~65 us when the same numbers are laid
out as ``[8, 2048]`` and normalised along dimension 0, where the kernel vectorises across rows. From
16 classes on the plain call is faster again, so :func:`log_softmax_last` switches on the width
(:data:`NARROW_WIDTH`, 15). The values are identical (same arithmetic, reordered memory); the
gradient is ``log_softmax``'s own backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: last-dimension sizes up to this use the transposed layout (float32, one thread: [2048, 15] 566 us plain vs
#: 192 us transposed, [2048, 16] 137 vs 202 us; 16 floats fill one AVX-512 register)
NARROW_WIDTH = 15
#: fewer rows than this: the copy costs more than it saves (``[64, 8]``: 19 us plain, 22 us transposed)
MIN_ROWS = 256


def log_softmax_last(x: torch.Tensor) -> torch.Tensor:
    """``F.log_softmax(x, dim=-1)``, faster on the CPU for many rows of at most 15 entries."""
    width = x.shape[-1]
    if width > NARROW_WIDTH or x.numel() < MIN_ROWS * width:
        return F.log_softmax(x, dim=-1)
    return F.log_softmax(x.movedim(-1, 0).contiguous(), dim=0).movedim(0, -1)
