"""TFJob/PyTorchJob as Kaliper uses them: the training operator's vocabulary and rules (`kubeflow`), and
facts about rendered manifests (`manifest`), shared by the configurator, both executors and the reporter;
the rules of the Kubernetes objects made from them (`objects`: names, labels, owners, namespaces) and the
environment the training operator gives each replica (`operator_env`), the same for every backend.

Light on purpose (standard library only): the spec imports the replica types from here.
"""
