"""The real `VLLMEngine` on the demo model (SmolLM2-135M, CPU, float32), with a tiny token budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from prm_synth.config import VLLMConfig
from prm_synth.engines.base import Engine, GenerationRequest, SamplingOptions
from prm_synth.engines.chat import TOKENIZATION_KWARGS, messages_for, render_plain, render_prompt

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
PREFIX = "Step 1: Tom starts with 3 apples.\nStep 2:"


@pytest.fixture
def engine(demo_vllm_engine):
    """The session's shared demo engine (tests/conftest.py): vLLM is imported and started only by the tests
    that use it, all of them slow. The too-long prompt below (3000 words) relies on its 2048-token context."""
    assert demo_vllm_engine.config == VLLMConfig(model="demo", max_model_len=2048)
    return demo_vllm_engine


def test_render_prompt_is_template_then_exact_prefix():
    from transformers import AutoTokenizer

    from prm_synth.demo_model import demo_model_path

    tok = AutoTokenizer.from_pretrained(str(demo_model_path()))
    req = GenerationRequest(user=QUESTION, assistant_prefix=PREFIX, system="Be brief.")
    prompt = render_prompt(tok, req)
    head = tok.apply_chat_template(messages_for(req), tokenize=False, add_generation_prompt=True)
    assert prompt == head + PREFIX
    assert prompt.endswith("<|im_start|>assistant\n" + PREFIX)
    assert "Be brief." in prompt and QUESTION in prompt
    # no system: the config's default system prompt is used, and none at all when that is None too
    assert "Default sys" in render_prompt(tok, GenerationRequest(user="q"), default_system="Default sys")
    assert render_plain(GenerationRequest(user="q", assistant_prefix="p", system="s")) == "s\n\nq\n\np"


@pytest.mark.slow
def test_generate_many_requests_with_n(engine):
    assert isinstance(engine, Engine)
    assert engine.model_name == "smollm2-135m-instruct"
    requests = [
        GenerationRequest(user=QUESTION, assistant_prefix=PREFIX, n=3, sampling=SamplingOptions(max_tokens=8)),
        GenerationRequest(user="Name a prime number.", n=2, sampling=SamplingOptions(max_tokens=6, temperature=1.0)),
        GenerationRequest(user="Say hi.", system="You are terse.", n=1, sampling=SamplingOptions(max_tokens=4)),
        GenerationRequest(user=QUESTION, n=2, sampling=SamplingOptions(max_tokens=8, temperature=0.0, stop=("\n",))),
    ]
    results = engine.generate(requests)
    assert [len(r.completions) for r in results] == [3, 2, 1, 2]
    for req, res in zip(requests, results, strict=True):
        assert res.prompt_tokens > 0
        for c in res.completions:
            assert 0 < c.generated_tokens <= req.sampling.max_tokens
            assert c.finish_reason in ("stop", "length")
    # prompt token counts are those of the rendered prompt (template + exact prefix, no extra BOS)
    for req, res in zip(requests, results, strict=True):
        ids = engine.tokenizer(engine.render(req), **TOKENIZATION_KWARGS)["input_ids"]
        assert res.prompt_tokens == len(ids)
    # greedy with n=2: both samples identical, and the stop string ends (and is not in) the text
    greedy = results[3].completions
    assert greedy[0].text == greedy[1].text and "\n" not in greedy[0].text
    assert engine.generate([]) == []


@pytest.mark.slow
def test_continuation_extends_the_prompt(engine):
    """Feeding a completion back as part of the prefix lengthens the prompt by its tokens (give or take
    a merge at the seam): the prefix is appended verbatim, not re-templated."""
    sampling = SamplingOptions(max_tokens=6, temperature=0)
    first = engine.generate([GenerationRequest(user=QUESTION, assistant_prefix=PREFIX, sampling=sampling)])[0]
    text = first.completions[0].text
    longer = engine.generate([GenerationRequest(user=QUESTION, assistant_prefix=PREFIX + text, sampling=sampling)])[0]
    grown = longer.prompt_tokens - first.prompt_tokens
    assert abs(grown - first.completions[0].generated_tokens) <= 2
    assert longer.completions[0].generated_tokens > 0


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_refused_alone(engine):
    """A prompt over the demo model's context (max_model_len 2048, the shared engine) is refused, as a vLLM server refuses
    it over HTTP; the request beside it is answered."""
    from prm_synth.engines.base import RequestRefused
    from prm_synth.engines.stream import stream_for

    short = GenerationRequest("What is 2 + 3?", n=2, sampling=SamplingOptions(max_tokens=4))
    too_long = GenerationRequest("word " * 3000, n=2, sampling=SamplingOptions(max_tokens=4))
    stream = stream_for(engine)
    ok, refused = stream.submit_all([short, too_long])
    assert stream.wait([ok, refused], timeout=300, all_of=True)
    assert len(ok.result().completions) == 2 and ok.result().prompt_tokens > 0
    with pytest.raises(RequestRefused, match="maximum context length is 2048 tokens"):
        refused.result()
    with pytest.raises(RequestRefused):  # the blocking call says so too, never an empty completion
        engine.generate([too_long])


@pytest.mark.slow
def test_requests_stream_a_short_one_returns_while_a_long_one_runs(engine):
    from prm_synth.engines.base import StreamingEngine
    from prm_synth.engines.stream import stream_for

    assert isinstance(engine, StreamingEngine) and engine.capacity >= 2
    stream = stream_for(engine)
    before = stream.telemetry.totals()
    long, short = stream.submit_all(
        [
            GenerationRequest("Write a long story about a dragon.", sampling=SamplingOptions(max_tokens=64)),
            GenerationRequest("Say hi.", n=2, sampling=SamplingOptions(max_tokens=1)),
        ]
    )
    assert stream.wait([short], timeout=120)
    assert [c.generated_tokens for c in short.result().completions] == [1, 1]
    assert not long.done()  # it keeps running; nobody waited for it to finish the batch
    assert stream.wait([long], timeout=120)
    after = stream.telemetry.totals()
    assert after.sequences - before.sequences == 3
    assert after.tokens - before.tokens == 2 + long.result().generated_tokens
    assert after.busy > before.busy


@pytest.mark.slow
def test_a_request_given_up_is_aborted_in_vllm_and_the_others_go_on(engine):
    from prm_synth.engines.base import RequestAbandoned
    from prm_synth.engines.stream import stream_for

    stream = stream_for(engine)
    long, short = stream.submit_all(
        [
            GenerationRequest("Write a long story about a dragon.", n=2, sampling=SamplingOptions(max_tokens=512)),
            GenerationRequest("Say hi.", sampling=SamplingOptions(max_tokens=2)),
        ]
    )
    assert stream.wait([short], timeout=120)  # both are in vLLM now; the long one runs on
    assert engine.running() == 2
    stream.give_up([long])
    with pytest.raises(RequestAbandoned):
        long.result()
    assert engine.running() == 0  # its two samples left vLLM's batch at once
    (after,) = engine.generate([GenerationRequest("Say hi.", sampling=SamplingOptions(max_tokens=2))])
    assert after.completions[0].generated_tokens > 0
    assert not engine._llm.llm_engine.has_unfinished_requests()


@pytest.mark.slow
def test_a_sample_is_the_same_alone_in_a_batch_or_asked_later(engine):
    """Each sample is seeded from its prompt and index (engines/base.py `sample_seed`), not from the batch."""
    sampling = SamplingOptions(max_tokens=12, temperature=1.0)
    asked = GenerationRequest(user=QUESTION, assistant_prefix=PREFIX, n=3, sampling=sampling)
    (together,) = engine.generate([asked])
    others = [GenerationRequest(user=f"Count to {i}.", n=2, sampling=sampling) for i in range(3, 7)]
    in_batch = engine.generate([*others, asked])[-1]
    first, rest = engine.generate([replace(asked, n=1), replace(asked, n=2, first_sample_index=1)])
    texts = [c.text for c in together.completions]
    assert texts == [c.text for c in in_batch.completions] == [c.text for c in (*first.completions, *rest.completions)]
    assert len(set(texts)) > 1  # the samples of one prompt still differ from each other
