"""The user's surface: environment.yml asks for what pyproject.toml declares, the lab packages are installed by
`make install`, `make lab` passes --allow-root exactly as root (tests/test_browser.py starts it), and the README
says how to get `pkit` on the PATH."""
import os
import re
import subprocess
import tomllib
from pathlib import Path

from processes import make_env
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAB_PACKAGES = ("jupyterlab", "ipywidgets", "seaborn")


def _by_name(requirements) -> dict:
    """Requirement strings keyed by their normalised distribution name ('ipywidgets>=8.1' → 'ipywidgets')."""
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-"): r for r in requirements}


def test_environment_yml_asks_for_what_pyproject_toml_declares():
    """environment.yml's pip list is pyproject.toml's dependencies with the cuda, torch and dev extras (what
    `make install` installs), its Python pyproject.toml's; ipywidgets and seaborn are core dependencies
    (pkit.widgets, pkit.figures), jupyterlab is the lab extra and in dev alike (the tests start it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")] == [
        f"python{project['requires-python']}"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed, wanted = set(pip) - {"-e ."}, {*project["dependencies"], *extras["cuda"], *extras["torch"], *extras["dev"]}
    assert listed == wanted, f"environment.yml lacks {wanted - listed}, has beyond pyproject.toml {listed - wanted}"
    core, lab, dev = _by_name(project["dependencies"]), _by_name(extras["lab"]), _by_name(extras["dev"])
    assert {"ipywidgets", "seaborn"} <= set(core) and "jupyterlab" in lab
    assert dev.get("jupyterlab") == lab["jupyterlab"], "pyproject.toml: dev must carry lab's jupyterlab (tests use it)"


def test_make_install_installs_what_the_tests_import():
    """`make test` runs the install target, which installs the dev extra: the lab packages are importable, and
    tqdm's notebook bar finds its widget (without it, executed notebooks warn 'IProgress not found')."""
    install = re.search(r'pip install -q -e "\.\[([\w,]+)\]"', (ROOT / "Makefile").read_text())
    assert install and "dev" in install.group(1).split(",")
    for module in LAB_PACKAGES:
        __import__(module)
    from tqdm import notebook

    assert notebook.IProgress is not None


def _dry_run_lab(env=None) -> str:
    out = subprocess.run(["make", "-n", "-o", "install", "lab"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env or make_env())
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
        command = _dry_run_lab(make_env(PATH=f"{fake}:{os.environ['PATH']}"))
        assert ("--allow-root" in command) == (uid == "0"), command


def test_readme_says_how_to_get_pkit_on_the_path():
    readme = (ROOT / "README.md").read_text()
    assert "source .venv/bin/activate" in readme and ".venv/bin/pkit" in readme
    assert "make lab" in readme and "--allow-root" in readme
