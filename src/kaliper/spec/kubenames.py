"""Kubernetes name rules, checked before anything reaches an API server.

The regexes and lengths are the API's own, from k8s.io/apimachinery/pkg/util/validation/validation.go
(`IsDNS1123Label`, `IsDNS1123Subdomain`, `IsDNS1035Label`, `IsQualifiedName`, `IsValidLabelValue`).
A spec that the API server would refuse must fail `kaliper validate`, not a workflow step an hour later.

API: every `check_*` function is pure and returns None when the value is valid, or a one-line problem
(`expected ..., found ...`; the value is quoted shortened) otherwise. `require(problem)` turns a problem
into a ValueError, which is what pydantic validators raise.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_DNS1123_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME = re.compile(_QUALIFIED_NAME)
LABEL_VALUE = re.compile(rf"({_QUALIFIED_NAME})?")


def _found(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check(value: object, pattern: re.Pattern[str], max_length: int, what: str) -> str | None:
    """`fullmatch`, never `match`: `$` would let a trailing newline through."""
    if not isinstance(value, str):
        return f"expected {what}, found {type(value).__name__} {_found(value)}"
    if len(value) > max_length:
        return f"expected {what}, found {len(value)} characters"
    if not pattern.fullmatch(value):
        return f"expected {what}, found {_found(value)}"
    return None


def check_dns1123_label(value: object, max_length: int = DNS1123_LABEL_MAX) -> str | None:
    """Namespaces, most names: lower-case alphanumerics and '-', alphanumeric at both ends, ≤ 63."""
    what = (
        "a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit) "
        f"of at most {max_length} characters"
    )
    return _check(value, DNS1123_LABEL, max_length, what)


def check_dns1035_label(value: object, max_length: int = DNS1123_LABEL_MAX) -> str | None:
    """Service names (and what becomes one): a DNS-1123 label that starts with a letter."""
    what = (
        "a DNS label (lower-case letters, digits and '-', starting with a letter and ending with a letter "
        f"or digit) of at most {max_length} characters"
    )
    return _check(value, DNS1035_LABEL, max_length, what)


def check_dns1123_subdomain(value: object) -> str | None:
    """Object names (service accounts, secrets, claims): dot-separated DNS-1123 labels, ≤ 253."""
    what = (
        "a Kubernetes object name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting "
        f"and ending with a letter or digit) of at most {DNS1123_SUBDOMAIN_MAX} characters"
    )
    return _check(value, DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MAX, what)


def check_qualified_name(value: object) -> str | None:
    """Label and annotation keys, node selector and toleration keys: `[prefix/]name`, where prefix is a
    DNS-1123 subdomain and name ≤ 63 characters of alphanumerics, '-', '_' and '.'."""
    what = (
        "a Kubernetes qualified name ([prefix/]name: name at most 63 letters, digits, '-', '_' and '.', "
        "starting and ending with a letter or digit; prefix a DNS-1123 subdomain)"
    )
    if not isinstance(value, str):
        return f"expected {what}, found {type(value).__name__} {_found(value)}"
    parts = value.split("/")
    if len(parts) > 2:
        return f"expected {what}, found {_found(value)}"
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or check_dns1123_subdomain(prefix) is not None:
            return f"expected {what}, found {_found(value)} (the prefix is not a DNS-1123 subdomain)"
    else:
        name = parts[0]
    if not name or len(name) > QUALIFIED_NAME_MAX or not QUALIFIED_NAME.fullmatch(name):
        return f"expected {what}, found {_found(value)}"
    return None


def check_label_value(value: object) -> str | None:
    """Label, node selector and toleration values: empty, or ≤ 63 characters like a qualified name."""
    what = (
        "a Kubernetes label value (empty, or at most 63 letters, digits, '-', '_' and '.', starting and "
        "ending with a letter or digit)"
    )
    return _check(value, LABEL_VALUE, LABEL_VALUE_MAX, what)


def require(problem: str | None) -> None:
    """Raise ValueError(problem) when there is one: how a pydantic validator reports it."""
    if problem is not None:
        raise ValueError(problem)
