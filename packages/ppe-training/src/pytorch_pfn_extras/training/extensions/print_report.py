"""PrintReport and the helpers that lay out its table, at PPE's public module path.

Example:
    >>> from pytorch_pfn_extras.training.extensions.print_report import PrintReport
    >>> manager.extend(PrintReport(["epoch", "iteration", "train/loss"]))
"""

from __future__ import annotations

from collections.abc import Sequence

from pytorch_pfn_extras.training.extensions._print_report import (
    _MIN_WIDTH,
    UNITS,
    PrintReport,
    order_entries,
)

__all__ = [
    "PrintReport",
    "create_header_and_templates",
    "filter_and_sort_entries",
]

_SEPARATOR = "  "


def create_header_and_templates(
    entries: Sequence[str],
) -> tuple[str, list[tuple[str, str, str]]]:
    """Lay out a table with one column per entry, as :class:`PrintReport` prints it.

    Each column is as wide as its key, and at least 10 characters; columns are separated
    by two spaces.

    Args:
        entries: Keys of the columns, in order.

    Returns:
        ``(header, templates)``: the header line (ending with a newline), and for each
        entry ``(key, template, empty)``, where ``template.format(value)`` is the cell of a
        number (followed by the separator) and ``empty`` the blank cell of a missing value.

    Example:
        >>> header, templates = create_header_and_templates(["epoch", "main/loss"])
        >>> row = "".join(t.format(v) for (_, t, _), v in zip(templates, [1, 0.25]))
    """
    widths = [max(_MIN_WIDTH, len(key)) for key in entries]
    header = _SEPARATOR.join(f"{key:<{w}}" for key, w in zip(entries, widths)) + "\n"
    templates = [
        (key, f"{{:<{w}g}}{_SEPARATOR}", " " * (w + len(_SEPARATOR)))
        for key, w in zip(entries, widths)
    ]
    return header, templates


def filter_and_sort_entries(all_entries: Sequence[str], unit: str = "epoch") -> list[str]:
    """Order the keys of log entries for a table that counts in ``unit``, as PrintReport does.

    The key of ``unit`` (``'epoch'`` or ``'iteration'``) comes first; the key of the other
    unit is dropped; ``elapsed_time`` comes last; the other keys keep their order.

    Args:
        all_entries: Keys found in the log entries.
        unit: ``'epoch'`` or ``'iteration'``: the unit of the log report's trigger.

    Raises:
        ValueError: ``unit`` is neither ``'epoch'`` nor ``'iteration'``.

    Example:
        >>> filter_and_sort_entries(["elapsed_time", "main/loss", "iteration", "epoch"])
        ['epoch', 'main/loss', 'elapsed_time']
    """
    if unit not in UNITS:
        message = f"filter_and_sort_entries: unit must be 'epoch' or 'iteration', got {unit!r}"
        raise ValueError(message)
    return order_entries(all_entries, unit)
