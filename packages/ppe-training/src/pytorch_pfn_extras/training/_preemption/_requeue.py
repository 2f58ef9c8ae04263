"""Requeueing a preempted job: Slurm's ``scontrol requeue``, or a command of the user's."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pytorch_pfn_extras.training._preemption import logger

Command = Sequence[str] | Callable[[str | None], Any]

_SLURM_REQUEUE = ("scontrol", "requeue", "{job_id}")
_REQUEUE_TIMEOUT = 60.0  # seconds: scontrol answers in well under a second


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes for this Slurm job, or ``None`` outside Slurm.

    A task of a job array is ``<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>``; any other job
    is ``SLURM_JOB_ID``.
    """
    env = os.environ
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array_job and array_task:
        return f"{array_job}_{array_task}"
    return env.get("SLURM_JOB_ID") or None


def run_requeue(command: Command | None) -> bool:
    """Run ``command`` (Slurm's when ``None``) for this job; return whether it succeeded.

    A failure is logged with the command's output, never raised: the state is saved anyway.
    """
    job_id = slurm_job_id()
    if command is None:
        if job_id is None:
            return False  # the warning was given when training started
        command = _SLURM_REQUEUE
    if callable(command):
        command(job_id)
        return True
    argv = [part.format(job_id=job_id) for part in command]
    # Said before: Slurm may end this process as soon as the job is requeued.
    logger.warning("PreemptionHandler: requeueing the job with %s", argv)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_REQUEUE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.error("PreemptionHandler: the requeue command %s failed: %s", argv, error)
        return False
    if done.returncode != 0:
        logger.error(
            "PreemptionHandler: the requeue command %s exited with %d: %s",
            argv,
            done.returncode,
            (done.stderr or done.stdout).strip(),
        )
        return False
    logger.info("PreemptionHandler: requeued the job with %s", argv)
    return True


def check_command(command: Command | None) -> Command | None:
    """``command`` as a tuple of strings, a callable, or ``None``.

    Raises:
        TypeError: It is neither a sequence of strings nor a callable.
    """
    if command is None or callable(command):
        return command
    if (
        isinstance(command, str)
        or not isinstance(command, Iterable)
        or not all(isinstance(part, str) for part in command)
    ):
        message = (
            "requeue_command must be a sequence of strings (arguments, formatted with "
            f"{{job_id}}) or a callable fn(job_id), got {command!r}"
        )
        raise TypeError(message)
    return tuple(command)
