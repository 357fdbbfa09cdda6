"""TFJob/PyTorchJob as Kaliper uses them: the training operator's vocabulary and rules (`kubeflow`), and
facts about rendered manifests (`manifest`), shared by the configurator, both executors and the reporter.

Light on purpose (standard library only): the spec imports the replica types from here.
"""
