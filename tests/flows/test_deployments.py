"""Scheduled deployments on a real loopback Prefect server: prefect.yaml, a process worker, serve."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FLOW = "prm-synth-synthesize"


def test_prefect_yaml_carries_the_pipeline_files_unchanged():
    """The deployment parameters are the pipeline files; this keeps the copies in step."""
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    by_name = {d["name"]: d for d in doc["deployments"]}
    sim = by_name["simulated-nightly"]
    assert sim["parameters"]["config"] == yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    assert sim["schedules"][0]["cron"]
    assert sim["work_pool"]["name"] == "prm-synth-process"
    demo = by_name["demo-daily"]
    assert demo["parameters"]["config"] == yaml.safe_load((ROOT / "pipelines" / "demo.yaml").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = os.environ | {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PRM_SYNTH_HOME": str(ROOT),
    }
    log = open(home / "server.log", "w")  # noqa: SIM115 - closed at teardown
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 300  # a busy machine takes minutes, not seconds
    import urllib.request

    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise RuntimeError(
                    "prefect server did not start: " + (home / "server.log").read_text()[-2000:]
                ) from None
            time.sleep(0.5)
    yield env
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
    log.close()


def _prefect(env, *args, check=True, timeout=300):
    proc = subprocess.run(
        [str(BIN / "prefect"), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"prefect {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _client_call(env, code: str):
    """Run a snippet against the server's API in a fresh interpreter (its settings come from env)."""
    script = (
        "import asyncio, json\n"
        "from prefect.client.orchestration import get_client\n"
        "async def main():\n"
        "    async with get_client() as client:\n"
        + "".join(f"        {line}\n" for line in code.strip().splitlines())
        + "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.vllm
def test_deploy_from_prefect_yaml_run_it_and_refuse_bad_parameters(prefect_server, tmp_path):
    env = prefect_server
    _prefect(env, "work-pool", "create", "prm-synth-process", "--type", "process")
    _prefect(env, "--no-prompt", "deploy", "--name", "simulated-nightly")
    _prefect(env, "--no-prompt", "deploy", "--name", "demo-daily")
    dep = _client_call(
        env,
        f"""
d = await client.read_deployment_by_name("{FLOW}/simulated-nightly")
print(json.dumps({{"crons": [s.schedule.cron for s in d.schedules], "enforce": d.enforce_parameter_schema}}))
""",
    )
    assert dep["crons"] == ["0 3 * * *"] and dep["enforce"]

    bad = _prefect(
        env,
        "deployment",
        "run",
        f"{FLOW}/simulated-nightly",
        "--params",
        json.dumps({"config": {"annotate": {"k": "many"}}}),
        check=False,
    )
    assert "Validation failed" in bad.stdout + bad.stderr  # refused by the server, no run created

    # The demo pipeline (the real model through vLLM on the CPU), cut to one problem.
    out = tmp_path / "scheduled"
    _prefect(env, "deployment", "run", f"{FLOW}/demo-daily", "--param", "limit=1", "--param", f"out_dir={out}")
    worker = subprocess.run(
        [str(BIN / "prefect"), "worker", "start", "--pool", "prm-synth-process", "--run-once"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert worker.returncode == 0, worker.stdout + worker.stderr
    run = _client_call(
        env,
        """
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
runs = await client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["demo-daily"])))
done = [r for r in runs if r.state and r.state.is_final()]
arts = await client.read_artifacts()
print(json.dumps({"states": [r.state.type.value for r in done], "artifacts": sorted({a.type for a in arts if a.flow_run_id in {r.id for r in done}})}))
""",
    )
    assert run["states"] == ["COMPLETED"], worker.stdout[-3000:]
    assert {"table", "markdown", "progress"} <= set(run["artifacts"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"]["problems"] == 1 and manifest["totals"]["rows"] >= 1


def _wait_until(condition, deadline_s: float, what: str, poll_s: float = 2.0, alive=None):
    """Poll `condition` until it returns a truthy value; fail naming `what` after a generous deadline,
    or at once when the process `alive` (a Popen) has exited."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {alive.returncode} first")
        time.sleep(poll_s)
    raise AssertionError(f"{what}: not within {deadline_s} s")


def _stop_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _scheduled_run_state(env, deployment: str):
    """The first flow run THE SCHEDULER made for a deployment (auto_scheduled, no manual trigger) that
    reached a final state: its state, or None while there is none."""
    states = _client_call(
        env,
        f"""
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
try:
    runs = await client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["{deployment}"])))
    print(json.dumps([r.state.type.value for r in runs if r.auto_scheduled and r.state and r.state.is_final()]))
except Exception:  # the server is not up yet
    print("[]")
""",
    )
    return states[0] if states else None


def _a_scheduled_run_completes(env, deployment: str, proc: subprocess.Popen, log: Path) -> None:
    # The first minute boundary after the schedule is registered, plus the runner's or worker's poll:
    # 1-2 min on a quiet machine; the deadline is generous for a busy one.
    state = _wait_until(
        lambda: _scheduled_run_state(env, deployment),
        480,
        f"a scheduled run of {deployment} ends",
        poll_s=5,
        alive=proc,
    )
    assert state == "COMPLETED", log.read_text()[-3000:]


@pytest.mark.slow
def test_serve_with_an_every_minute_cron_runs_by_itself(prefect_server, tmp_path):
    """No trigger: the server's scheduler makes the run and the served process runs it to COMPLETED."""
    env = prefect_server
    served = tmp_path / "served"
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            str(BIN / "prm-synth"),
            "serve",
            str(ROOT / "pipelines" / "simulated.yaml"),
            "--cron",
            "* * * * *",
            "--name",
            "served-simulated",
            "--out",
            str(served),
        ],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _a_scheduled_run_completes(env, "served-simulated", proc, tmp_path / "serve.log")
        manifest = json.loads((served / "manifest.json").read_text())
        assert manifest["totals"]["problems"] == 400  # the pipeline's whole source, as scheduled
    finally:
        _stop_group(proc)
        log.close()


def _doc_block(page: str, heading: str) -> str:
    """The first fenced bash block under a heading of a docs page, exactly as written there."""
    text = (ROOT / page).read_text()
    assert heading in text, f"no heading {heading!r} in {page}"
    section = text.split(heading, 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, f"no bash block under {heading!r} in {page}"
    return block.group(1)


@pytest.mark.slow
def test_the_docs_scheduling_block_works_as_written(tmp_path):
    """The docs' deploy -> worker lines, run by bash against a fresh loopback server; only the port
    (4200, which may be taken here) is changed, and the deployment gets an every-minute cron and a
    temporary output folder. Then a run that the SCHEDULER makes (no trigger) must complete on the worker."""
    block = _doc_block("docs/guides/deployments.md", "## Deploy with a work pool")
    assert "prefect server start" in block and "export PREFECT_API_URL=" in block
    port = _free_port()
    scheduled = tmp_path / "nightly"
    deploy = "deploy --name simulated-nightly"
    assert deploy in block
    script = block.replace("127.0.0.1:4200", f"127.0.0.1:{port}").replace(
        deploy, f"{deploy} --cron '* * * * *' --param out_dir={scheduled}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")} | {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_API_PORT": str(port),  # `prefect server start` listens here
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = open(tmp_path / "readme.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    client_env = env | {"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    try:

        def deployed():
            return _client_call(
                client_env,
                f"""
try:
    d = await client.read_deployment_by_name("{FLOW}/simulated-nightly")
    pool = await client.read_work_pool("prm-synth-process")
    print(json.dumps({{"cron": d.schedules[0].schedule.cron, "limit": pool.concurrency_limit}}))
except Exception:
    print("null")
""",
            )

        def deployed_or_none():
            try:
                return deployed()
            except AssertionError:  # the server is not up yet
                return None

        try:
            found = _wait_until(deployed_or_none, 600, "the docs' lines deploy simulated-nightly", alive=proc)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{(tmp_path / 'readme.log').read_text()[-3000:]}") from None
        assert found == {"cron": "* * * * *", "limit": 1}
        _a_scheduled_run_completes(client_env, "simulated-nightly", proc, tmp_path / "readme.log")
        assert json.loads((scheduled / "manifest.json").read_text())["totals"]["problems"] == 400
    finally:
        _stop_group(proc)
        log.close()
