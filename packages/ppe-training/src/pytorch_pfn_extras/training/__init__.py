"""Training loops: the extensions manager, extensions and triggers."""

from __future__ import annotations

from pytorch_pfn_extras.training import (
    extension,
    extensions,
    manager,
    metrics,
    trigger,
    triggers,
)
from pytorch_pfn_extras.training._engine._evaluator import DistributedEvaluator, Evaluator
from pytorch_pfn_extras.training._engine._trainer import Trainer
from pytorch_pfn_extras.training._extension import (
    PRIORITY_EDITOR,
    PRIORITY_READER,
    PRIORITY_SNAPSHOT,
    PRIORITY_WRITER,
    Extension,
    ExtensionEntry,
    make_extension,
)
from pytorch_pfn_extras.training._ignite_manager import IgniteExtensionsManager
from pytorch_pfn_extras.training._manager import ExtensionsManager
from pytorch_pfn_extras.training._manager_protocol import (
    ExtensionsManagerProtocol,
    StateObjectProtocol,
)
from pytorch_pfn_extras.training._metrics import AccuracyMetric
from pytorch_pfn_extras.training._trigger_util import (
    Trigger,
    get_trigger,
)
from pytorch_pfn_extras.training._version import __version__

__all__ = [
    "AccuracyMetric",
    "DistributedEvaluator",
    "Evaluator",
    "PRIORITY_EDITOR",
    "PRIORITY_READER",
    "PRIORITY_SNAPSHOT",
    "PRIORITY_WRITER",
    "Extension",
    "ExtensionEntry",
    "ExtensionsManager",
    "ExtensionsManagerProtocol",
    "IgniteExtensionsManager",
    "StateObjectProtocol",
    "Trainer",
    "Trigger",
    "__version__",
    "extension",
    "extensions",
    "get_trigger",
    "make_extension",
    "manager",
    "metrics",
    "trigger",
    "triggers",
]
