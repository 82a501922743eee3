"""The Jupyter kernels that run pkit's notebooks: a kernel per notebook whose log goes to a file
(`kernel_manager`), or one kernel that replays several notebooks in turn (`ReplayKernel`).

Starting a kernel, importing pkit and its plotting stack in it and shutting it down cost about 2 s, as much as
replaying a short notebook; `pkit figures --mode replay` pays that once for all its notebooks. Before each
notebook the shared kernel is brought back to what a fresh one holds: no variables, no open figures, the
matplotlib settings, pandas options, warning filters, working folder and environment it had at start (with the
notebook's own environment on top). A measuring notebook always gets a kernel of its own, so nothing of one
measurement's GPU state (allocations, streams, process groups) reaches the next.

Example:
    >>> import os, papermill                                                      # doctest: +SKIP
    >>> from pkit.notebook_kernel import ReplayKernel                             # doctest: +SKIP
    >>> with open("replay.kernel.log", "w") as log, ReplayKernel(log) as kernel:  # doctest: +SKIP
    ...     for name in ("00_quickstart", "01_compute_vs_network"):
    ...         kernel.prepare(dict(os.environ, PKIT_FIGURES="/tmp/figures"))
    ...         papermill.execute_notebook(f"{name}.ipynb", f"/tmp/{name}.ipynb", km=kernel.manager)
    ...         kernel.release()
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .errors import PkitError

STARTUP_TIMEOUT_S = 60  # seconds a kernel may take to answer its first message
RESET_TIMEOUT_S = 60  # seconds bringing the shared kernel back to its fresh state may take


class KernelResetFailed(PkitError):
    """The shared kernel could not be brought back to its fresh state between two notebooks."""


def kernel_manager(log, base=None):
    """A jupyter_client kernel manager class (`base`, default AsyncKernelManager) whose kernels write their
    stderr (their own log: the 'Kernel is running over TCP without encryption' warning, shutdown notices) to the
    open file `log`, not to this process's terminal; what cells print and raise still reaches the executed
    notebook. It remembers the clients made for it (`clients`), so that their channels can be closed."""
    if base is None:
        from jupyter_client.manager import AsyncKernelManager as base

    class LoggedKernelManager(base):
        def start_kernel(self, **kwargs):
            return super().start_kernel(**{"stderr": log, **kwargs})

        def client(self, **kwargs):
            made = super().client(**kwargs)
            self.clients = [*getattr(self, "clients", []), made]
            return made

    return LoggedKernelManager


# Run once in the shared kernel after it starts: what a fresh kernel holds, kept where a reset does not reach; of
# matplotlib's settings all but the backend and interactive mode, which its first figure sets up once a kernel.
_SNAPSHOT = """
import os, sys, types, warnings, matplotlib, matplotlib.pyplot
_fresh = types.ModuleType("_pkit_fresh_kernel")
_fresh.rc = {k: v for k, v in matplotlib.rcParams.items() if k not in ("backend", "interactive")}
_fresh.filters = list(warnings.filters)
_fresh.cwd, _fresh.environ = os.getcwd(), dict(os.environ)
sys.modules[_fresh.__name__] = _fresh
del os, sys, types, warnings, matplotlib, _fresh
"""

# Run before each notebook: back to the snapshot, then the notebook's environment (`changed`, `removed`: its
# differences from the environment the kernel started with), then a new session: no variables, history or output
# cache, and cells counted from 1.
_RESET = """
def _back_to_fresh(changed, removed):
    import os, sys, warnings, matplotlib, matplotlib.pyplot
    fresh = sys.modules["_pkit_fresh_kernel"]
    matplotlib.pyplot.close("all")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matplotlib.rcParams.update(fresh.rc)
        if "pandas" in sys.modules:
            sys.modules["pandas"].reset_option("all")
    warnings.filters[:] = fresh.filters
    os.chdir(fresh.cwd)
    os.environ.clear()
    os.environ.update(fresh.environ)
    os.environ.update(changed)
    for name in removed:
        os.environ.pop(name, None)
_back_to_fresh({changed!r}, {removed!r})
get_ipython().reset(new_session=True)
"""


class ReplayKernel:
    """One kernel for several notebooks run one after another in replay mode (see the module's docstring).

    Use it as a context manager: it starts the kernel with this process's environment as it is then (its working
    folder `cwd`) and its stderr going to the open file `log`, and shuts it down at the end. Before each notebook,
    `prepare(environment)` (the environment the notebook's own kernel would have inherited); then run the notebook
    on `manager` (papermill's `km`), and `release()` the clients it made."""

    def __init__(self, log, cwd: str | Path | None = None):
        from jupyter_client.manager import KernelManager

        self.log, self.manager = log, kernel_manager(log, KernelManager)(kernel_name="python3")
        self.cwd, self.started_with = str(cwd or os.getcwd()), {}

    def __enter__(self) -> ReplayKernel:
        self.started_with = dict(os.environ)
        self.manager.start_kernel(cwd=self.cwd)
        try:
            self._run(_SNAPSHOT, started=True)
        except BaseException:
            self.manager.shutdown_kernel(now=True)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.manager.shutdown_kernel(now=True)

    def prepare(self, environment: dict[str, str]) -> None:
        """Bring the kernel back to its fresh state, with `environment` as its environment variables."""
        changed = {k: v for k, v in environment.items() if self.started_with.get(k) != v}
        self._run(_RESET.format(changed=changed, removed=sorted(set(self.started_with) - set(environment))),
                  started=False)

    def release(self) -> None:
        """Close the channels of every client made for the kernel so far (papermill makes one per notebook)."""
        for client in getattr(self.manager, "clients", []):
            client.stop_channels()
        self.manager.clients = []

    def _run(self, code: str, started: bool) -> None:
        """Run `code` in the kernel, waiting for its reply on the shell channel. A kernel just `started` is first
        waited for until it answers (jupyter_client's `wait_for_ready`, which then listens 0.2 s for stray IOPub
        messages); one that has answered before takes the request on a shell channel alone, nothing to wait for."""
        client = self.manager.client()
        client.start_channels(iopub=started, stdin=started, hb=started)
        try:
            if started:
                client.wait_for_ready(timeout=STARTUP_TIMEOUT_S)
            reply = self._reply(client, client.execute(code, store_history=False))
        finally:
            self.release()
        content = reply["content"]
        if content["status"] != "ok":
            raise KernelResetFailed(f"the shared replay kernel could not be reset: {content.get('ename')}: "
                                    f"{content.get('evalue')}")

    def _reply(self, client, msg_id: str) -> dict:
        """The shell channel's reply to request `msg_id`; KernelResetFailed when the kernel dies or gives none
        within RESET_TIMEOUT_S."""
        from queue import Empty

        deadline = time.monotonic() + RESET_TIMEOUT_S
        while self.manager.is_alive() and time.monotonic() < deadline:
            try:
                reply = client.get_shell_msg(timeout=1)
            except Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply
        why = f"gave no reply within {RESET_TIMEOUT_S} s" if self.manager.is_alive() else "died"
        raise KernelResetFailed(f"the shared replay kernel {why}")
