"""The samples file of a trial written at the end of its last run (kaliper.results.samples: what a
report reads instead of every record), by the local runner and the cluster's launch step. Here, not in
results.compact, because writing one is loading the trial as the reporter does."""

from __future__ import annotations

import logging

from kaliper.errors import KaliperError
from kaliper.reporter.loading.aggregate import load_trials
from kaliper.results.readers import read_experiment
from kaliper.storage import Storage, layout

log = logging.getLogger(__name__)


def write_trial_samples(storage: Storage, experiment: str, trial: str) -> bool:
    """At the end of a run: the trial's samples file once every repetition has its launch.json (the
    last run of the trial), so a trial gets one file, not one per run. Never fails the run: a trial
    that cannot be read or written now is left to the reporter. Whether the trial was complete."""
    try:
        doc = read_experiment(storage, experiment)
        listed = set(storage.list(layout.trial_prefix(experiment, trial) + "/runs"))
        if not all(layout.launch_key(experiment, trial, r) in listed for r in range(doc.repetitions)):
            return False
        load_trials(storage, doc, [trial])  # writes the file as the reporter's first load would
        return True
    except KaliperError as exc:
        log.warning("samples file of %s %s not written: %s", experiment, trial, exc)
        return False
