"""Thinking traces of reasoning models through both renderers, the grader and the simulated policy.

The chat templates are the Qwen3 and DeepSeek-R1-Distill ones (tests/fixtures/chat_templates), on a
tokenizer built in the test: no model download. The vLLM engine's rendering is tested without vLLM
(a stand-in `LLM` that only hands over the tokenizer), the OpenAI-compatible engine's without a server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _tokenizers import qwen_like_bpe
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import OpenAIConfig, SimulatedPolicyConfig, ThinkingConfig, VLLMConfig
from prm_synth.engines.base import GenerationRequest
from prm_synth.engines.openai import OpenAIEngine
from prm_synth.engines.vllm import VLLMEngine
from prm_synth.grading.math import UNKNOWN_REASONS, Verdict, grade_answer, grade_completion
from prm_synth.prompting.thinking import (
    TRUNCATED_THINKING,
    ThinkingMarkers,
    apply_template,
    join_prompt,
    markers_in_template,
    resolve_markers,
)
from prm_synth.simulated.engines import SimulatedPolicy

TEMPLATES = Path(__file__).parents[1] / "fixtures" / "chat_templates"
QWEN3 = (TEMPLATES / "qwen3.jinja").read_text()
R1 = (TEMPLATES / "deepseek_r1_distill.jinja").read_text()
THINK = ThinkingConfig()
QUESTION = "What is 2 + 3?"
TRACE = "<think>\nLet me add them.\n\nMaybe \\boxed{6}? No: 2 + 3 = 5.\n\n"


@pytest.fixture(scope="module")
def qwen3():
    return qwen_like_bpe(chat_template=QWEN3)


@pytest.fixture(scope="module")
def r1():
    return qwen_like_bpe(chat_template=R1)


class _LLM:
    """What VLLMEngine reads of a `vllm.LLM` when it renders: its tokenizer and two sizes."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        scheduler = type("S", (), {"max_num_seqs": 8})()
        self.llm_engine = type(
            "E",
            (),
            {
                "model_config": type("M", (), {"max_model_len": 4096})(),
                "vllm_config": type("V", (), {"scheduler_config": scheduler})(),
            },
        )()

    def get_tokenizer(self):
        return self.tokenizer


def renderers(tokenizer, thinking=THINK):
    """The in-process (vLLM) and OpenAI-compatible engines' `render`, on one tokenizer."""
    vllm = VLLMEngine(VLLMConfig(model="fake", thinking=thinking), llm=_LLM(tokenizer))
    openai = OpenAIEngine(OpenAIConfig(model="fake", thinking=thinking), tokenizer=tokenizer)
    return {"vllm": vllm.render, "openai": openai.render}


def test_the_markers_are_read_from_both_families_templates(qwen3, r1):
    assert markers_in_template(QWEN3) == ("<think>", "</think>")
    assert markers_in_template(R1) == ("<think>", "</think>")
    assert resolve_markers(VLLMConfig(model="x", thinking=THINK), qwen3) == ThinkingMarkers(
        "<think>", "</think>", False
    )
    assert resolve_markers(VLLMConfig(model="x", thinking=THINK), r1) == ThinkingMarkers("<think>", "</think>", True)
    assert resolve_markers(VLLMConfig(model="x"), r1) is None  # no thinking section: a plain model
    own = ThinkingConfig(open="<reason>", close="</reason>", forced_open=False)
    assert resolve_markers(VLLMConfig(model="x", thinking=own), r1) == ThinkingMarkers("<reason>", "</reason>", False)


@pytest.mark.parametrize("engine", ["vllm", "openai"])
def test_qwen3_a_prefix_inside_the_trace_is_continued_as_thinking(qwen3, engine):
    render = renderers(qwen3)[engine]
    head = render(GenerationRequest(QUESTION))
    assert head.endswith("<|im_start|>assistant\n") and "<think>" not in head  # the model opens it itself
    inside = render(GenerationRequest(QUESTION, assistant_prefix=TRACE))
    assert inside == head + TRACE  # exactly the prefix after the generation prompt
    assert inside.count("<think>") == 1 and "</think>" not in inside  # opened once, not closed
    answer = TRACE + "</think>\n\nThe answer is "
    past = render(GenerationRequest(QUESTION, assistant_prefix=answer))
    assert past.endswith(answer) and past.count("</think>") == 1  # the model goes on with the answer


def test_qwen3_in_non_thinking_mode_the_empty_trace_does_not_close_a_prefixs_thinking(qwen3):
    markers = ThinkingMarkers("<think>", "</think>")
    messages = [{"role": "user", "content": QUESTION}]
    closed = qwen3.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert closed.endswith("<think>\n\n</think>\n\n")
    prompt = join_prompt(closed, TRACE, markers)
    assert prompt.endswith("<|im_start|>assistant\n" + TRACE) and prompt.count("<think>") == 1
    assert "</think>" not in prompt
    # the renderer asks the template for its thinking mode, so the empty trace is never written
    assert apply_template(qwen3, messages, markers).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("engine", ["vllm", "openai"])
