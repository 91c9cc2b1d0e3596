"""`OpenAIEngine`: the engine protocol over any OpenAI-compatible server's completions endpoint.

Works with `vllm serve`, SGLang, llama.cpp's server or a hosted endpoint. Each request is one
`completions.create(prompt, n=...)` call; calls run concurrently on a private event loop (bounded by
`max_concurrency`) and results come back in request order, each request's `n` completions once.

The prompt is rendered with the chat template of a local tokenizer (`config.tokenizer`, else
`config.model` when it names a tokenizer we can load) and sent as text, so a continuation prompt is
exactly the templated question plus the prefix (the chat endpoint cannot continue a partial assistant
turn: it would close the turn, or a thinking trace, before generating). For a thinking model
(`thinking`) the template renders its thinking mode, and a prefix from inside the trace continues it
(prm_synth/prompting/thinking.py). Without any tokenizer a plain rendering is used.

Retries are ours, not the client's (`max_retries=0` on the client), so they are tested: 408, 409,
429, 5xx, timeouts, dropped connections and malformed replies are retried with capped exponential
backoff and full jitter (a server's Retry-After is honoured up to the cap); anything else, or running
out of retries, raises `EngineError` naming the server (`RequestRefused` for 400, 413 and 422: the
server refuses this request, not every request). Every attempt has a total deadline of
`timeout_s` (the HTTP client's own timeout is per read, which a server dripping one byte a second
never trips), and a reply larger than any honest answer to the request (`max_reply_bytes`) is
refused. A reply is read as JSON and checked field by field, never trusted to have the right shape.
The API key is read from the environment and scrubbed from every message and every completion text
(a server that echoes it must not put it into the dataset).

A stop (`cancel_all`, on a signal) cancels every request in flight and every retry waiting for its
turn at once, and no attempt starts after it: the command does not wait out `timeout_s` x retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from prm_synth.config import OpenAIConfig
from prm_synth.engines.base import (
    Completion,
    EngineError,
    GenerationRequest,
    GenerationResult,
    RequestRefused,
    RunStopped,
    sample_seed,
)
from prm_synth.engines.chat import count_tokens, render_plain, render_prompt, strip_duplicate_bos
from prm_synth.engines.openai_reply import (
    Choice,
    Reply,
    max_reply_bytes,
    parse_reply,
    retry_after,
    server_n,
    short,
)
from prm_synth.key_scrub import scrub
from prm_synth.prompting.thinking import resolve_markers

log = logging.getLogger(__name__)


RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


# A server refuses this one request (a prompt longer than the context, a bad parameter): the pipeline
# rejects what the request was for and goes on. Any other status fails the engine (and the shard).
REFUSED_STATUS = frozenset({400, 413, 422})


def transport_errors() -> tuple[type[BaseException], ...]:
    """The base error class of every HTTP library an `openai` client may read its replies with: `httpx`,
    or the `httpx2` fork that newer `openai` releases (3.x) use. A reply body that breaks off mid-way
    raises that library's own error, which `openai` does not wrap in its `APIConnectionError`."""
    found: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        try:
            found.append(importlib.import_module(name).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


TRANSPORT_ERRORS = transport_errors()


class _Retryable(Exception):
    """A failure worth another attempt (carries an optional server-suggested delay)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def load_local_tokenizer(name: str) -> Any | None:
    """A tokenizer from a local folder or the local Hub cache; never waits on the network."""
    from transformers import AutoTokenizer

    try:
        if Path(name).expanduser().is_dir():
            return AutoTokenizer.from_pretrained(str(Path(name).expanduser()))
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as e:
        log.debug("no local tokenizer %r: %s", name, e)
        return None


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Full-jitter exponential backoff: uniform(0, min(cap, base * 2**attempt)); Retry-After wins, capped."""
    if retry_after is not None and retry_after >= 0:
        return min(cap, retry_after)
    return random.uniform(0.0, min(cap, base * (2**attempt)))


class OpenAIEngine:
    """The engine protocol over an OpenAI-compatible completions endpoint.

    `tokenizer=` passes a ready tokenizer (else one is loaded locally, see module doc);
    `backoff_base` / `backoff_max` shape the retry delays (seconds).
    """

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        tokenizer: Any = None,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
    ) -> None:
        self.config = config
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._api_key = os.environ.get(config.api_key_env) or "EMPTY"
        # vLLM's placeholder key ("EMPTY") is no secret, and scrubbing it would change model text.
        self._secret = "" if self._api_key == "EMPTY" else self._api_key
        if tokenizer is None:
            name = config.tokenizer or config.model
            tokenizer = load_local_tokenizer(name)
            if tokenizer is None or not getattr(tokenizer, "chat_template", None):
                log.warning(
                    "no tokenizer with a chat template for %r: prompts use the plain 'system, user, prefix' "
                    "rendering (set policy.tokenizer to a local tokenizer folder to use the chat template)",
                    name,
                )
                tokenizer = None
        self._tokenizer = tokenizer
        self.thinking = resolve_markers(config, tokenizer)  # a reasoning model's trace markers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._sem: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self.attempts = 0  # calls sent, retries included (for tests and stats)
        self.retries = 0
        self._stopped = False  # `cancel_all` was called: no attempt starts any more
        self._tasks: set[asyncio.Task[Any]] = set()  # the requests on the loop now (attempts and retry waits)

    # ------------------------------------------------------------ protocol
    @property
    def model_name(self) -> str:
        return self.config.model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def render(self, request: GenerationRequest) -> str:
        if self._tokenizer is None:
            return render_plain(request, self.config.system_prompt)
        prompt = render_prompt(self._tokenizer, request, self.config.system_prompt, self.thinking)
        return strip_duplicate_bos(self._tokenizer, prompt)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Blocking: runs the requests on the engine's private event loop (safe from any thread,
        including one whose own loop is running)."""
        if not requests:
            return []
        future: Future[list[GenerationResult]] = asyncio.run_coroutine_threadsafe(
            self.agenerate(requests), self._ensure_loop()
        )
        return future.result()

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """The async form; must run on the engine's loop (use `generate` from other code)."""
        if self._sem is None:  # engine-wide: concurrent `generate` calls share the bound
            self._sem = asyncio.Semaphore(self.config.max_concurrency)
        sem = self._sem
        tasks = [asyncio.ensure_future(self._one(i, r, sem)) for i, r in enumerate(requests)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    @property
    def capacity(self) -> int:
        """Requests in flight at once (`max_concurrency`): the stream's occupancy scale."""
        return self.config.max_concurrency

    def submit(self, request: GenerationRequest) -> Future[GenerationResult]:
        """One request, one future, done when this request's reply is in (whatever the others do):
        the engine stream (engines/stream.py) resumes an annotator as soon as its own rollouts are back.
        Cancelling the future cancels the request (its HTTP call, or its wait for a retry)."""
        return asyncio.run_coroutine_threadsafe(self._submitted(request), self._ensure_loop())

    async def _submitted(self, request: GenerationRequest) -> GenerationResult:
        if self._sem is None:  # the same engine-wide bound as `agenerate`
            self._sem = asyncio.Semaphore(self.config.max_concurrency)
        return await self._one(0, request, self._sem)

    def cancel_all(self) -> None:
        """Stop at once (a signal): every request in flight and every retry waiting is cancelled, and no
        attempt starts after this. Safe from any thread; never waits."""
        self._stopped = True
        with self._lock:
            loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile: nothing runs on it
                loop.call_soon_threadsafe(self._cancel_tasks)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def close(self) -> None:
        """Close the HTTP client and stop the private loop thread. Idempotent."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = self._sem = None
        if loop is None:
            return
        if client is not None:
            try:
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
            except Exception as e:  # pragma: no cover - best effort
                log.debug("closing the OpenAI client: %s", e)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        loop.close()

    def __enter__(self) -> OpenAIEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ internals
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name="prm-synth-openai-engine", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def _get_client(self) -> Any:
        # created on the loop thread, so its connection pool belongs to this loop
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.config.base_url,
                timeout=self.config.timeout_s,
                max_retries=0,
            )
        return self._client

    def _scrub(self, text: str) -> str:
        """`text` without the API key in any form a server may echo it in (see prm_synth.key_scrub)."""
        return scrub(text, self._secret)

    async def _one(self, index: int, request: GenerationRequest, sem: asyncio.Semaphore) -> GenerationResult:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        prompt = self.render(request)
        attempts = self.config.max_retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                async with sem:
                    if self._stopped:  # checked where an attempt would start: none starts after a stop
                        raise RunStopped(f"{self.config.base_url}: the run is stopping; request {index} not sent")
                    self.attempts += 1
                    response = await self._call(prompt, request)
                return self._result(prompt, request, response)
            except _Retryable as e:
                last = self._scrub(str(e))
                if attempt + 1 >= attempts:
                    break
                self.retries += 1
                delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, e.retry_after)
                log.warning("request %d: %s; retry %d/%d in %.2f s", index, last, attempt + 1, attempts - 1, delay)
                await asyncio.sleep(delay)
        raise EngineError(
            self._scrub(
                f"{self.config.base_url} (model {self.config.model!r}): request {index} failed after "
                f"{attempts} attempt(s); last error: {last}"
            )
        )

    async def _call(self, prompt: str, request: GenerationRequest) -> Reply:
        """One attempt: the whole exchange within `timeout_s` (the client's own timeout is per read, which a
        server dripping a byte a second never trips), at most `max_reply_bytes` read, the reply validated."""
        import openai

        s = request.sampling
        limit = max_reply_bytes(request)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                async with self._get_client().completions.with_streaming_response.create(
                    model=self.config.model,
                    prompt=prompt,
                    n=server_n(request),
                    max_tokens=s.max_tokens,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    stop=list(s.stop) or None,
                    seed=sample_seed(request),  # vLLM seeds sample i with seed + i: see sample_seed
                    # top_k is no OpenAI parameter: vLLM and SGLang servers read it from the body
                    extra_body=None if s.top_k is None else {"top_k": s.top_k},
                ) as response:
                    body = bytearray()
                    async for chunk in response.iter_bytes():
                        body += chunk
                        if len(body) > limit:
                            raise _Retryable(
                                f"reply larger than {limit} bytes (n={server_n(request)}, "
                                f"max_tokens={s.max_tokens}): refused"
                            )
        except TimeoutError as e:
            raise _Retryable(f"no complete reply within {self.config.timeout_s:g} s") from e
        except openai.APITimeoutError as e:
            raise _Retryable(f"timed out after {self.config.timeout_s:g} s") from e
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            raise _Retryable(f"connection failed ({type(cause).__name__})") from e
        except openai.APIStatusError as e:
            detail = f"HTTP {e.status_code}: {short(e.message)}"
            if e.status_code in RETRY_STATUS:
                raise _Retryable(detail, retry_after(e)) from e
            # 400/413/422: this request is refused for what it asks; 401, 404 ...: the engine is unusable
            error = RequestRefused if e.status_code in REFUSED_STATUS else EngineError
            raise error(self._scrub(f"{self.config.base_url} (model {self.config.model!r}): {detail}")) from None
        except TRANSPORT_ERRORS as e:  # the body broke off mid-way (httpx / httpx2, not wrapped by openai)
            raise _Retryable(f"reading the reply failed ({type(e).__name__}: {short(e, 120)})") from e
        except openai.OpenAIError as e:  # anything else the client refuses: not worth repeating
            raise EngineError(
                self._scrub(f"{self.config.base_url} (model {self.config.model!r}): {type(e).__name__}: {short(e)}")
            ) from None
        try:
            return parse_reply(bytes(body))
        except ValueError as e:  # malformed: worth another attempt
            raise _Retryable(str(e)) from None

    def _result(self, prompt: str, request: GenerationRequest, reply: Reply) -> GenerationResult:
        choices = sorted(reply.choices, key=lambda c: c.index)
        wanted = server_n(request)
        if [c.index for c in choices] != list(range(wanted)):
            raise _Retryable(f"incomplete response: choices {[c.index for c in choices]} for n={wanted}")
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = count_tokens(self._tokenizer, prompt) if self._tokenizer is not None else 0
        counts = self._completion_tokens(choices, reply.completion_tokens, request.sampling.max_tokens)
        comps = tuple(
            # a server that echoes the key into its text must not put it into the dataset
            Completion(text=self._scrub(c.text), generated_tokens=k, finish_reason=c.finish_reason)
            for c, k in zip(choices, counts, strict=True)
        )
        if wanted != request.n:  # greedy: one decode stands for all n samples
            comps = comps * request.n
        return GenerationResult(completions=comps, prompt_tokens=int(prompt_tokens))

    def _completion_tokens(self, choices: list[Choice], total: int | None, max_tokens: int) -> list[int]:
        """Generated tokens per choice. Servers report only the total (`usage.completion_tokens`), so:
        exact where a choice carries its tokens; a choice cut by the length limit has exactly
        `max_tokens`; the others share what is left of the total in proportion to an estimate
        (their retokenized text, or its length without a tokenizer). The sum always equals usage."""
        exact = [c.tokens for c in choices]
        if all(k is not None for k in exact):
            return [int(k) for k in exact]  # type: ignore[arg-type]
        exact = [
            max_tokens if k is None and c.finish_reason == "length" else k for c, k in zip(choices, exact, strict=True)
        ]
        open_ = [i for i, k in enumerate(exact) if k is None]
        if self._tokenizer is not None:
            guess = {i: count_tokens(self._tokenizer, choices[i].text) for i in open_}
        else:
            guess = {i: max(1, len(choices[i].text.split())) for i in open_}
        left = total - sum(k for k in exact if k is not None) if total is not None else None
        if open_ and left is not None and left >= 0:
            weight = sum(guess.values()) or len(open_)
            shares = {i: left * (guess[i] if sum(guess.values()) else 1) // weight for i in open_}
            rest = left - sum(shares.values())
            for i in sorted(open_, key=lambda i: -guess[i])[:rest]:
                shares[i] += 1
            guess = shares
        return [int(guess[i]) if k is None else int(k) for i, k in enumerate(exact)]
