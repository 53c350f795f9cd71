"""The container images.

``test_cpu_image_built_and_run`` builds docker/Dockerfile.cpu with a real
Docker engine (FROM the local base image that docker/ci_setup.sh makes, or
``$PERFSEER_RT_BASE_IMAGE``), runs it with a read-only root, a read-only
model mount and a tmpfs /tmp, and checks /healthz, /readyz, a prediction from
the mount and an upload, the non-root user, the engine's own HEALTHCHECK
verdict and a clean stop; it records the image's size and build time. It
skips only where no engine answers and none is expected: CI's set-up
exports ``PERFSEER_RT_REQUIRE_DOCKER=1``, and then a missing engine or base
image fails the test.

Without an engine, the recipe is still checked: its shape, and its install
step (docker/install.sh) in a fresh venv with the ENTRYPOINT started after it.
"""

import json
import os
import re
import shutil
import subprocess
import time
import uuid
import venv
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from tests.live_server import free_port, report, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet18.onnx"
BASE_IMAGE = os.environ.get("PERFSEER_RT_BASE_IMAGE", "perfseer-rt-base:bookworm")
REQUIRED = os.environ.get("PERFSEER_RT_REQUIRE_DOCKER") == "1"
pytestmark = pytest.mark.slow  # an image build or a fresh venv install: minutes


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


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if check:
        assert res.returncode == 0, f"docker {' '.join(args[:3])}: {res.stderr[-3000:]}"
    return res


def no_engine() -> str | None:
    """Why the image cannot be built here (None: it can)."""
    if shutil.which("docker") is None:
        return "no docker command"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info did not answer in 30 s"
    if info.returncode != 0:
        return f"no docker engine answers ({info.stderr.strip().splitlines()[-1:]})"
    if docker("image", "inspect", BASE_IMAGE, check=False).returncode != 0:
        return f"no base image {BASE_IMAGE} (docker/ci_setup.sh makes it)"
    return None


def wait_for_setup(timeout_s: float = 1800) -> None:
    """CI sets the engine up in the background (.ci/run): wait for
    docker/ci_setup.sh to end, and fail with its log unless it succeeded."""
    folder = os.environ.get("PERFSEER_RT_DOCKER_SETUP")
    if not folder:
        return
    status = Path(folder) / "status"
    deadline = time.monotonic() + timeout_s
    while not status.exists():
        assert time.monotonic() < deadline, f"docker/ci_setup.sh still runs after {timeout_s:.0f} s"
        time.sleep(2)
    log = (Path(folder) / "log").read_text()
    print(log)
    assert status.read_text().strip() == "0", f"docker/ci_setup.sh failed:\n{log[-3000:]}"


@pytest.fixture(scope="module")
def engine():
    if REQUIRED:
        wait_for_setup()
    reason = no_engine()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"PERFSEER_RT_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_recipe_shape(name):
    d = directives(ROOT / "docker" / name)
    words = [w for w, _ in d]
    assert d[0] == ("ARG", "BASE=python:3.11-slim")
    assert [r for w, r in d if w == "FROM"] == ["${BASE} AS build", "${BASE}"]
    user = [r for w, r in d if w == "USER"]
    assert user and user[-1] not in ("root", "0")
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert json.loads(dict(d)["ENTRYPOINT"]) == ["perfseer-rt", "serve"]
    assert "/healthz" in dict(d)["HEALTHCHECK"]
    flavour = "cpu" if name.endswith("cpu") else "cuda"
    assert f"RUN sh docker/install.sh {flavour} /src /opt/perfseer-rt" in [f"{w} {r}" for w, r in d]
    assert "COPY --from=build /opt/perfseer-rt /opt/perfseer-rt" in [f"{w} {r}" for w, r in d]


def test_cpu_image_built_and_run(engine, tmp_path):
    import perfseer_rt

    tag = f"perfseer-rt:cpu-test-{uuid.uuid4().hex[:8]}"
    name = tag.replace(":", "-")
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLE, models / "r18.onnx")
    for p in (tmp_path, models, models / "r18.onnx"):  # readable by the image's user (uid 10001)
        p.chmod(0o755)
    t0 = time.monotonic()
    build = ["build", "-q", "-f", "docker/Dockerfile.cpu", "--build-arg", f"BASE={BASE_IMAGE}"]
    try:
        # the build stage tagged too (then reused from the cache), so that both are removed
        docker(*build, "--target", "build", "-t", tag + "-build", str(ROOT), timeout=1800)
        docker(*build, "-t", tag, str(ROOT), timeout=1800)
        build_s = time.monotonic() - t0
        size_b = int(docker("image", "inspect", "-f", "{{.Size}}", tag).stdout)
        config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", tag).stdout)
        assert config["User"] == "perfseer"
        assert any("/healthz" in part for part in config["Healthcheck"]["Test"])
        docker("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp", "-p", "127.0.0.1::8000",
               "-v", f"{models}:/models:ro", "--health-interval", "2s", "--health-start-period", "120s",
               tag)
        try:
            checks = run_checks(name, perfseer_rt)
        finally:
            logs = docker("logs", name, check=False)
            docker("rm", "-f", name, check=False)
    finally:
        docker("rmi", "-f", tag, tag + "-build", check=False)
    assert "Application shutdown complete" in logs.stdout + logs.stderr, logs.stderr[-3000:]
    assert "Traceback" not in logs.stdout + logs.stderr, logs.stderr[-3000:]
    report("container", {
        "command": "docker/ci_setup.sh && PERFSEER_RT_SERVE_REPORT=reports/serve python -m pytest "
                   "tests/test_docker.py -k built_and_run -s",
        "image": f"docker/Dockerfile.cpu FROM {BASE_IMAGE}",
        "engine": docker("version", "-f", "{{.Server.Version}}").stdout.strip(),
        "build_s": round(build_s, 1), "image_size_mb": round(size_b / 1e6, 1),
        "image_size_mib": round(size_b / 2**20, 1), **checks})


