"""The engine's private home: how a run goes (public names stay at PPE's paths:
``training.Trainer``, ``training.Evaluator``, ``engine.create_trainer``, ``create_evaluator``,
``training.extensions.util.ProgressBar``).

Modules, each with one job:

- ``_run_state``: ``RunState``, where a run stands (iteration, epoch length), held by every
  manager and read by the trainer, its logic and the Ignite manager;
- ``_trainer``: ``Trainer``, a handler's training loop on its manager (``_TrainerManager``),
  running the evaluators at their triggers;
- ``_trainer_position``: ``TrainerPosition``, the trainer's position in its data (random
  states, a stateful loader's), a state object of its manager;
- ``_evaluator``: the engine's ``Evaluator`` and ``DistributedEvaluator``;
- ``_evaluation``: what the engine's and the extension's evaluators share (eval mode, metrics,
  size-weighted means, the progress line, what makes each distributed);
- ``_progress``: the progress display redrawn in place (``util.ProgressBar``) and its bar.

The managers (``ExtensionsManager``, ``IgniteExtensionsManager``, their base in
``_base_manager``) stay in ``training``: the engine runs on them.
"""
