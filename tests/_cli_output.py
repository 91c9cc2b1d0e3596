"""What a command that refuses its input must print: one `error:` line, no traceback (the preflight,
first-hour and newcomer tests)."""

from __future__ import annotations


def one_line_error(result, *, code: int = 2) -> str:
    output = result.output if hasattr(result, "output") else result.stdout + result.stderr
    exit_code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert exit_code == code, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]