def run_checks(name: str, perfseer_rt) -> dict:
    port = docker("port", name, "8000").stdout.split()[0].rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    deadline = t0 + 180
    while True:  # /readyz: the server answers and its workers are warm
        state = json.loads(docker("inspect", "-f", "{{json .State}}", name).stdout)
        assert state["Running"], docker("logs", name, check=False).stderr[-3000:]
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, docker("logs", name, check=False).stderr[-3000:]
        time.sleep(0.5)
    ready_s = time.monotonic() - t0
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}

    resp = httpx.post(url + "/predict", params={"path": "r18.onnx", "batch": "4"}, timeout=120)
    assert resp.status_code == 200, resp.text
    local = perfseer_rt.predict.predict(str(EXAMPLE), batch=4)[0]
    assert resp.json()[0]["metrics"]["latency_ms"]["value"] == pytest.approx(
        local["metrics"]["latency_ms"]["value"], rel=1e-5)
    upload = httpx.post(url + "/predict", files={"file": ("m.onnx", EXAMPLE.read_bytes())}, timeout=120)
    assert upload.status_code == 200 and upload.json()[0]["model"] == "m.onnx", upload.text

    assert docker("exec", name, "id", "-u").stdout.strip() == "10001"
    touch = docker("exec", name, "touch", "/models/x", check=False)
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    assert not (Path(json.loads(docker("inspect", "-f", "{{json .Mounts}}", name).stdout)[0]["Source"])
                / "x").exists()

    while True:  # the engine runs the image's HEALTHCHECK command itself
        health = json.loads(docker("inspect", "-f", "{{json .State.Health}}", name).stdout)
        if health["Status"] == "healthy":
            break
        assert health["Status"] == "starting" and time.monotonic() < deadline, health
        time.sleep(1)

    t0 = time.monotonic()
    docker("stop", "-t", "30", name, timeout=60)
    stop_s = time.monotonic() - t0
    state = json.loads(docker("inspect", "-f", "{{json .State}}", name).stdout)
    # 143: the server ends on the SIGTERM it was sent, after its graceful shutdown
    # (uvicorn re-raises the signal); 137 would be the engine's kill after the 30 s
    assert state["ExitCode"] in (0, 143) and not state["OOMKilled"], state
    assert stop_s < 30, stop_s
    return {"ready_s": round(ready_s, 1), "stop_s": round(stop_s, 1), "exit_code": state["ExitCode"],
            "checks": ["/healthz", "/readyz", "POST /predict?path= from the :ro mount",
                       "multipart upload with a read-only root and tmpfs /tmp", "uid 10001",
                       "/models read-only", "HEALTHCHECK healthy", "docker stop: clean exit"]}


def dir_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) \
        / 2**20


def test_cpu_install_step_in_a_fresh_venv(tmp_path):
    """The recipe without an engine (skipped where one builds the image
    itself): the build stage's COPY lines make a context, its install step
    runs, the ENTRYPOINT starts with the image's ENV; /healthz answers, the
    HEALTHCHECK command passes, a prediction works."""
    if no_engine() is None:
        pytest.skip("a docker engine is here: test_cpu_image_built_and_run builds the image itself")
    dockerfile = ROOT / "docker" / "Dockerfile.cpu"
    d = directives(dockerfile)
    ctx = tmp_path / "src"
    ctx.mkdir()
    for word, rest in d:  # COPY SRC... DEST, relative to the build context
        if word == "COPY" and not rest.startswith("--from"):
            *srcs, dest = rest.split()
            for src in srcs:
                target = ctx / dest if not dest.endswith("/") else ctx / dest / Path(src).name
                target.parent.mkdir(parents=True, exist_ok=True)
                if (ROOT / src).is_dir():
                    shutil.copytree(ROOT / src, target, symlinks=True, ignore=shutil.ignore_patterns(
                        "__pycache__", "*.egg-info", "build"))
                else:
                    shutil.copy(ROOT / src, target)
    host_venv = tmp_path / "host"  # a python3 with venv, as the base image has
    venv.EnvBuilder(with_pip=False).create(host_venv)
    env = {**os.environ, "PATH": f"{host_venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    [run] = [r for w, r in d if w == "RUN" and "install.sh" in r]
    env_dir = tmp_path / "opt"
    install = run.replace("/src", str(ctx)).replace("/opt/perfseer-rt", str(env_dir))
    res = subprocess.run(install, shell=True, cwd=ctx, env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    bindir = env_dir / "bin"
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    print(f"fresh venv site-packages after the CPU image's install step: {dir_mib(site):.0f} MiB")

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLE, models / "r18.onnx")
    port = free_port()
    run_env = {**env, **env_of(dockerfile), "PATH": f"{bindir}{os.pathsep}{env['PATH']}",
               "PERFSEER_RT_HOST": "127.0.0.1", "PERFSEER_RT_PORT": str(port),
               "PERFSEER_RT_MODEL_DIR": str(models)}
    entry = json.loads(dict(d)["ENTRYPOINT"])
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(bindir / entry[0]), *entry[1:]], env=run_env,
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log, 120, "/readyz")
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
        proc.wait(timeout=30)
    assert "Traceback" not in log.read_text()
