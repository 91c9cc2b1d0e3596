"""Test helpers: a fault-injecting HTTP proxy and fake OpenAI completions servers (echo, the simulated policy, a judge).

`FaultProxy(upstream, schedule)` forwards HTTP/1.1 requests to `upstream` except where its
deterministic schedule says otherwise. The k-th POST (counted from 0) gets `schedule[k]` (the list
repeats when `repeat=True`, else requests past its end pass). Actions:

- "pass": forward and relay the response;
- "500", "503", "429", ...: answer that status at once (429 with `Retry-After: 0`), never forwarding;
- "delay": hold the request longer than the client's timeout (`delay_s`), then close without answer;
- "drop": close the connection at once, without an answer;
- "drop_after": forward (the server does the work) and close before relaying the answer, the case
  that duplicates results when a client counts the lost answer and its retry both;
- "echo_500": answer 500 with the request's headers in the body (the API key included), to prove
  engines never repeat a server's echo of the key;
- "echo_text": answer 200, a well-formed completion whose every choice's text is the request's headers
  (the API key included): the key must not reach the dataset;
- "cut_body": forward, then relay the answer's head and half its body and close the connection (a
  reply cut off mid-way: the client has a status 200 and a body that breaks off);
- "echo_encoded": answer 200, a completion whose text holds the request's Authorization header
  URL-encoded, and split across a line break in the middle (neither is the key as sent);
- "drip": forward, then relay the answer one byte every `drip_s` seconds (a read never waits long, so
  only a total deadline stops it);
- "huge": answer 200 with a well-formed completion of `huge_bytes` bytes, streamed (a size cap stops it);
- malformed answers, status 200: "html" (an HTML page), "choices_oops" (`"choices": "oops"`),
  "text_dict" (a choice whose text is an object), "truncated_json" (half a reply), "empty" (no body),
  "deep_json" (JSON nested 100,000 deep).

The servers run on their own event loop in a daemon thread, on 127.0.0.1 with a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
from aiohttp import web


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        schedule: Sequence[str] = (),
        *,
        repeat: bool = False,
        delay_s: float = 5.0,
        drip_s: float = 0.2,
        huge_bytes: int = 8 << 20,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.schedule = list(schedule)
        self.repeat = repeat
        self.delay_s = delay_s
        self.drip_s = drip_s
        self.huge_bytes = huge_bytes
        self.actions: Counter[str] = Counter()  # what was done, by action
        self.forwarded = 0  # POSTs that reached the upstream
        self._posts = 0
        self._lt: _LoopThread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._http: httpx.AsyncClient | None = None
        self.port = 0

    # the engine's base_url: same path layout as the upstream
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._lt = _LoopThread()
        self._lt.run(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._lt is not None
        self._lt.run(self._stop())
        self._lt.stop()

    async def _start(self) -> None:
        self._http = httpx.AsyncClient(timeout=120)
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None and self._http is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)
        await self._http.aclose()

    def _next_action(self) -> str:
        k = self._posts
        self._posts += 1
        if not self.schedule:
            return "pass"
        if self.repeat:
            return self.schedule[k % len(self.schedule)]
        return self.schedule[k] if k < len(self.schedule) else "pass"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: many requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                action = self._next_action() if method == "POST" else "pass"
                self.actions[action] += 1
                if action == "drop":
                    writer.transport.abort()
                    return
                if action == "delay":
                    await asyncio.sleep(self.delay_s)
                    writer.transport.abort()
                    return
                if action == "echo_500":
                    await self._respond(writer, 500, json.dumps({"error": {"message": f"bad request {headers}"}}))
                    continue
                if action in MALFORMED:
                    await self._respond(writer, 200, MALFORMED[action], {"content-type": "text/html"})
                    continue
                if action == "echo_text":
                    await self._respond(writer, 200, json.dumps(_completion(body, str(headers))))
                    continue
                if action == "echo_encoded":
                    from urllib.parse import quote

                    auth = headers.get("authorization", "")
                    half = len(auth) // 2
                    text = f"encoded {quote(auth, safe='')} split {auth[:half]}\n{auth[half:]}"
                    await self._respond(writer, 200, json.dumps(_completion(body, text)))
                    continue
                if action == "huge":
                    await self._send_huge(writer, body)
                    return
                if action.isdigit():
                    extra = {"retry-after": "0"} if action == "429" else {}
                    msg = json.dumps({"error": {"message": f"injected {action}", "type": "injected"}})
                    await self._respond(writer, int(action), msg, extra)
                    continue
                fwd = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
                assert self._http is not None
                if method == "POST":
                    self.forwarded += 1
                resp = await self._http.request(method, self.upstream + path, content=body, headers=fwd)
                if action == "drop_after":
                    writer.transport.abort()
                    return
                if action == "cut_body":
                    data = resp.content
                    head = f"HTTP/1.1 200 X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                    writer.write(head.encode("latin-1") + data[: len(data) // 2])
                    await writer.drain()
                    writer.transport.abort()
                    return
                if action == "drip":
                    await self._drip(writer, resp.status_code, resp.content)
                    return
                await self._respond(writer, resp.status_code, resp.content, {"content-type": "application/json"})
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _drip(self, writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        data = head.encode("latin-1") + body
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(self.drip_s)

    async def _send_huge(self, writer: asyncio.StreamWriter, request_body: bytes) -> None:
        """A well-formed reply of `huge_bytes` bytes, written in chunks (never held whole in memory)."""
        reply = json.dumps(_completion(request_body, "@@TEXT@@")).encode()
        before, after = reply.split(b"@@TEXT@@", 1)  # n = 1: one text to inflate
        filler = self.huge_bytes - len(before) - len(after)
        head = f"HTTP/1.1 200 X\r\ncontent-type: application/json\r\ncontent-length: {self.huge_bytes}\r\n\r\n"
        writer.write(head.encode("latin-1") + before)
        chunk = b"a" * 65536
        while filler > 0:
            writer.write(chunk[:filler])
            filler -= min(filler, len(chunk))
            await writer.drain()
        writer.write(after)
        await writer.drain()

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, body: str | bytes, extra=None) -> None:
        data = body.encode() if isinstance(body, str) else body
        hdrs = {"content-type": "application/json", **(extra or {})}
        hdrs["content-length"] = str(len(data))
        head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        writer.write(head.encode("latin-1") + data)
        await writer.drain()


MALFORMED: dict[str, bytes] = {
    "html": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "choices_oops": b'{"id": "x", "choices": "oops"}',
    "text_dict": b'{"id": "x", "choices": [{"index": 0, "text": {"a": 1}, "finish_reason": "stop"}]}',
    "truncated_json": b'{"id": "x", "choices": [{"index": 0, "text": "hal',
    "empty": b"",
    "deep_json": b"[" * 100_000 + b"]" * 100_000,
}


def _completion(request_body: bytes, text: str) -> dict[str, Any]:
    """A well-formed completions reply to the request, every choice's text `text`."""
    n = json.loads(request_body).get("n") or 1
    choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
    return {"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "x", "choices": choices}


class FakeCompletionsServer:
    """A minimal OpenAI-compatible `/v1/completions`: choice i of a prompt answers
    `"<last 40 chars of prompt>|<i>"`, with usage counted in whitespace tokens. `calls` counts POSTs."""

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.calls = 0
        self.max_in_flight = 0
        self.asked: list[tuple[str, int, int | None]] = []  # (prompt, n, seed) of every request
        self.bodies: list[dict[str, Any]] = []  # every request's JSON body
        self._in_flight = 0
        self._lt: _LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeCompletionsServer:
        self._lt = _LoopThread()
        self._lt.run(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._lt is not None and self._runner is not None
        self._lt.run(self._runner.cleanup())
        self._lt.stop()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.Response:
        self.calls += 1
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            body = await request.json()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            self.bodies.append(body)
            prompt, n = body["prompt"], body.get("n", 1)
            self.asked.append((prompt, n, body.get("seed")))
            texts = [f"{prompt[-40:]}|{i}" for i in range(n)]
            choices = [{"index": i, "text": t, "finish_reason": "stop", "logprobs": None} for i, t in enumerate(texts)]
            # reversed, as servers may return them out of order
            return web.json_response(
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": choices[::-1],
                    "usage": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": sum(len(t.split()) for t in texts),
                        "total_tokens": len(prompt.split()) + sum(len(t.split()) for t in texts),
                    },
                }
            )
        finally:
            self._in_flight -= 1


