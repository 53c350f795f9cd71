"""The container recipe without a docker engine: the Dockerfile's COPY lines
build a context, its install step (docker/install.sh) runs in a fresh venv,
and its ENTRYPOINT starts with its ENV; /healthz answers, the HEALTHCHECK
command passes, a prediction works, the site-packages size is reported."""

import json
import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from tests.live_server import free_port, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a fresh venv install: ~1 min


def directives(dockerfile: Path) -> list[tuple[str, str]]:
    out = []
    for line in dockerfile.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_of(dockerfile: Path) -> dict[str, str]:
    env = {}
    for word, rest in directives(dockerfile):
        if word == "ENV":
            env.update(dict(kv.split("=", 1) for kv in rest.split()))
    return env


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_recipe_shape(name):
    d = directives(ROOT / "docker" / name)
    words = [w for w, _ in d]
    assert d[0] == ("FROM", "python:3.11-slim")
    user = [r for w, r in d if w == "USER"]
    assert user and user[-1] not in ("root", "0")
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert json.loads(dict(d)["ENTRYPOINT"]) == ["perfseer-rt", "serve"]
    assert "/healthz" in dict(d)["HEALTHCHECK"]
    flavour = "cpu" if name.endswith("cpu") else "cuda"
    assert f"RUN sh docker/install.sh {flavour} /src && rm -rf /src" in \
        [f"{w} {r}" for w, r in d]


def dir_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) \
        / 2**20


def test_cpu_image_steps_in_a_fresh_venv(tmp_path):
    dockerfile = ROOT / "docker" / "Dockerfile.cpu"
    d = directives(dockerfile)
    ctx = tmp_path / "src"
    ctx.mkdir()
    for word, rest in d:  # COPY SRC... DEST, relative to the build context
        if word == "COPY":
            *srcs, dest = rest.split()
            for src in srcs:
                target = ctx / dest if not dest.endswith("/") else ctx / dest / Path(src).name
                target.parent.mkdir(parents=True, exist_ok=True)
                if (ROOT / src).is_dir():
                    shutil.copytree(ROOT / src, target, symlinks=True, ignore=shutil.ignore_patterns(
                        "__pycache__", "*.egg-info", "build"))
                else:
                    shutil.copy(ROOT / src, target)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / "bin"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    [run] = [r for w, r in d if w == "RUN" and "install.sh" in r]
    install = run.split("&&")[0].strip().replace("/src", str(ctx))
    res = subprocess.run(install, shell=True, cwd=ctx, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    print(f"fresh venv site-packages after the CPU image's install step: {dir_mib(site):.0f} MiB")

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(ROOT / "examples" / "resnet18.onnx", models / "r18.onnx")
    port = free_port()
    run_env = {**env, **env_of(dockerfile), "PERFSEER_RT_HOST": "127.0.0.1",
               "PERFSEER_RT_PORT": str(port), "PERFSEER_RT_MODEL_DIR": str(models)}
    entry = json.loads(dict(d)["ENTRYPOINT"])
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(bindir / entry[0]), *entry[1:]], env=run_env,
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        hc = re.search(r"CMD (\[.*\])", dict(d)["HEALTHCHECK"]).group(1)
        cmd = json.loads(hc)
        assert subprocess.run([str(bindir / cmd[0]), *cmd[1:]], env=run_env,
                              timeout=30).returncode == 0
        resp = httpx.post(url + "/predict", params={"path": "r18.onnx", "batch": "4"},
                          timeout=60)
        assert resp.status_code == 200, resp.text
        assert resp.json()[0]["metrics"]["peak_mem_mb"]["unit"] == "MiB"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in log.read_text()
