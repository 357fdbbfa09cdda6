"""One request of a serving run, as the request mix makes it and the client sends it.

Shared by the request mix (kaliper.benchmarks.serve.mix: what is sent) and the clients (what sends it):
neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    """`prompt` for a completions API, `messages` for a chat API (one of the two is set).

    `input_tokens` is counted by the mix's tokenizer (or in words without one: the mix says which);
    `max_tokens` is the output length asked for, which the client sends as `max_tokens` (and, where the
    spec asks for exact lengths, as `min_tokens` with `ignore_eos`)."""

    index: int
    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None  # (role, content)
    input_tokens: int
    max_tokens: int

    def chat_messages(self) -> list[dict[str, str]]:
        """`messages` as an OpenAI chat body takes them; a prompt becomes one user message."""
        if self.messages is not None:
            return [{"role": role, "content": content} for role, content in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def completion_prompt(self) -> str:
        """The text a completions API takes; chat messages joined by newlines."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(content for _, content in self.messages or ())

    def document(self) -> dict[str, Any]:
        """One line of the run's inputs file (what was sent)."""
        doc: dict[str, Any] = {"index": self.index, "input_tokens": self.input_tokens}
        doc["max_tokens"] = self.max_tokens
        if self.messages is not None:
            doc["messages"] = self.chat_messages()
        else:
            doc["prompt"] = self.prompt
        return doc
