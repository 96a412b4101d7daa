"""What a failure on the device means, said once for the session and the environment stage.

Expected failures are data (an invalid cell, or a stage's verdict that a path cannot run here):
no kernel for the call, an operation this build does not implement, out of memory in a session.
Anything else is a bug or a broken machine and fails loudly.
"""

from __future__ import annotations

from decodegap.core.errors import CellNotPossible

# What PyTorch's SDPA says when the pinned backend has no kernel for the shape (CUDA, then CPU).
NO_KERNEL_MESSAGES = ("No available kernel", "No viable backend for scaled_dot_product_attention")
# What "cannot run here" looks like to the environment stage: no kernel for the call, an operation
# this build does not implement, a kernel built for other GPUs, Inductor without a template that fits
# (flex inside the model on the H200).
UNSUPPORTED_MESSAGES = (*NO_KERNEL_MESSAGES, "not supported", "not implemented for", "no kernel image is available",
                        "NoValidChoicesError")

# Exit status of the measurement commands (the session, the environment stage).
EXIT_RECORDED = 0  # a record was written (a valid or an invalid cell: both are data)
EXIT_UNEXPECTED = 1  # an unexpected error: traceback, no record
EXIT_BAD_INPUT = 2  # bad input (unknown key, wrong device, bad value): nothing measured
EXIT_EXISTS = 3  # the session is already recorded: nothing measured


def unsupported(exc: BaseException) -> bool:
    """The failure says the path cannot run here (not that the machine or our call failed)."""
    return isinstance(exc, NotImplementedError) or any(m in str(exc) for m in UNSUPPORTED_MESSAGES)


def classify_expected(exc: BaseException) -> tuple[str, str] | None:
    """(kind, message) for a session's failures that are data, not bugs; None for anything else."""
    import torch

    if isinstance(exc, CellNotPossible):
        return "not possible", str(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        return "out of memory", str(exc).splitlines()[0]
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in NO_KERNEL_MESSAGES):
        return "no kernel", "the attention backend has no kernel for this decode step: " + str(exc).splitlines()[0]
    return None
