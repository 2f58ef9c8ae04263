"""``CodeBlockLogic``: steps run as CodeBlocks by the model's runtime."""

from __future__ import annotations

from typing import Any

from pytorch_pfn_extras.handler._logic_base import ModelLogic, Models, Optimizers
from pytorch_pfn_extras.runtime import forward, update_parameters


class CodeBlockLogic(ModelLogic):
    """A logic that runs its steps as CodeBlocks, executed by the model's runtime.

    The training step is ``update_parameters(model, optimizers)`` (forward, backward and
    the step of every optimizer it is given at once, as in PPE, with the runtime's
    autocast and grad scaler options), the
    evaluation step ``forward(model)``; runtimes for custom devices execute them their way.

    Args:
        model_name: The name of the model (and of its optimizer).
        options: ``"backward_outputs"``: the outputs to backpropagate from (by default the
            ``"loss"`` output, or the only output).
    """

    def __init__(self, model_name: str = "main", options: dict[str, Any] | None = None) -> None:
        self.backward_outputs: list[str] | None = None
        super().__init__(model_name, options)

    def consume_options(self, options: dict[str, Any]) -> None:
        """Pop ``"backward_outputs"`` from ``options``."""
        super().consume_options(options)
        if "backward_outputs" in options:
            outputs = options.pop("backward_outputs")
            self.backward_outputs = [outputs] if isinstance(outputs, str) else outputs

    def train_epoch_end(self, models: Models, epoch: int) -> None:
        """Nothing to do at the end of an epoch."""

    def train_step(self, models: Models, optimizers: Optimizers, batch_idx: int, batch: Any) -> Any:
        """Run ``update_parameters(model, optimizers)`` on the batch: every optimizer given
        steps.

        Returns:
            The model's outputs.
        """
        model = self._model(models)
        block = update_parameters(
            model, list(optimizers.values()), backprop_from=self.backward_outputs
        )
        return block(batch)

    def eval_step(self, models: Models, batch_idx: int, batch: Any) -> Any:
        """Run ``forward(model)`` on the batch.

        Returns:
            The model's outputs.
        """
        return forward(self._model(models))(batch)