class SimulatedCompletionsServer(FakeCompletionsServer):
    """An OpenAI-compatible `/v1/completions` in front of the simulated policy, so a real `prm-synth run`
    with `policy.kind: openai` labels builtin problems over HTTP. The prompt is the plain rendering
    (no tokenizer): the policy prompt's header, the question, then exactly the prefix, each part
    separated by a blank line. Every prompt containing `refuse` (and at least `refuse_from_chars` long)
    is answered HTTP 400 with the message a vLLM server gives for a prompt longer than the model's
    context; `refused` counts them."""

    CONTEXT_MESSAGE = (
        "This model's maximum context length is 2048 tokens. However, you requested 9001 tokens "
        "(8489 in the messages, 512 in the completion). Please reduce the length of the messages or completion."
    )

    def __init__(self, refuse: str | None = None, config: Any = None, refuse_from_chars: int = 0) -> None:
        from prm_synth.simulated.engines import SimulatedPolicy

        super().__init__()
        self.policy = SimulatedPolicy(config)
        self.refuse = refuse
        self.refuse_from_chars = refuse_from_chars
        self.refused = 0

    async def _completions(self, request: web.Request) -> web.Response:
        from prm_synth.engines.base import GenerationRequest, SamplingOptions

        self.calls += 1
        body = await request.json()
        prompt = body["prompt"]
        if self.refuse is not None and self.refuse in prompt and len(prompt) >= self.refuse_from_chars:
            self.refused += 1
            error = {"message": self.CONTEXT_MESSAGE, "type": "BadRequestError", "code": 400}
            return web.json_response({"error": error}, status=400)
        head, question, prefix = prompt.split("\n\n", 2)
        sampling = SamplingOptions(max_tokens=body.get("max_tokens") or 512, temperature=body.get("temperature", 1.0))
        n = body.get("n") or 1
        # the API carries no sample index: a prompt asked again gets the same samples (deterministic)
        (result,) = self.policy.generate([GenerationRequest(f"{head}\n\n{question}", prefix, n=n, sampling=sampling)])
        choices = [
            {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
            for i, c in enumerate(result.completions)
        ]
        usage = {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.generated_tokens}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return web.json_response(
            {"id": "cmpl-sim", "object": "text_completion", "created": 0, "model": body["model"], "choices": choices}
            | {"usage": usage}
        )


class JudgeServer(FakeCompletionsServer):
    """An OpenAI-compatible judge: every choice of a prompt answers `text_for(prompt)`, `answer` (by
    default `\\boxed{-1}`: no error in the solution) unless a subclass says otherwise. `prompts` holds
    every prompt asked, `calls` counts the requests."""

    def __init__(self, answer: str = "\\boxed{-1}") -> None:
        super().__init__()
        self.answer = answer
        self.prompts: list[str] = []

    def text_for(self, prompt: str) -> str:
        return self.answer

    async def _completions(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        prompt, n = body["prompt"], body.get("n") or 1
        self.prompts.append(prompt)
        text = self.text_for(prompt)
        choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
        usage = {"prompt_tokens": 10, "completion_tokens": 5 * n, "total_tokens": 10 + 5 * n}
        return web.json_response(
            {"id": "j", "object": "text_completion", "created": 0, "model": "j", "choices": choices, "usage": usage}
        )
