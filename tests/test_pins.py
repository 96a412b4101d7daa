"""One pinned version per package: pyproject.toml (what `pip install -e` and CI install), the conda
environments of envs/ (what a cluster's jobs run in) and the README agree. The measure environment
is the GPU stack (torch and transformers as on the lent H200, a CUDA build), so those two are
checked against the device leg of .ci/run instead of the CPU development pins."""

import re
import tomllib

import yaml

from conftest import REPO

CONDA_NAMES = {"matplotlib-base": "matplotlib", "seaborn-base": "seaborn"}  # conda-forge's names


def pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return dict(r.split("==") for r in reqs)


def requirement_lines(path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def conda_pins(name: str) -> dict[str, str]:
    env = yaml.safe_load((REPO / "envs" / name).read_text())
    pins = {}
    for dep in env["dependencies"]:
        items = dep["pip"] if isinstance(dep, dict) else [dep]
        # `-r file` (relative to the environment file): the pinned list a GPU machine gets as wheels
        items = [x for item in items for x in (requirement_lines(REPO / "envs" / item.split()[1]) if item.startswith("-r ") else [item])]
        for item in items:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==?\s*([^\s=]+)", item)
            assert m, f"envs/{name}: {item!r} is not pinned to one version"
            pins[CONDA_NAMES.get(m.group(1), m.group(1))] = m.group(2)
    return pins


def device_leg_pins() -> dict[str, str]:
    ci = (REPO / ".ci" / "run").read_text()
    line = next(line for line in ci.splitlines() if ".venv-t517/bin/pip install" in line)
    return dict(re.findall(r"([A-Za-z0-9_\-]+)==([^\s]+)", line))


def test_analysis_environment_matches_pyproject():
    ours = pyproject_pins()
    for package, version in conda_pins("analysis.yaml").items():
        if package in ("python", "pip"):  # the interpreter and installer, not the project's packages
            continue
        assert ours.get(package) == version, f"envs/analysis.yaml pins {package} {version}, pyproject.toml {ours.get(package)}"


def test_measure_environment_matches_pyproject_and_the_device_stack():
    ours, device = pyproject_pins(), device_leg_pins()
    for package, version in conda_pins("measure.yaml").items():
        if package in ("python", "pip"):
            continue
        if package == "torch":  # a CUDA build there, the CPU build here: the README names both
            continue
        if package == "transformers":  # the GPU stack's, which .ci/run's device leg tests on the CPU
            assert device.get(package) == version, f"envs/measure.yaml pins {package} {version}, .ci/run's device leg {device.get(package)}"
            continue
        assert ours.get(package) == version, f"envs/measure.yaml pins {package} {version}, pyproject.toml {ours.get(package)}"


def test_readme_names_the_pinned_versions():
    readme = " ".join((REPO / "README.md").read_text().split())  # as a reader sees it, line breaks aside
    torch_cpu = re.search(r"pip install torch==([0-9.]+)", readme).group(1)
    assert f"torch=={torch_cpu}" in (REPO / ".ci/run").read_text()
    measure = conda_pins("measure.yaml")
    assert f"transformers {measure['transformers']}" in readme and f"torch {measure['torch']}" in readme


def test_measure_packages_are_one_list_for_the_cluster_and_the_offline_gpu():
    """envs/measure.yaml installs envs/measure-requirements.txt, and the README's offline recipe
    downloads and installs that same file."""
    env = yaml.safe_load((REPO / "envs/measure.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-r measure-requirements.txt"]
    pins = requirement_lines(REPO / "envs/measure-requirements.txt")
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s=]+", p) for p in pins)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "pip download -r envs/measure-requirements.txt" in readme and "--no-index --find-links" in readme
