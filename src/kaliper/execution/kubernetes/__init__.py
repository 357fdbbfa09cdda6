"""The Kubernetes-job backend: `launch` creates one repetition's TFJob/PyTorchJob/TrainJob, waits for it and
records it, over `api` (the API server's calls), `jobstate` (what a listed or watched job's status means),
`logrecords` (records read back from the replicas' logs); and the inference server a serve spec benchmarks
(`server_api`: its objects created and deleted, `server_ready`: waiting until it serves)."""