def test_deepseek_r1_the_forced_open_marker_is_written_once(r1, engine):
    render = renderers(r1)[engine]
    head = render(GenerationRequest(QUESTION))
    assert head.endswith("<｜Assistant｜><think>\n")  # the template forces the trace open
    # a sampled solution starts inside the trace, without the marker: appended as it is
    body = "Okay, 2 + 3.\n\n"
    assert render(GenerationRequest(QUESTION, assistant_prefix=body)) == head + body
    # a prefix that carries the marker itself (e.g. written by a non-forcing revision): not opened again
    with_marker = render(GenerationRequest(QUESTION, assistant_prefix=TRACE))
    assert with_marker.endswith("<｜Assistant｜>" + TRACE) and with_marker.count("<think>") == 1
    past = render(GenerationRequest(QUESTION, assistant_prefix=body + "</think>\n\n"))
    assert past.count("<think>") == 1 and past.endswith("</think>\n\n")


def test_without_a_thinking_section_the_rendering_is_as_before(qwen3):
    for render in renderers(qwen3, thinking=None).values():
        assert render(GenerationRequest(QUESTION, assistant_prefix=TRACE)).endswith("<|im_start|>assistant\n" + TRACE)


def test_the_grader_reads_only_the_answer_after_the_trace():
    m = ThinkingMarkers("<think>", "</think>")
    text = TRACE + "</think>\n\nSo the answer is \\boxed{5}."
    assert grade_completion(text, "5", "stop", m).status == "correct"
    assert grade_completion(text, "6", "stop", m).status == "incorrect"  # the box while thinking is not read
    unclosed = TRACE + "Therefore the answer is \\boxed{5}."
    assert grade_completion(unclosed, "5", "stop", m) == Verdict("unknown", None, TRUNCATED_THINKING)
    assert grade_completion(unclosed, "5", "length", m).reason == TRUNCATED_THINKING
    assert grade_completion(text, "5", "length", m).reason == "truncated"  # closed, then cut off
    forced = ThinkingMarkers("<think>", "</think>", forced_open=True)
    assert grade_answer("2 + 3 = 5. \\boxed{5}", "5", forced).reason == TRUNCATED_THINKING  # all trace
    assert grade_answer("reasoning\n</think>\n\\boxed{5}", "5", forced).status == "correct"
    assert grade_answer("\\boxed{5}", "5", m).status == "correct"  # no trace at all: all answer
    assert TRUNCATED_THINKING in UNKNOWN_REASONS


_TEXT = st.text(alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(before=_TEXT, after=_TEXT, answer=_TEXT, forced=st.booleans(), closed=st.booleans())
def test_a_box_inside_the_thinking_is_never_graded_as_the_answer(before, after, answer, forced, closed):
    m = ThinkingMarkers("<think>", "</think>", forced)
    gold = "91173"
    trace = ("" if forced else "<think>") + before + f"\\boxed{{{gold}}}" + after
    text = trace + ("</think>" + answer.replace(gold, "") if closed else "")
    verdict = grade_answer(text, gold, m)
    assert verdict.status != "correct"
    assert (verdict.reason == TRUNCATED_THINKING) == (not closed)


@settings(max_examples=150, deadline=None)
@given(before=_TEXT, after=_TEXT, answer=_TEXT)
def test_a_text_that_closes_a_trace_it_never_opened_is_read_as_forced_open(before, after, answer):
    """What a template that forces the trace open produces, read without its tokenizer (forced_open
    unknown): the box before the close marker was written while thinking and is never the answer."""
    m = ThinkingMarkers("<think>", "</think>")  # forced_open not known
    gold = "91173"
    text = before + f"\\boxed{{{gold}}}" + after + "</think>" + answer.replace(gold, "")
    assert grade_answer(text, gold, m).status != "correct"
    assert m.answer_section(text) == answer.replace(gold, "")
    assert grade_answer("2 + 1 = 3 ... So \\boxed{3}. </think> I have finished.", "3", m).status != "correct"
    assert grade_answer("2 + 1 = 3 ... </think> So \\boxed{3}.", "3", m).status == "correct"


def test_the_simulated_policy_writes_a_trace_and_continues_it():
    policy = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.0, thinking=THINK))
    import random

    from prm_synth.prompting.prompts import policy_user_prompt
    from prm_synth.simulated import arithmetic

    chain = arithmetic.generate(random.Random(1), 5, 5)
    user = policy_user_prompt(chain.question())
    (result,) = policy.generate([GenerationRequest(user)])
    text = result.completions[0].text
    m = ThinkingMarkers("<think>", "</think>")
    assert text.startswith("<think>\n") and m.close_at(text) is not None
    assert grade_answer(text, str(chain.answer), m).status == "correct"
    inside = text[: text.index("\n\n", 20) + 2]
    (rest,) = policy.generate([GenerationRequest(user, assistant_prefix=inside)])
    assert inside + rest.completions[0].text == text  # a continuation from inside the trace closes it


