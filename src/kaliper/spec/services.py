"""The spec's sections about services outside the job (`monitoring:` for Prometheus and the Pushgateway,
`s3:`) and about the report (`report:`: baseline and verdict threshold).

Re-exported by kaliper.spec. URLs are checked
without ever being echoed: they may carry a password, which is refused, never shown.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kaliper.analysis.terms import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from kaliper.spec.kubenames import DNS1123_SUBDOMAIN, check_dns1123_subdomain

DNS_SUBDOMAIN = DNS1123_SUBDOMAIN  # kept for importers; fullmatch it (kaliper.spec.kubenames)
URL_MAX_LENGTH = 2048


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


HTTP_URL_FORM = "http(s)://host[:port][/path]"
ENDPOINT_FORM = "http(s)://host[:port]"
# Letters, digits, '-', '_' and '.': AWS region names (us-east-1) and whatever a MinIO admin chose.
REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
CREDENTIALS_NEVER_IN_URL = (
    "it carries credentials (user:password@), which are never taken from a URL or a spec"
)


def _http_url_problem(value: str, *, path_allowed: bool) -> str | None:
    """What makes `value` unusable as an http(s) URL for a pod, or None. Never quotes the value: it may
    carry a password, and the caller's message must not echo it (describe_validation_error redacts the
    `found:` part)."""
    if len(value) > URL_MAX_LENGTH:
        return f"it is longer than {URL_MAX_LENGTH} characters"
    if any(not c.isprintable() or c.isspace() for c in value):
        return "it contains whitespace or control characters"
    if "@" in value:  # user:pass@host, also when the password holds a '/' that ends the netloc early
        return CREDENTIALS_NEVER_IN_URL
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unbalanced '[' in the host
        return "it is not a well-formed URL"
    if parts.scheme not in ("http", "https"):
        return "its scheme must be http:// or https://"
    if not parts.hostname:
        return "it names no host"
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "its port is not a number in 0-65535"
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return "it may not have a query (?...) or a fragment (#...)"
    if not path_allowed and parts.path not in ("", "/"):
        return "it must be only scheme://host[:port], without a path"
    return None


def check_http_url(value: str, *, path_allowed: bool = True) -> str:
    """`value` if it is an `http(s)://host[:port][/path]` URL without credentials (only host and port
    when `path_allowed` is false); ValueError naming what was expected and what is wrong otherwise."""
    problem = _http_url_problem(value, path_allowed=path_allowed)
    if problem is not None:
        form = HTTP_URL_FORM if path_allowed else ENDPOINT_FORM
        raise ValueError(f"expected an {form} URL without credentials; {problem}")
    return value


class MonitoringSpec(StrictModel):
    """Where live metrics go and where the reporter reads resource use; both optional."""

    prometheus: str | None = Field(
        None,
        description=(
            "Prometheus base URL, http(s)://host[:port][/path], read by the reporter for each run's resource "
            "use; on a cluster the report step gets it as KALIPER_PROMETHEUS"
        ),
    )
    pushgateway: str | None = Field(
        None,
        description=(
            "Pushgateway URL, http(s)://host[:port][/path], that replicas push live metrics to; on a cluster "
            "every job pod gets it as KALIPER_PUSHGATEWAY"
        ),
    )

    @field_validator("prometheus", "pushgateway")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)


class S3Spec(StrictModel):
    """How pods reach `s3://` storage. Used only when the storage URL is s3://; credentials never live here."""

    endpoint: str | None = Field(
        None,
        description=(
            "S3 endpoint, http(s)://host[:port] (the scheme decides TLS), e.g. http://minio.kaliper.svc:9000; "
            "pods get it as KALIPER_S3_ENDPOINT; null: AWS S3. On the local machine the environment variable "
            "KALIPER_S3_ENDPOINT, when set, overrides it"
        ),
    )
    region: str | None = Field(
        None, description="S3 region, given to pods as AWS_REGION; null: asked from the bucket"
    )
    secret: str | None = Field(
        "kaliper-s3",
        description=(
            "name of the Kubernetes Secret (in the pods' namespace) with the keys AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and optionally AWS_SESSION_TOKEN), given to pods as secretKeyRef env; "
            "null: pods get no credential env (IRSA, workload identity)"
        ),
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value, path_allowed=False)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        if value is not None and not REGION.fullmatch(value):
            raise ValueError(
                "expected an S3 region name such as us-east-1 (letters, digits, '.', '_', '-'; at most 63)"
            )
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and check_dns1123_subdomain(value) is not None:
            raise ValueError(
                "expected the name of a Kubernetes Secret (a DNS-1123 subdomain: lower-case letters, digits, "
                "'-', '.'), or null for no credential env"
            )
        return value


# `<spec name>-<yyyymmddThhmmssZ>-<4 hex>` (kaliper.configurator.experiment): sortable by creation time.
EXPERIMENT_ID = re.compile(r"^(?P<spec>[a-z][a-z0-9-]*)-(?P<stamp>\d{8}T\d{6}Z)-(?P<tag>[0-9a-f]{4})$")


class ReportSpec(StrictModel):
    """What each report compares the experiment against (verdicts in the report, on the Pushgateway and
    in Grafana), and how strictly."""

    baseline: str = Field(
        "previous",
        description=(
            "'previous': the latest earlier experiment of this spec in the same storage that has a report "
            "(for a schedule: the last run before this one); 'none': no comparison; or an experiment id"
        ),
    )
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        strict=True,
        gt=0,
        lt=1,
        description="practical threshold δ: a ratio whose CI lies within 1 ± δ is 'equivalent' (0.03 = 3%)",
    )
    alpha: float = Field(
        DEFAULT_ALPHA,
        strict=True,
        gt=0,
        lt=1,
        description="significance level of the Mann-Whitney test, and the Benjamini-Hochberg false discovery rate",
    )

    @field_validator("baseline")
    @classmethod
    def _baseline(cls, value: str) -> str:
        if value not in ("previous", "none") and not EXPERIMENT_ID.fullmatch(value):
            raise ValueError(
                "expected 'previous', 'none' or an experiment id such as quickstart-20261121T101500Z-1a2b"
            )
        return value
