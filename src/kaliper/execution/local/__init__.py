"""The local-process backend: a rendered job manifest run on this machine, every replica a process with
the training operator's environment (`container`: what a pod's container becomes as a process; `job`: one
job's replicas supervised, with the operator's success, failure and deadline rules; `netns`: a private
network namespace, only loopback, shared by one job's replicas), and `runner`: every trial × repetition
of an experiment run that way and stored."""
