"""`prm-synth run` on HumanEval against an OpenAI-compatible server whose every program is hostile: it
loops, forks without end, allocates 10 GB, opens a socket, writes outside its folder, reads the home
folder, prints 1 GB, exits before the tests, reads every process's environment, connects to unix
sockets, holds 1 GB in five processes, or fills the disk. The run finishes, every row is graded wrong or unknown,
nothing outside the sandbox changes, and the counts reconcile."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from fault_proxy import FakeCompletionsServer
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.grading import sandbox
from prm_synth.store.readers import iter_records

pytestmark = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")

ESCAPE = Path.cwd() / f"hostile-escape-{uuid.uuid4().hex}"
PROGRAMS = {  # HumanEval's first eight entry points, each answered with one hostile program
    "has_close_elements": "while True:\n    pass\n",
    "separate_paren_groups": "import os\nwhile True:\n    os.fork()\n",
    "truncate_number": "x = bytearray(10 * 1024 ** 3)\n",
    "below_zero": "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)\n",
    "mean_absolute_deviation": f"open({str(ESCAPE)!r}, 'w').write('x')\n",
    "intersperse": "import os\nprint(open(os.path.expanduser('~/.bashrc')).read())\n",
    "parse_nested_parens": "import sys\nfor _ in range(16384):\n    sys.stdout.write('x' * 65536)\n",
    "filter_by_substring": "import sys\nsys.exit(0)\n",
    # the run's secrets, the host's unix sockets, memory of many processes together, the disk
    "sum_product": "import glob\nprint([open(p, 'rb').read() for p in glob.glob('/proc/*/environ')])\n",
    "rolling_max": (
        "import glob, socket\nfor p in glob.glob('/run/**', recursive=True) + glob.glob('/tmp/**', recursive=True):\n"
        "    s = socket.socket(socket.AF_UNIX)\n    s.connect(p)\n"
    ),
    "make_palindrome": (
        "import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n        b = bytearray(200 << 20)\n"
        "        time.sleep(60)\nos.wait()\n"
    ),
    "string_xor": "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (15 << 20))\n    i += 1\n",
}


class HostileServer(FakeCompletionsServer):
    async def _completions(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        prompt, n = body["prompt"], body.get("n") or 1
        name = next(k for k in PROGRAMS if f"def {k}(" in prompt)
        text = f"I will write it.\n\n```python\n{PROGRAMS[name]}```\n"
        choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
        usage = {"prompt_tokens": 10, "completion_tokens": 5 * n, "total_tokens": 10 + 5 * n}
        return web.json_response(
            {"id": "h", "object": "text_completion", "created": 0, "model": "h", "choices": choices, "usage": usage}
        )


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_of_hostile_programs_goes_on_and_grades_none_right(tmp_path: Path) -> None:
    with HostileServer() as server:
        data: dict[str, Any] = {
            "name": "hostile",
            "problems": {"kind": "humaneval", "count": len(PROGRAMS)},
            "grader": {"kind": "code", "sandbox": {"cpu_s": 1, "wall_s": 4, "memory_mb": 512, "processes": 16}},
            "policy": {"kind": "openai", "model": "hostile", "base_url": f"{server.url}/v1", "max_retries": 0},
            "sampling": {"samples_per_problem": 1},
            "steps": {"strategy": "code"},
            "annotate": {"method": "mc", "k": 1},
            "output": {"shard_size": 4},
        }
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(data))
        out = tmp_path / "out"
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["reconciles"] is True
    rows = list(iter_records(out))
    assert len(rows) == len(PROGRAMS)
    assert all(r["final_correct"] is not True for r in rows)
    assert not ESCAPE.exists()
