"""Environment variables that more than one part of Kaliper sets or reads, each named once.

The configurator writes them into job pods (the jsonnet library `kaliper.env`, `configurator.podenv`),
the local executor passes this machine's settings to replicas, and the code inside a pod reads them
(`results.protocol.RunIdentity`, `storage.s3`, `monitoring`). A unit test checks that the template
library spells the pod identity variables as here. Each is declared (type, default, doc) in
`kaliper.settings`; these are its names, for the code that writes them into an environment.
"""

from __future__ import annotations

from typing import Final

from kaliper import settings

# A replica's identity and destination (set by the job template, read by `kaliper workload`).
EXPERIMENT: Final = settings.EXPERIMENT.name
TRIAL: Final = settings.TRIAL.name
REPETITION: Final = settings.REPETITION.name
REPLICA_TYPE: Final = settings.REPLICA_TYPE.name
REPLICA_INDEX: Final = settings.REPLICA_INDEX.name
STORAGE: Final = settings.STORAGE.name
IMAGE: Final = settings.IMAGE.name
# Where a replica reads what the experiment's storage holds (a recorded trace) when KALIPER_STORAGE is a
# staging area (a local run's retried attempts); unset: KALIPER_STORAGE.
READ_STORAGE: Final = settings.READ_STORAGE.name
POD_IDENTITY: Final = (EXPERIMENT, TRIAL, REPETITION, REPLICA_TYPE, REPLICA_INDEX, STORAGE, IMAGE)

# The names of the variables a stack's `env` sets (comma-separated): provenance records them whatever
# their names (kaliper.results.provenance.relevant_env), so a record shows what its stack changed.
STACK_ENV: Final = settings.STACK_ENV.name

# Services (spec `s3:` and `monitoring:`; on one's own machine the environment wins over the spec).
S3_ENDPOINT: Final = settings.S3_ENDPOINT.name
S3_ENDPOINT_FALLBACKS: Final = (
    settings.AWS_ENDPOINT_URL_S3.name,
    settings.AWS_ENDPOINT_URL.name,
)  # the AWS SDKs' own
REGION: Final = settings.AWS_REGION.name
ACCESS_KEY_ID: Final = settings.AWS_ACCESS_KEY_ID.name
SECRET_ACCESS_KEY: Final = settings.AWS_SECRET_ACCESS_KEY.name
SESSION_TOKEN: Final = settings.AWS_SESSION_TOKEN.name
CREDENTIALS: Final = (ACCESS_KEY_ID, SECRET_ACCESS_KEY)
OPTIONAL_CREDENTIALS: Final = (SESSION_TOKEN,)
PUSHGATEWAY: Final = settings.PUSHGATEWAY.name
PROMETHEUS: Final = settings.PROMETHEUS.name
STORAGE_RETRY_PREFIX: Final = "KALIPER_STORAGE_RETR"  # KALIPER_STORAGE_RETRIES, _RETRY_DELAY, ...

# The local spool (storage.spool): where a local run journals what it writes; replicas get it too.
SPOOL_DIR: Final = settings.SPOOL_DIR.name