class _ThinkingJudge:
    """A judge engine of a thinking model: a box while thinking, another in its answer (or no answer)."""

    model_name = "thinking-judge"
    thinking = ThinkingMarkers("<think>", "</think>")
    texts = ("<think>\nParagraph 1 looks off: \\boxed{1}? No.\n</think>\n\n\\boxed{2}", "<think>\nHmm \\boxed{0}")

    def generate(self, requests):
        from prm_synth.engines.base import Completion, GenerationResult

        return [GenerationResult(tuple(Completion(t, 5) for t in self.texts[: r.n]), 3) for r in requests]

    def close(self):
        pass


def test_a_thinking_judges_vote_is_read_from_its_answer():
    from prm_synth.config import JudgeConfig, SimulatedJudgeConfig
    from prm_synth.judge.ask import UNPARSEABLE, judge_solutions

    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=2)
    (verdict,), _ = judge_solutions(_ThinkingJudge(), [("q", ["a", "b", "c", "d"])], config, 8)
    assert verdict.votes == [2, UNPARSEABLE]  # the box in the thinking is no vote; an unclosed trace is none


def test_the_openai_compatible_engine_sends_the_rendered_continuation_and_top_k(qwen3):
    """Completions endpoint: the rendered prompt ends with exactly the prefix (a chat request would close the
    turn and the trace before generating); top_k travels in the body, where vLLM and SGLang read it."""
    from fault_proxy import FakeCompletionsServer

    from prm_synth.engines.base import SamplingOptions

    with FakeCompletionsServer() as server:
        engine = OpenAIEngine(OpenAIConfig(model="fake", base_url=server.url + "/v1", thinking=THINK), tokenizer=qwen3)
        try:
            request = GenerationRequest(QUESTION, assistant_prefix=TRACE, sampling=SamplingOptions(top_k=20))
            engine.generate([request, GenerationRequest(QUESTION)])
        finally:
            engine.close()
    sent = {body["prompt"]: body for body in server.bodies}
    inside = next(p for p in sent if p.endswith(TRACE))
    assert inside.count("<think>") == 1 and "</think>" not in inside
    assert sent[inside]["top_k"] == 20
    (plain,) = [body for p, body in sent.items() if p != inside]
    assert "top_k" not in plain  # unset: the server's default


def test_a_thinking_judges_votes_asked_one_at_a_time_are_read_from_its_answer():
    """`judge.select: needed` asks a vote a round: each is read as `judge_solutions` reads them, so a box
    written only while thinking is no vote, and the row is left open for want of a readable one."""
    from _prm_helpers import labeled_row

    from prm_synth.config import ConsensusConfig, JudgeConfig, SimulatedJudgeConfig
    from prm_synth.judge.selection import judge_selected

    class Undecided(_ThinkingJudge):
        texts = ("<think>\nMaybe \\boxed{1}.\n</think>\n\nI cannot tell which step is wrong.",)

    right = labeled_row([True] * 4, final_correct=True, p_good=[0.99, 0.9, 0.8, 0.7])  # always sent
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=2)
    kept, left_open, stats = judge_selected(Undecided(), [right], config, ConsensusConfig(), 8)
    assert not kept and [r.reason for r in left_open] == ["judge_unreadable"]
    # asked until a vote could no longer bring the row to the target precision: every one unreadable
    assert stats.samples == stats.unparseable >= 1


@pytest.mark.parametrize("annotate", [{"method": "binary"}, {"method": "mc", "k": 4}])
def test_a_trace_that_never_closes_says_truncated_thinking_on_its_last_step(annotate):
    from prm_synth.annotate.labeler import make_labeler
    from prm_synth.config import validate_config
    from prm_synth.pipeline import iter_shards
    from prm_synth.records import Problem

    config = validate_config(
        {
            "problems": {"kind": "builtin", "count": 6, "seed": 5, "min_ops": 4, "max_ops": 6},
            "policy": {"kind": "simulated", "thinking": {}, "ungradable": 0.5, "seed": 1, "step_error": 0.1},
            "steps": {"strategy": "thinking"},
            "sampling": {"samples_per_problem": 4},
            "annotate": annotate,
        }
    )
    problems = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    result = make_labeler(config).label(SimulatedPolicy(config.policy), problems)
    m = ThinkingMarkers("<think>", "</think>")
    unclosed = [r for r in result.records if m.answer_section("".join(r.steps)) is None]
    assert unclosed  # the seed writes some
    said = 0
    for r in unclosed:
        assert r.final_correct is None
        if r.labels[-1] is None and r.unlabeled_reason[-1] != "after_error":
            assert r.unlabeled_reason[-1] == "truncated_thinking", r.unlabeled_reason
            said += 1
    assert said
    for r in result.records:  # only those: a closed trace's steps keep the search's reasons
        if r not in unclosed:
            assert "truncated_thinking" not in (r.unlabeled_reason or [])
