"""Process helpers for tests that start servers (JupyterLab): a free local port, the live members of a process
group, ending a group so that nothing is left behind, and `make lab` serving a copy of notebooks/."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live (not zombie) processes in process group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(stat.parent.name), cmd))
        except (OSError, IndexError, ValueError):
            continue  # the process ended while being read
    return found


def end_group(pgid: int, proc: subprocess.Popen | None = None, grace_s: float = 20) -> tuple[list, list]:
    """SIGTERM the process group `pgid`, then SIGKILL what is still there after `grace_s` seconds.

    Returns (the members alive when the grace period ended, the members alive after the SIGKILL): a server
    that stops on SIGTERM leaves the first empty; nothing at all may be left in the second.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_members(pgid):
        if proc is not None:
            proc.poll()  # reap the leader, so it does not stay as a zombie
        time.sleep(0.2)
    survived_term = group_members(pgid)
    for pid, _ in survived_term:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.2)
    return survived_term, group_members(pgid)


def make_env(**extra) -> dict:
    """This environment without what a calling make passes its sub-makes (under `make test` these would make the
    nested make print 'Entering directory' and take the caller's flags), plus `extra`."""
    inherited = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    return {**{k: v for k, v in os.environ.items() if k not in inherited}, **extra}


def get(url: str) -> tuple[int, str]:
    """(status, body) of a GET on 127.0.0.1, never through a proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return response.status, response.read().decode(errors="replace")


class Lab(NamedTuple):
    """A JupyterLab server started by `make lab`: its address, token, log and process group (make leads it)."""
    url: str
    token: str
    log: Path
    pgid: int

    def page(self, notebook: Path) -> str:
        """The lab page opening the served copy of `notebook` in a workspace of its own (no tab of another test)."""
        return f"{self.url}/lab/workspaces/{notebook.stem}/tree/{notebook.name}?token={self.token}"


def lab_settings(folder: Path) -> None:
    """JupyterLab user settings for tests: no autosave (the served copy is thrown away anyway), no news or update
    checks (no network; no toasts over a notebook), every cell in the DOM (no windowing)."""
    for plugin, values in {"@jupyterlab/docmanager-extension/plugin": {"autosave": False},
                           "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                                            "checkForUpdates": False},
                           "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"}}.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def server_config(folder: Path) -> None:
    """Jupyter configuration for tests: none of the server's and the page's own look-ups that run Node.js, which
    nothing here needs: jupyter_lsp's search for language servers at start (`npm prefix -g`), and the build check
    and the extension manager's listing (each reads yarn's configuration)."""
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "labconfig" / "page_config.json").write_text(json.dumps({
        "buildAvailable": False, "buildCheck": False,
        "disabledExtensions": {"@jupyterlab/extensionmanager-extension": True, "@jupyterlab/lsp-extension": True}}))
    (folder / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_lsp": False}}}))


@contextlib.contextmanager
def make_lab(work: Path) -> Iterator[Lab]:
    """`make lab` under this uid on 127.0.0.1, a free port, no browser, run in `work`: there it serves `notebooks/`,
    a copy of the repository's (so nothing can write to notebooks/), with pkit's lab extension (`work/pkit` is this
    checkout's pkit/), `lab_settings` and `server_config`. Yields a `Lab` once the server answers; then ends its
    process group, failing if a process of it outlives SIGTERM."""
    (work / "notebooks").mkdir(parents=True)
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        (work / "notebooks" / notebook.name).write_bytes(notebook.read_bytes())
    (work / "pkit").symlink_to(ROOT / "pkit")
    lab_settings(work / "settings")
    server_config(work / "config")
    port, token = free_port(), "pkit-test-" + os.urandom(8).hex()
    env = make_env(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(work / "runtime"),
                   JUPYTER_CONFIG_DIR=str(work / "config"), JUPYTERLAB_SETTINGS_DIR=str(work / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    args = f"--no-browser --ip=127.0.0.1 --port={port} --port-retries=0"
    # -o install: the venv this test run uses is the one `make lab` uses (VENV), and it is not reinstalled here
    command = ["make", "-s", "-f", str(ROOT / "Makefile"), "-o", "install", "lab", f"VENV={sys.prefix}",
               f"LAB_ARGS={args}"]
    log = work / "lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, up = time.monotonic() + 180, False
        while time.monotonic() < deadline and proc.poll() is None and not up:
            try:
                up = get(f"{url}/api")[0] == 200
            except OSError:
                time.sleep(0.3)
        assert up, f"JupyterLab gave no answer on port {port} (exit {proc.poll()}):\n{log.read_text()[-3000:]}"
        yield Lab(url, token, log, proc.pid)
    finally:
        survived_term, left = end_group(proc.pid, proc, grace_s=30)  # a new session: make leads its own group
    assert not survived_term and not left, f"`make lab` processes left behind: {survived_term}, then {left}"
