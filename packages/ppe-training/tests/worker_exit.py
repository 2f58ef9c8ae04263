"""Run a torchrun worker's command and record its exit code (the agent does not say it when
it was stopped by a signal).

``python worker_exit.py RECORD_DIR COMMAND...`` writes ``RECORD_DIR/exit_<RANK>`` with the
command's exit code (negative: the signal that ended it) and its stderr's last lines, and
exits with that code. The agent's SIGTERM goes to the worker's whole process group: this
process ignores it (its Python handler does nothing, and the command does not inherit it),
so the command alone decides what to do. The command finds the agent's pid in
``PPE_TEST_AGENT_PID``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def main() -> int:
    record, command = Path(sys.argv[1]), sys.argv[2:]
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    env = {**os.environ, "PPE_TEST_AGENT_PID": str(os.getppid())}
    done = subprocess.run(command, env=env, stderr=subprocess.PIPE, text=True, check=False)
    sys.stderr.write(done.stderr)
    tail = "\n".join(done.stderr.splitlines()[-20:])
    (record / f"exit_{os.environ['RANK']}").write_text(f"{done.returncode}\n{tail}")
    return 128 - done.returncode if done.returncode < 0 else done.returncode  # the shell's way


if __name__ == "__main__":
    sys.exit(main())
