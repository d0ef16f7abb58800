"""A long-lived tuning worker process (harness/tune/worker.py) that measures trials one JSON line
at a time, so a study pays the interpreter, CUDA context and oracle set-up once, not per trial.

A trial that crashes the worker (a kernel fault aborts it), reports a launch error (the CUDA
context may be unusable) or gives no answer within its timeout (a hang: the worker is killed)
becomes a failed result, and the next trial starts a fresh worker.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time

from harness.measure.environment import LIBRARY_DIR


class TrialProcess:
    """One worker process, started on first use and restarted after a failure."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._stderr = None

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")
        # where harness is
        path = os.pathsep.join(filter(None, [str(LIBRARY_DIR.parent), os.environ.get("PYTHONPATH")]))
        self._process = subprocess.Popen([sys.executable, "-m", "harness.tune.worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                         text=True, env={**os.environ, "PYTHONPATH": path},
                                         # its own session: a terminal's Ctrl-C interrupts the tune, which
                                         # re-queues the trial; it must not kill the worker first and look
                                         # like a config that crashed it (the worker exits on stdin's end)
                                         start_new_session=True)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().strip().splitlines()
        return (lines or ["no output"])[-1][:300]

    def run(self, job: dict, timeout_s: float) -> dict:
        """The worker's answer to ``job``, or a failed result ("timeout" or "runtime") with its reason."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self._start()
        process = self._process
        try:
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it died on start-up; reported below
        line = self._read_line(timeout_s)
        if line is None:  # no answer in time: a hang
            self.close()
            return {"status": "timeout", "reason": f"no answer within {timeout_s:.0f} s (hang)"}
        if not line:  # end of output: the worker died (a fault aborts it)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            reason = f"worker exited with code {code}: {self._stderr_tail()}"
            self.close()
            return {"status": "runtime", "reason": reason}
        result = json.loads(line)
        if result.get("status") == "error":
            self.close()  # a launch error can leave the CUDA context unusable
        return result

    def _read_line(self, timeout_s: float) -> str | None:
        """The next answer line; "" at end of output; None when ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if selector.select(timeout=left):
                    line = self._process.stdout.readline()
                    if not line or line.startswith("{"):
                        return line
        return None

    def close(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> "TrialProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
