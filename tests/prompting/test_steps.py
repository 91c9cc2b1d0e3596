import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import StepsConfig
from prm_synth.prompting.steps import STRATEGIES, split_steps, split_thinking, splitter
from prm_synth.prompting.thinking import ThinkingMarkers

# Texts built from the pieces that matter to a splitter, plus arbitrary unicode.
_PIECES = st.sampled_from(
    [
        "\n",
        "\r\n",
        "\r",
        "\n\n",
        " \n \n",
        "\t",
        " ",
        "Step 1:",
        "Step 12.",
        "**Step 3**",
        "### Step 4:",
        "step 5:",
        "x = 2",
        "2 + 3 = 5",
        "é",
        "数学",
        "\u2028",
        "\x0b",
        "\x1c",
        "---",
        "  ",
    ]
)
TEXTS = st.one_of(st.text(), st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=30).map("".join))
SPLITS = [(s, None) for s in STRATEGIES if s != "regex"] + [
    ("regex", r"\n"),
    ("regex", r"(?=Step)"),
    ("regex", r"[.;]\s*"),
]


def _check(text: str, steps: list[str]) -> None:
    assert "".join(steps) == text
    assert all(steps), "no empty step"
    if text and not text.isspace():
        assert not any(s.isspace() for s in steps), steps
    if not text:
        assert steps == []
    elif text.isspace():
        assert steps == [text]


@pytest.mark.parametrize(("strategy", "pattern"), SPLITS)
@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_lossless_for_any_text(strategy: str, pattern: str | None, text: str) -> None:
    _check(text, split_steps(text, strategy, pattern))


def test_line() -> None:
    assert split_steps("a\nb\n\nc\n") == ["a\n", "b\n\n", "c\n"]
    assert split_steps("a\r\nb\rc") == ["a\r\n", "b\r", "c"]
    assert split_steps("\n\n  a\nb") == ["\n\n  a\n", "b"]
    assert split_steps("one line") == ["one line"]


def test_paragraph() -> None:
    text = "First we add.\n2 + 3 = 5\n\nThen multiply.\n5 × 2 = 10\n \n\n  The answer is 10.\n"
    assert split_steps(text, "paragraph") == [
        "First we add.\n2 + 3 = 5\n\n",
        "Then multiply.\n5 × 2 = 10\n \n\n",
        "  The answer is 10.\n",
    ]
    assert split_steps("a\r\n\r\nb", "paragraph") == ["a\r\n\r\n", "b"]


def test_step_marker() -> None:
    text = "Let's think.\nStep 1: add\n2 + 3 = 5\nStep 2. multiply\n**Step 3** done\n  ### Step 4: end"
    assert split_steps(text, "step-marker") == [
        "Let's think.\n",
        "Step 1: add\n2 + 3 = 5\n",
        "Step 2. multiply\n",
        "**Step 3** done\n",
        "  ### Step 4: end",
    ]
    # Markers only count at a line start; "Step 1 of" is not a marker.
    assert split_steps("see Step 2: here\nStep 1 of many", "step-marker") == ["see Step 2: here\nStep 1 of many"]
    assert split_steps("\n\nStep 1: a\n\nStep 2: b\n\n", "step-marker") == ["\n\nStep 1: a\n\n", "Step 2: b\n\n"]


def test_regex() -> None:
    assert split_steps("a; b; c", "regex", r";\s*") == ["a; ", "b; ", "c"]
    assert split_steps("xAyAz", "regex", r"(?=A)") == ["x", "Ay", "Az"]
    with pytest.raises(ValueError, match="needs a pattern"):
        split_steps("x", "regex")
    with pytest.raises(ValueError, match="invalid steps pattern"):
        split_steps("x", "regex", "(")


def test_unknown_strategy_and_empty() -> None:
    with pytest.raises(ValueError, match="unknown steps strategy"):
        split_steps("x", "sentence")
    assert split_steps("") == []
    assert split_steps("  \n\n ", "paragraph") == ["  \n\n "]


