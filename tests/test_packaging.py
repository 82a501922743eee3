"""The user's surface: the lab packages are declared alike in pyproject.toml and environment.yml and installed by
`make install`, `make lab` starts JupyterLab as root and as a user, and the README says how to get `pkit` on
the PATH."""
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from processes import end_group, free_port, group_members
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAB_PACKAGES = ("jupyterlab", "ipywidgets", "seaborn")


def _by_name(requirements) -> dict:
    """Requirement strings keyed by their normalised distribution name ('ipywidgets>=8.1' → 'ipywidgets')."""
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-"): r for r in requirements}


def test_lab_packages_agree_in_pyproject_and_environment_yml():
    """ipywidgets and seaborn are core dependencies (pkit.widgets, pkit.figures), jupyterlab is the lab extra and
    in dev (the tests start it); environment.yml asks for each as pyproject.toml does."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    core, lab, dev = _by_name(project["dependencies"]), _by_name(extras["lab"]), _by_name(extras["dev"])
    conda = _by_name(p for p in pip if p != "-e .")
    declared = {**core, **lab}
    assert {"ipywidgets", "seaborn"} <= set(core) and "jupyterlab" in lab
    assert dev.get("jupyterlab") == lab["jupyterlab"], "pyproject.toml: dev must carry lab's jupyterlab (tests use it)"
    for name in LAB_PACKAGES:
        assert conda.get(name) == declared[name], f"environment.yml: expected {declared[name]!r}, got {conda.get(name)!r}"


def test_make_install_installs_what_the_tests_import():
    """`make test` runs the install target, which installs the dev extra: the lab packages are importable, and
    tqdm's notebook bar finds its widget (without it, executed notebooks warn 'IProgress not found')."""
    install = re.search(r'pip install -q -e "\.\[([\w,]+)\]"', (ROOT / "Makefile").read_text())
    assert install and "dev" in install.group(1).split(",")
    for module in ("jupyterlab", "ipywidgets", "seaborn"):
        __import__(module)
    from tqdm import notebook

    assert notebook.IProgress is not None


def _make_env(**extra) -> dict:
    """This environment without what a calling make passes its sub-makes (under `make test` these would make the
    nested make print 'Entering directory' and take the caller's flags), plus `extra`."""
    inherited = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    return {**{k: v for k, v in os.environ.items() if k not in inherited}, **extra}


def _dry_run_lab(env=None) -> str:
    out = subprocess.run(["make", "-n", "-o", "install", "lab"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env or _make_env())
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_lab_passes_allow_root_only_as_root(tmp_path):
    command = _dry_run_lab()
    assert "jupyter lab" in command and command.rstrip().endswith("notebooks/")
    assert ("--allow-root" in command) == (os.getuid() == 0)
    fake = tmp_path / "bin"
    fake.mkdir()
    for uid in ("0", "1000"):  # `make lab` asks `id -u`; a stand-in answers for the other kind of user
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        command = _dry_run_lab(_make_env(PATH=f"{fake}:{os.environ['PATH']}"))
        assert ("--allow-root" in command) == (uid == "0"), command


def _get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never goes through a proxy
    with opener.open(url, timeout=5) as response:
        return response.status, response.read().decode(errors="replace")


@pytest.mark.timeout(240)
def test_make_lab_serves_jupyterlab_and_stops_by_its_pid(tmp_path):
    """`make lab` under this uid (root in CI: --allow-root) on 127.0.0.1, a free port, no browser; the test waits
    for the server to answer, then ends the process group it started and checks that nothing is left."""
    port, token = free_port(), "pkit-test-" + os.urandom(8).hex()
    env = _make_env(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
                    JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
                    JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    args = f"--no-browser --ip=127.0.0.1 --port={port} --port-retries=0"
    # -o install: the venv this test runs in is the one `make lab` uses (VENV), and it is not reinstalled here
    command = ["make", "-s", "-o", "install", "lab", f"VENV={sys.prefix}", f"LAB_ARGS={args}"]
    log = tmp_path / "lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    pgid = proc.pid  # a new session: the make process leads its own process group
    try:
        deadline, answer = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                answer = _get(f"http://127.0.0.1:{port}/api")
                break
            except OSError:
                time.sleep(0.5)
        assert answer is not None, f"no answer on port {port} (exit {proc.poll()}):\n{log.read_text()[-3000:]}"
        assert answer[0] == 200 and "version" in json.loads(answer[1])
        status, page = _get(f"http://127.0.0.1:{port}/lab?token={token}")
        assert status == 200 and "JupyterLab" in page
        servers = [cmd for _, cmd in group_members(pgid) if "jupyter" in cmd]
        assert servers, group_members(pgid)
        assert all(("--allow-root" in cmd) == (os.getuid() == 0) for cmd in servers), servers
    finally:
        left = end_group(pgid, proc, grace_s=30)[0]  # make lab's server stops on SIGTERM to its group
    assert not left, f"processes left behind: {left}"


def test_readme_says_how_to_get_pkit_on_the_path():
    readme = (ROOT / "README.md").read_text()
    assert "source .venv/bin/activate" in readme and ".venv/bin/pkit" in readme
    assert "make lab" in readme and "--allow-root" in readme
