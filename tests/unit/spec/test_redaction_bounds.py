"""The redactor on long and cut texts (issue 27): linear time, and a message's excerpt never shows part of
a secret.

Redaction's shapes are tested in test_records.py (test_redact_shapes); this module is about length.
"""

from __future__ import annotations

import time

import pytest

from kaliper.errors import CUT_MARGIN, Redactor, redact

# Each unit repeated to a megabyte once cost the square (or the cube) of its length: every letter could
# start a URL scheme, a secret name was scanned around from every start, every `--` could start a flag.
UNITS = (
    "a",
    "a ",
    "password=",
    "://user:",
    "a://b",
    "Bearer ",
    "?token",
    "?a",
    "&",
    "-eyJ",
    "'token': '",
    "'",
    "a-",
    "--password",
    "ghp_",
    "glpat-",
    "-----BEGIN ",
    "-----END ",
)
MIB = 1 << 20


@pytest.mark.parametrize("unit", UNITS)
def test_redacting_a_megabyte_takes_under_2s(unit: str) -> None:
    """Within 2 s of CPU (the issue's bound; about 0.1-0.5 s here): the old patterns took minutes for half
    a megabyte. CPU time, so a busy machine does not fail it."""
    text = "x " + (unit * (MIB // len(unit)))[:MIB]
    clean = Redactor({"MY_TOKEN": "aaaaaaaa"})
    started = time.process_time()
    clean(text)
    seconds = time.process_time() - started
    assert seconds < 2.0, f"{unit!r} * {MIB}: {seconds:.2f} s"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        # where a pattern starts in a run: the scheme's first letter, the run's first `--` or word boundary
        ("1https://u:pw@h/x", "1https://***@h/x"),
        ("x-y--password hunter2", "x-y--password ***"),
        ("--my-token=abc", "--my-token=***"),
        ("?a=b?token=c", "?a=b?token=***"),
        ("see https://example.com/x and https://u:p@h/y", "see https://example.com/x and https://***@h/y"),
        ("x-eyJabcdefghij.abcdefghij.abcdefghij y", "x-*** y"),
    ],
)
def test_patterns_start_where_they_did(text: str, redacted: str) -> None:
    assert redact(text, environ={}) == redacted


# Secrets whose secret part is written with "Q7" (nothing else in the texts holds it).
SECRETS = (
    "https://u:Q7Q7Q7Q7Q7Q7@host/x",
    "ghp_Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7",
    "glpat-Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7Q7",
    "AKIAQ7Q7Q7Q7Q7Q7Q7Q7",
    "eyJQ7Q7Q7Q7Q7Q7.Q7Q7Q7Q7Q7Q7.Q7Q7Q7Q7Q7Q7",
    "Bearer Q7Q7Q7Q7Q7Q7Q7",
    "password=Q7Q7Q7Q7Q7",
    "'password': 'Q7Q7 Q7Q7 Q7Q7'",
    "--password Q7Q7Q7Q7",
    "x?access_token=Q7Q7Q7Q7&y=1",
    "known Q7Q7Q7Q7Q7Q7Q7Q7 value",  # the environment's secret below
)
ENVIRON = {"MY_TOKEN": "Q7Q7Q7Q7Q7Q7Q7Q7"}
LIMIT = 80


def cut_text(secret: str, cut: int) -> str:
    """A long text whose redacted head (LIMIT + CUT_MARGIN characters) ends `cut` characters into
    `secret`, after a private key that redaction shrinks to `***`: so the cut lands in what is shown."""
    head, gap = LIMIT + CUT_MARGIN, " f "
    opening, closing = "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----"
    body = "m" * (head - cut - len("z ") - len(opening) - len(closing) - len(gap))
    text = "z " + opening + body + closing + gap + secret + " tail" * 400
    assert text.index(secret) + cut == head
    return text


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_cut_by_the_window_is_not_shown(secret: str) -> None:
    """shorten() redacts only the head of a long text. Wherever that cut falls in a secret, no part of
    the secret is shown, even where redacting what comes before pulls the cut into what is shown."""
    clean = Redactor(ENVIRON)
    for cut in range(1, len(secret)):
        text = cut_text(secret, cut)
        assert "Q7" not in clean(text), "the test's secret must be one the redactor knows"
        shown = clean.shorten(text, LIMIT)
        assert len(shown) <= LIMIT
        assert "Q7" not in shown, f"cut after {cut} characters of {secret!r}: {shown!r}"


def test_shorten_is_redact_then_cut_for_a_text_within_the_margin() -> None:
    clean = Redactor({})
    text = "found https://u:pw@h/x and " + "y" * 300
    assert clean.shorten(text, 80) == clean(text)[:77] + "..."
    assert clean.shorten("short", 80) == "short"


def test_shorten_reads_only_a_bounded_head() -> None:
    """A megabyte quoted in a message costs what a kilobyte does: what is shown matches the head."""
    clean = Redactor({})
    text = "description " + "a" * MIB
    assert clean.shorten(text, 80) == ("description " + "a" * 65) + "..."
