"""`kaliper submit`: create the spec's Workflow through the Kubernetes API with the user's kubeconfig.

The same object `kaliper compile --target workflow` prints, created as the user (no Argo Server needed);
Argo's controller picks it up like one sent with `argo submit`.
"""

from __future__ import annotations

from typing import Any

from kaliper.errors import ClusterError
from kaliper.jobs.objects import pod_namespace
from kaliper.spec import LoadedSpec
from kaliper.workflows.argo import workflow_document
from kaliper.workflows.compile import check_object_size
from kaliper.workflows.plan import cluster_plan

GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "workflows"


def _api(context: str | None) -> tuple[Any, str]:
    """A CustomObjectsApi from the kubeconfig (in-cluster config when running in a pod) and its namespace."""
    from kubernetes import client, config

    try:
        config.load_kube_config(context=context)
        _, active = config.list_kube_config_contexts()
        namespace = (active or {}).get("context", {}).get("namespace") or "default"
    except (config.ConfigException, FileNotFoundError, TypeError) as exc:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise ClusterError(
                f"no usable kubeconfig ({exc}); set KUBECONFIG or run `kubectl config use-context NAME`"
            ) from None
        namespace = pod_namespace()
    return client.CustomObjectsApi(), namespace


def create_workflow(api: Any, namespace: str, body: dict[str, Any]) -> str:
    """Create `body` in `namespace`; the generated name, or ClusterError saying why the API refused."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        created = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    except ApiException as exc:
        hint = {
            401: "your credentials were refused",
            403: f"you may not create workflows in namespace {namespace!r} (RBAC)",
            404: f"namespace {namespace!r} or the Argo Workflow CRD is missing (install Argo Workflows v4)",
        }.get(exc.status, exc.reason)
        raise ClusterError(f"creating the Workflow failed: HTTP {exc.status}: {hint}") from None
    except HTTPError as exc:
        raise ClusterError(f"cannot reach the Kubernetes API: {exc}") from None
    name: str = created["metadata"]["name"]
    return name


def submit_workflow(
    loaded: LoadedSpec, namespace: str | None = None, context: str | None = None, api: Any = None
) -> tuple[str, str]:
    """Compile the spec's Workflow and create it; returns (workflow name, namespace)."""
    plan = cluster_plan(loaded)  # a bad spec fails here, before any API call
    if api is None:
        api, default_namespace = _api(context)
    else:
        default_namespace = "default"
    ns = namespace or plan.namespace or default_namespace
    # compiled for its namespace: a serving spec's server objects name the Workflow as owner only there
    body = workflow_document(plan, "Workflow", namespace=ns)
    check_object_size(body, loaded.source, "Workflow")
    return create_workflow(api, ns, body), ns
