import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import StepsConfig
from prm_synth.steps import STRATEGIES, split_steps

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
