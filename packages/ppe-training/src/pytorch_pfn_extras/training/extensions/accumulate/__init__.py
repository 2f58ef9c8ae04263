"""Extensions that accumulate a reported value over an interval and report the result.

Each is called every iteration, with the editor priority, to read the value of the
iteration; its own ``trigger`` decides when the result is reported (see
:class:`~pytorch_pfn_extras.training.extensions.AverageAccumulate`).
"""

from __future__ import annotations

from pytorch_pfn_extras.training.extensions.accumulate.average_accumulate import (
    AverageAccumulate,
)
from pytorch_pfn_extras.training.extensions.accumulate.max_accumulate import MaxAccumulate
from pytorch_pfn_extras.training.extensions.accumulate.min_accumulate import MinAccumulate
from pytorch_pfn_extras.training.extensions.accumulate.standard_deviation_accumulate import (
    StandardDeviationAccumulate,
)
from pytorch_pfn_extras.training.extensions.accumulate.unbiased_standard_deviation_accumulate import (
    UnbiasedStandardDeviationAccumulate,
)

__all__ = [
    "AverageAccumulate",
    "MaxAccumulate",
    "MinAccumulate",
    "StandardDeviationAccumulate",
    "UnbiasedStandardDeviationAccumulate",
]