def test_paragraphs_and_a_config_pattern() -> None:
    assert split_steps("a\n\nb\n\nc", "paragraph") == ["a\n\n", "b\n\n", "c"]
    config = StepsConfig(strategy="regex", pattern="1")
    assert split_steps("a1b1c", config.strategy, config.pattern) == ["a1", "b1", "c"]


def test_an_invalid_pattern_is_refused_when_the_config_loads() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="invalid steps pattern"):
        StepsConfig(strategy="regex", pattern="(unclosed")


def test_linear_on_large_input() -> None:
    text = ("\n" + " " * 50) * 20_000 + "x" + "\n \t" * 100_000
    for strategy in ("line", "paragraph", "step-marker"):
        _check(text, split_steps(text, strategy))


# ------------------------------------------------------------------ thinking traces, max_steps
_THINK_PIECES = st.one_of(_PIECES, st.sampled_from(["<think>", "</think>", "<think>\n", "\n</think>\n\n", "ok"]))
THINKING_TEXTS = st.lists(st.one_of(_THINK_PIECES, st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    text=THINKING_TEXTS,
    min_chars=st.integers(0, 30),
    max_steps=st.one_of(st.none(), st.integers(2, 6)),
    forced=st.booleans(),
)
def test_thinking_steps_are_lossless_capped_and_end_with_the_answer(text, min_chars, max_steps, forced) -> None:
    markers = ThinkingMarkers("<think>", "</think>", forced)
    steps = split_thinking(text, markers, min_chars, max_steps)
    _check(text, steps)
    if max_steps is not None:
        assert len(steps) <= max_steps
    close = markers.close_at(text)
    if close is not None and text[:close].strip():
        assert steps[-1] == text[close:]  # the answer, from the close marker on, is the last step


def test_thinking_steps_of_a_trace() -> None:
    trace = "<think>\nFirst, read the question.\n\nOk.\n\n2 + 3 = 5, so far so good.\n\nCheck: 5 - 3 = 2.\n"
    text = trace + "</think>\n\nThe answer is \\boxed{5}."
    markers = ThinkingMarkers("<think>", "</think>")
    steps = split_thinking(text, markers)
    assert steps == [
        "<think>\nFirst, read the question.\n\n",
        "Ok.\n\n",
        "2 + 3 = 5, so far so good.\n\n",
        "Check: 5 - 3 = 2.\n",
        "</think>\n\nThe answer is \\boxed{5}.",
    ]
    merged = split_thinking(text, markers, min_chars=10)
    assert merged[1] == "Ok.\n\n2 + 3 = 5, so far so good.\n\n"  # the short paragraph joins the next
    assert split_thinking(text, markers, max_steps=3) == [
        "<think>\nFirst, read the question.\n\nOk.\n\n",
        "2 + 3 = 5, so far so good.\n\nCheck: 5 - 3 = 2.\n",
        "</think>\n\nThe answer is \\boxed{5}.",
    ]
    # a trace that never closes is all trace; a forced trace starts without its marker
    assert split_thinking(trace, markers) == steps[:-1]
    forced = split_thinking("Okay.\n\nSo 5.\n</think>\n\n\\boxed{5}", ThinkingMarkers("<think>", "</think>", True))
    assert forced == ["Okay.\n\n", "So 5.\n", "</think>\n\n\\boxed{5}"]


def test_max_steps_merges_neighbours_evenly_for_every_strategy() -> None:
    text = "".join(f"{i} + 1 = {i + 1}\n" for i in range(1000))
    split = splitter(StepsConfig(strategy="line", max_steps=64))
    steps = split(text)
    assert len(steps) == 64 and "".join(steps) == text
    sizes = {s.count("\n") for s in steps}
    assert sizes <= {15, 16}  # 1000 lines in 64 steps: as even as they divide
    thinking = splitter(StepsConfig(strategy="thinking", max_steps=64, min_chars=5))
    trace = "<think>\n" + text.replace("\n", "\n\n") + "</think>\n\nThe answer is 1000."
    steps = thinking(trace)
    assert len(steps) == 64 and steps[-1] == "</think>\n\nThe answer is 1000." and "".join(steps) == trace
    with pytest.raises(ValueError):
        StepsConfig(max_steps=1)
