"""Environment variables that more than one part of Kaliper sets or reads, each named once.

The configurator writes them into job pods (the jsonnet library `kaliper.env`, `configurator.podenv`),
the local executor passes this machine's settings to replicas, and the code inside a pod reads them
(`results.protocol.RunIdentity`, `storage.s3`, `monitoring`). A unit test checks that the template
library spells the pod identity variables as here. Tuning knobs read by one module only (retries,
intervals) are defined in that module.
"""

from __future__ import annotations

from typing import Final

# A replica's identity and destination (set by the job template, read by `kaliper workload`).
EXPERIMENT: Final = "KALIPER_EXPERIMENT"
TRIAL: Final = "KALIPER_TRIAL"
REPETITION: Final = "KALIPER_REPETITION"
REPLICA_TYPE: Final = "KALIPER_REPLICA_TYPE"
REPLICA_INDEX: Final = "KALIPER_REPLICA_INDEX"
STORAGE: Final = "KALIPER_STORAGE"
IMAGE: Final = "KALIPER_IMAGE"
# Where a replica reads what the experiment's storage holds (a recorded trace) when KALIPER_STORAGE is a
# staging area (a local run's retried attempts); unset: KALIPER_STORAGE.
READ_STORAGE: Final = "KALIPER_READ_STORAGE"
POD_IDENTITY: Final = (EXPERIMENT, TRIAL, REPETITION, REPLICA_TYPE, REPLICA_INDEX, STORAGE, IMAGE)

# The names of the variables a stack's `env` sets (comma-separated): provenance records them whatever
# their names (kaliper.results.provenance.relevant_env), so a record shows what its stack changed.
STACK_ENV: Final = "KALIPER_STACK_ENV"

# Services (spec `s3:` and `monitoring:`; on one's own machine the environment wins over the spec).
S3_ENDPOINT: Final = "KALIPER_S3_ENDPOINT"
S3_ENDPOINT_FALLBACKS: Final = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the AWS SDKs' own
REGION: Final = "AWS_REGION"
ACCESS_KEY_ID: Final = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY: Final = "AWS_SECRET_ACCESS_KEY"
SESSION_TOKEN: Final = "AWS_SESSION_TOKEN"
CREDENTIALS: Final = (ACCESS_KEY_ID, SECRET_ACCESS_KEY)
OPTIONAL_CREDENTIALS: Final = (SESSION_TOKEN,)
PUSHGATEWAY: Final = "KALIPER_PUSHGATEWAY"
PROMETHEUS: Final = "KALIPER_PROMETHEUS"
STORAGE_RETRY_PREFIX: Final = "KALIPER_STORAGE_RETR"  # KALIPER_STORAGE_RETRIES, _RETRY_DELAY, ...

# The local spool (storage.spool): where a local run journals what it writes; replicas get it too.
SPOOL_DIR: Final = "KALIPER_SPOOL_DIR"
