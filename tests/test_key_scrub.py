"""The key scrubber finds a key however a server echoes it: percent-encoded (either hex case, over-
encoded, twice), wrapped over lines, split at any point with text between the halves, and keys of any
length whole (prm_synth.key_scrub says exactly what it covers)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from prm_synth.key_scrub import PIECE_CHARS, _View, scrub

KEY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
# Prose around the key: no key character, so the only key text is the planted one; and no `%` or `\`,
# which with the key's first characters would spell an encoding or an escaped break (`\` + `n...`).
PROSE = st.text(alphabet=" !?*,;:()[]{}<>\"'\n\t", max_size=40)
# Text between the halves of a split key may hold anything.
MIDDLE = st.text(alphabet=" !?*,;:()[]{}<>\"'\n\t\\%", max_size=40)
BREAKS = ["\n", "\r\n", "\r", "\n    ", " \n\t", "\\n", "\\r\\n"]

keys = st.text(alphabet=KEY_CHARS, min_size=1, max_size=80)


def _encode(ch: str, how: int) -> str:
    code = f"{ord(ch):02X}"
    return [ch, f"%{code}", f"%{code.lower()}", f"%25{code}", f"%25{code.lower()}"][how]


@st.composite
def echoes(draw, key: str) -> str:
    """The key as a server may echo it: each character as itself or percent-encoded (any case, also
    twice), and line breaks (a wrap) between any characters."""
    out = []
    for i, ch in enumerate(key):
        if i and draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(BREAKS)))
        out.append(_encode(ch, draw(st.integers(0, 4))))
    return "".join(out)


def _readable(text: str) -> str:
    """The text as the scrubber reads it: encodings decoded, breaks left out."""
    return _View(text).text


@settings(max_examples=400, deadline=None)
@given(data=st.data(), key=keys, before=PROSE, after=PROSE)
@example(data=None, key="sk-a", before="", after="")
def test_a_key_of_any_length_in_any_encoding_and_wrap_is_scrubbed(data, key, before, after):
    echo = key if data is None else data.draw(echoes(key))
    out = scrub(before + echo + after, key)
    assert key not in _readable(out), (echo, out)
    assert "***" in out


@settings(max_examples=300, deadline=None)
@given(data=st.data(), key=st.text(alphabet=KEY_CHARS, min_size=PIECE_CHARS, max_size=80), middle=MIDDLE)
def test_a_key_split_at_any_point_loses_every_piece_of_piece_chars_or_more(data, key, middle):
    at = data.draw(st.integers(1, len(key) - 1))
    head, tail = data.draw(echoes(key[:at])), data.draw(echoes(key[at:]))
    out = _readable(scrub(f"log: {head}{middle}{tail} end", key))
    for piece in (key[:at], key[at:]):
        if len(piece) >= PIECE_CHARS:
            assert piece not in out, (key, at, out)
    assert key not in out


@settings(max_examples=200, deadline=None)
@given(key=keys, text=st.text(alphabet="XYZ xyz\n%0123456789!", max_size=200))
def test_text_without_the_key_is_left_exactly_as_it_was(key, text):
    """Prose that holds no piece of the key (other characters) keeps every character, its line breaks
    and percent signs included."""
    key = "".join(c for c in key if c not in "xyzXYZ0123456789") or "k-k"
    assert scrub(text, key) == text


def test_what_is_around_the_key_stays():
    key = "sk-live-0123456789abcdef"
    assert scrub(f"Authorization: Bearer {key}\nnext line", key) == "Authorization: Bearer ***\nnext line"
    assert scrub(f"a%2D{key.replace('-', '%2d')}%2Db", key) == "a%2D***%2Db"
    assert scrub("no key here", key) == "no key here"
    assert scrub("anything", "") == "anything"
