"""Property: whatever a spec file holds, reading it either succeeds or raises a KaliperError.

Never a TypeError, an OverflowError, a yaml error or a RecursionError: those would reach the user as a
traceback instead of `error: <file>: <field>: ...`. Specs are made by mutating examples/quickstart.yaml
(random values at random paths, new keys, whole sections replaced) and by splicing random YAML-ish text
into it. Seeded (derandomize) and without hypothesis' database, so every run checks the same inputs.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from kaliper.errors import KaliperError
from kaliper.spec.loader import parse_spec_text, spec_from_text
from tests.support.paths import EXAMPLES

# Hypothesis caches unicode tables and source constants in ./.hypothesis even without a database: keep the
# working tree clean.
set_hypothesis_home_dir(tempfile.mkdtemp(prefix="kaliper-hypothesis-"))

QUICKSTART = EXAMPLES / "quickstart.yaml"
BASE_TEXT = QUICKSTART.read_text()
BASE: dict[str, Any] = yaml.safe_load(BASE_TEXT)
SOURCE = "fuzz.yaml"
BASE_DIR = Path(__file__).resolve().parent  # a template the fuzzer names is (almost surely) not there

FIELD_NAMES = (
    "name",
    "workload",
    "template",
    "framework",
    "params",
    "matrix",
    "matrix_size",
    "threads",
    "dtype",
    "repetitions",
    "sampling",
    "max_time",
    "job",
    "kind",
    "replicas",
    "Master",
    "resources",
    "cpu",
    "memory",
    "gpu",
    "timeout",
    "namespace",
    "service_account",
    "node_selector",
    "tolerations",
    "key",
    "value",
    "operator",
    "storage",
    "stacks",
    "image",
    "requirements",
    "monitoring",
    "prometheus",
    "pushgateway",
    "s3",
    "endpoint",
    "secret",
    "report",
    "threshold",
    "schedule",
    "workflow",
    "timezone",
)

STRINGS = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12),  # ASCII, control characters included
    st.sampled_from(
        [
            "",
            "256",
            " 256",
            "true",
            "1e400",
            "nan",
            "-1",
            "0",
            "4Gi",
            "99999999999999999999",
            "500m",
            "10m",
            "1.5h",
            "99 99 99 99 99",
            "0 2 * * *",
            "file://./x",
            "s3://AKIA:se/cret@bucket/p",
            "http://u:p@h:1",
            "a/b/c",
            "Bad NS;rm -rf /",
            "demo\n",
            "x" * 300,
            "\x00",
            "\x1b[31m",
        ]
    ),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: beyond 64 bits too
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    STRINGS,
)
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=10), st.integers(-3, 3), st.booleans())
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=4),
    ),
    max_leaves=10,
)

COMMON = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into the document (mapping keys and list indices), the root excluded."""
    found: list[tuple[Any, ...]] = []
    children: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        children = list(node.items())
    elif isinstance(node, list):
        children = list(enumerate(node))
    for key, child in children:
        found.append((*prefix, key))
        found.extend(_paths(child, (*prefix, key)))
    return found


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def _containers(document: Any) -> list[tuple[Any, ...]]:
    return [()] + [p for p in _paths(document) if isinstance(_get(document, p), dict)]


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    """The quickstart document with 1-3 mutations: a value replaced, a key added, a key removed."""
    document: Any = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "insert", "delete", "root"]))
        paths = _paths(document)
        if action == "root":
            document = draw(VALUES) if draw(st.integers(0, 9)) == 0 else document
            continue
        if action == "insert" or not paths:
            containers = _containers(document)
            if not containers or not isinstance(document, dict):
                continue
            parent = _get(document, draw(st.sampled_from(containers)))
            parent[draw(KEYS)] = draw(VALUES)
            continue
        path = draw(st.sampled_from(paths))
        parent = _get(document, path[:-1])
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(VALUES)
    return document


def _dump(document: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(document, default=str)  # JSON is YAML; NaN and Infinity become strings there
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def check(text: str) -> None:
    """The property: success, or a KaliperError whose message names the file and is never empty."""
    try:
        spec_from_text(text, SOURCE, BASE_DIR)
    except KaliperError as exc:
        assert str(exc).startswith(SOURCE) or "KALIPER_" in str(exc), str(exc)[:300]


@settings(COMMON, max_examples=1200)
@given(mutated_documents(), st.booleans())
def test_mutated_specs_load_or_raise_kaliper_errors(document: Any, as_json: bool) -> None:
    try:
        text = _dump(document, as_json)
    except (TypeError, ValueError, yaml.YAMLError):  # keys json cannot write: not a spec file anyway
        return
    check(text)


YAML_FRAGMENTS = st.one_of(
    st.text(
        alphabet=st.sampled_from(list(":{}[],&*!|>'\"%@`#-? \n\t\x1b\x00\u2028\ufeffab019.")), max_size=24
    ),
    st.sampled_from(
        [
            "\n  bogus: 1",
            ": :",
            "&a [*a]",
            "*undefined",
            "!!python/object:os.system {}",
            "!!binary 'not base64'",
            "!!timestamp 2024-13-45",
            "2024-13-45",
            "<<: {a: 1}",
            "\n---\n",
            "\nname: again",
            "\x85",
            "? [a]\n: 1",
            "[" * 60,
            "!!int 99999999999999999999999",
            "!!float xyz",
            "!!set {a, b}",
        ]
    ),
)


@settings(COMMON, max_examples=900)
@given(st.integers(0, len(BASE_TEXT)), st.integers(0, 40), YAML_FRAGMENTS)
def test_spliced_yaml_text_loads_or_raises_kaliper_errors(position: int, cut: int, fragment: str) -> None:
    """Random YAML-ish text replaces a stretch of quickstart.yaml."""
    check(BASE_TEXT[:position] + fragment + BASE_TEXT[position + cut :])


@settings(COMMON, max_examples=600)
@given(st.one_of(st.text(max_size=200), YAML_FRAGMENTS.map(lambda f: "name: demo\n" + f)))
def test_parse_spec_text_returns_a_mapping_or_raises_kaliper_errors(text: str) -> None:
    try:
        data = parse_spec_text(text, SOURCE)
    except KaliperError as exc:
        assert str(exc).startswith(SOURCE), str(exc)[:300]
        return
    assert isinstance(data, dict)
