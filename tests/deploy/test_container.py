"""The container files as an operator builds and runs them: the Dockerfile's base image, user,
entrypoint and health check (run against a real ``serve``), the README's install command, the
probes in deploy/'s examples, and every package the image's ``pip install .`` must ship."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.cli import Server, base_env
from tests.support.paths import ROOT
from tests.support.services import require_service


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_dockerfile_shape() -> None:
    text = dockerfile()
    bases = re.findall(r"^ARG PYTHON_IMAGE=(\S+)", text, re.MULTILINE)
    assert bases and re.fullmatch(r"python:3\.1[1-9]-slim", bases[0])
    # the README's install command, as the last command of a RUN (which first drops empty build args)
    runs = re.sub(r"\\\n\s*", " ", text)
    assert re.search(r"^RUN (.*;\s+)?pip install \.$", runs, re.MULTILINE)
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["crossfeed", "serve", "--host", "0\.0\.0\.0"\]$', text, re.MULTILINE)
    assert "/healthz" in text.split("HEALTHCHECK", 1)[1].split("\n\n", 1)[0]
    for needed in ("pyproject.toml", "README.md", "proxy", "translators"):
        assert needed in text
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not ignored & {"proxy", "translators", "pyproject.toml", "README.md", "*.md"}


def test_readme_install_command_matches_dockerfile() -> None:
    assert "pip install ." in (ROOT / "README.md").read_text()


def test_dockerfile_healthcheck_command_works(tmp_path: Path) -> None:
    text = dockerfile()
    cmd = json.loads(re.search(r"^\s+CMD (\[.*\])$", text.split("HEALTHCHECK", 1)[1], re.MULTILINE).group(1))
    assert cmd[0] == "python"
    server = Server(tmp_path)
    try:
        env = base_env(tmp_path) | {"CROSSFEED_PORT": str(server.port)}
        ok = subprocess.run([sys.executable, *cmd[1:]], check=False, env=env, capture_output=True, timeout=15)
        assert ok.returncode == 0, ok.stderr.decode()
    finally:
        assert server.stop(signal.SIGTERM) == 0
    down = subprocess.run([sys.executable, *cmd[1:]], check=False, env=env, capture_output=True, timeout=15)
    assert down.returncode != 0  # the check fails once the server is gone


def test_deploy_examples_use_the_probes() -> None:
    compose = (ROOT / "deploy" / "docker-compose.yml").read_text()
    assert "/healthz" in compose and "service_healthy" in compose and "depends_on" in compose
    k8s = (ROOT / "deploy" / "kubernetes-sidecar.yaml").read_text()
    assert re.search(r"livenessProbe:\s+httpGet: \{path: /healthz", k8s)
    assert re.search(r"readinessProbe:\s+httpGet: \{path: /readyz", k8s)
    assert "--config" in k8s and "/etc/crossfeed" in k8s
    try:
        import yaml
    except ImportError:
        require_service("pyyaml", "pip install -e '.[test]' (pyyaml is in the test extra)")
    docs = list(yaml.safe_load_all(k8s))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service"]
    assert set(yaml.safe_load(compose)["services"]) >= {"crossfeed", "ollama"}


def test_pip_install_ships_every_package() -> None:
    """The image runs what `pip install .` installs: every package under proxy/ and translators/."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
    listed = setuptools.get("packages")
    if not isinstance(listed, list):
        return  # packages.find (automatic discovery) picks up subpackages by itself
    found = sorted(
        "crossfeed." + ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("proxy", "translators")
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    )
    missing = [name for name in found if name not in listed]
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: `pip install .` would omit them"
