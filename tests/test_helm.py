"""The Helm chart (deploy/helm/codeexec), checked without a cluster: `helm lint`, `helm
template` over every values file of its ci/ directory, every rendered object validated
strictly against several Kubernetes minors (kubernetes-validate), and what the objects
must say to each other (the runner count, the runners' addresses, the policies, the keys).

helm comes from `make helm-tools` (.tools/bin), which `make test` reaches.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from codeexec.settings import Settings

from .helpers.helm import (
    CHART,
    MINORS,
    NAMESPACE,
    RELEASE,
    VALUES,
    Obj,
    container,
    env,
    helm,
    matches,
    one,
    pod_labels,
    render,
    values_of,
)

# What the runner was measured to need (docs/kubernetes.md "Privilege"), and nothing more.
RUNNER_CAPABILITIES = {"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"}


ids = [v.name.removesuffix("-values.yaml") for v in VALUES]


def test_the_matrix_covers_what_varies() -> None:
    replicas = {one(render(v), "StatefulSet")["spec"]["replicas"] for v in VALUES}
    assert {1, 3, 5} <= replicas
    assert any(values_of(v).get("secrets", {}).get("existingSecret") for v in VALUES)
    assert any("jwt" in values_of(v).get("auth", {}).get("modes", "") for v in VALUES)


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_lint(values: Path) -> None:
    done = helm("lint", "--strict", str(CHART), "-f", str(values))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ((), "secrets.apiKey is empty"),
        (("secrets.apiKey=a", "secrets.runnerKey=b"), "secrets.tokenSecret is empty"),
        (("secrets.existingSecret=k", "runner.replicass=4"), "replicass"),
        (("secrets.existingSecret=k", "runner.replicas=0"), "runner/replicas"),
        (("secrets.existingSecret=k", "runner.replicas=65"), "runner/replicas"),
        (("secrets.existingSecret=k", "auth.modes=jwt"), "give the key set"),
        (("secrets.existingSecret=k", "auth.modes=jwt", "auth.jwt.jwksUrl=https://i.example/k"), "auth.jwt.issuer"),
        (("secrets.existingSecret=k", "auth.jwt.jwksUrl=http://i.example/k"), "jwksUrl"),
        (("secrets.existingSecret=k", "runner.antiAffinity=sometimes"), "antiAffinity"),
    ],
)
def test_bad_values_are_refused_with_a_sentence(sets: tuple[str, ...], says: str) -> None:
    done = helm("template", RELEASE, str(CHART), *(arg for s in sets for arg in ("--set", s)))
    assert done.returncode != 0
    assert says in done.stderr


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_every_object_is_valid_for_the_kubernetes_minor(values: Path, minor: str) -> None:
    objects = render(values)
    assert {"Deployment", "StatefulSet", "Service"} <= {o["kind"] for o in objects}
    for obj in objects:
        kubernetes_validate.validate(obj, minor, strict=True)


def test_strict_validation_catches_an_unknown_field() -> None:
    """The check above can fail: a misspelt field in a rendered object is refused."""
    deployment = copy.deepcopy(one(render(VALUES[0]), "Deployment"))
    container(deployment)["securityContxt"] = {"privileged": False}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, MINORS[0], strict=True)


@pytest.mark.parametrize("values", VALUES, ids=ids)
@pytest.mark.parametrize("runners", [None, 2, 7])
def test_the_service_is_given_the_statefulsets_runner_count(values: Path, runners: int | None) -> None:
    objects = render(values, *([f"runner.replicas={runners}"] if runners else []))
    replicas = one(objects, "StatefulSet")["spec"]["replicas"]
    assert runners is None or replicas == runners
    assert env(one(objects, "Deployment"))["RUNNER_COUNT"]["value"] == str(replicas)


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_url_template_names_each_runner_pod_by_the_headless_service(values: Path) -> None:
    objects = render(values)
    runners, service = one(objects, "StatefulSet"), one(objects, "Deployment")
    headless = one(objects, "Service", "runner")
    assert headless["spec"]["clusterIP"] == "None"
    assert runners["spec"]["serviceName"] == headless["metadata"]["name"]
    assert matches(headless["spec"]["selector"], pod_labels(runners))
    # A runner that stops answering keeps its name: its sessions answer 503, not a DNS error.
    assert headless["spec"]["publishNotReadyAddresses"] is True
    domain = values_of(values).get("clusterDomain", "cluster.local")
    (port,) = headless["spec"]["ports"]
    (container_port,) = [p for p in container(runners)["ports"] if p["name"] == "http"]
    assert port["targetPort"] == container_port["name"]
    assert str(container_port["containerPort"]) == env(runners)["RUNNER_PORT"]["value"]
    assert env(runners)["RUNNER_INDEX"]["value"] == "ordinal"

    template = env(service)["RUNNER_URL_TEMPLATE"]["value"]
    for i in range(runners["spec"]["replicas"]):
        url = urlsplit(template.replace("{i}", str(i)))
        # A StatefulSet's pod i is <name>-i, its DNS name <pod>.<serviceName>.<namespace>.svc.<domain>.
        pod = f"{runners['metadata']['name']}-{i}"
        assert url.hostname == f"{pod}.{headless['metadata']['name']}.{NAMESPACE}.svc.{domain}"
        assert url.port == port["port"] and url.scheme == "http"


def settings_of(workload: Obj, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The project's own settings, read from the environment a rendered container gets
    (each key from a Secret stands in as a made-up value)."""
    for name in ("RUNNER_URL", "RUNNER_URLS", "RUNNER_URL_TEMPLATE", "RUNNER_COUNT", "RUNNER_INDEX"):
        monkeypatch.delenv(name, raising=False)
    for variable in env(workload).values():
        monkeypatch.setenv(variable["name"], variable.get("value", f"made-up-{variable['name'].lower()}"))
    return Settings()


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_services_settings_name_every_runner_pod(values: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(values)
    runners, headless = one(objects, "StatefulSet"), one(objects, "Service", "runner")
    settings = settings_of(one(objects, "Deployment"), monkeypatch)
    assert settings.sandbox_backend == "runner"
    hosts = [urlsplit(url).hostname or "" for url in settings.fleet_urls()]
    assert len(hosts) == runners["spec"]["replicas"]
    for i, host in enumerate(hosts):
        assert host.split(".")[:2] == [f"{runners['metadata']['name']}-{i}", headless["metadata"]["name"]]


@pytest.mark.parametrize("ordinal", [0, 4])
def test_a_runner_pod_takes_its_ordinal_as_its_index(ordinal: int, monkeypatch: pytest.MonkeyPatch) -> None:
    runners = one(render(VALUES[0]), "StatefulSet")
    monkeypatch.setattr("socket.gethostname", lambda: f"{runners['metadata']['name']}-{ordinal}")
    assert settings_of(runners, monkeypatch).fleet_index() == ordinal


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_one_runner_per_node(values: Path) -> None:
    runners = one(render(values), "StatefulSet")
    anti = runners["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    if values_of(values).get("runner", {}).get("antiAffinity", "required") == "required":
        assert set(anti) == {"requiredDuringSchedulingIgnoredDuringExecution"}
        (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    else:
        (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        term = preferred["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert matches(term["labelSelector"]["matchLabels"], pod_labels(runners))
    assert not matches(term["labelSelector"]["matchLabels"], pod_labels(one(render(values), "Deployment")))


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_no_pod_gets_a_service_account_token(values: Path) -> None:
    objects = render(values)
    for workload in (one(objects, "Deployment"), one(objects, "StatefulSet")):
        assert workload["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    for account in (o for o in objects if o["kind"] == "ServiceAccount"):
        assert account["automountServiceAccountToken"] is False


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_probes_ask_health_on_the_serving_port(values: Path) -> None:
    objects = render(values)
    runners, service = one(objects, "StatefulSet"), one(objects, "Deployment")
    checked = ((runners, ("startupProbe", "readinessProbe", "livenessProbe")), (service, ("readinessProbe",)))
    for workload, probes in checked:
        c = container(workload)
        port_names = {p["name"] for p in c["ports"]}
        for probe in probes:
            assert c[probe]["httpGet"]["path"] == "/health"
            assert c[probe]["httpGet"]["port"] in port_names
    assert container(service)["livenessProbe"]["tcpSocket"]["port"] == "http"
    # Liveness never restarts a runner before its first start (storage, warm sandboxes) is done.
    startup = container(runners)["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 180


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_runners_are_reached_only_by_the_service_and_reach_nothing(values: Path) -> None:
    objects = render(values)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    if values_of(values).get("networkPolicy", {}).get("enabled", True) is False:
        assert policies == []
        return
    runners, service = one(objects, "StatefulSet"), one(objects, "Deployment")
    runner_policy, service_policy = one(objects, "NetworkPolicy", "runner"), one(objects, "NetworkPolicy", "service")

    assert matches(runner_policy["spec"]["podSelector"]["matchLabels"], pod_labels(runners))
    assert not matches(runner_policy["spec"]["podSelector"]["matchLabels"], pod_labels(service))
    assert sorted(runner_policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert runner_policy["spec"]["egress"] == []
    (rule,) = runner_policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # this namespace's pods only
    assert matches(peer["podSelector"]["matchLabels"], pod_labels(service))
    assert not matches(peer["podSelector"]["matchLabels"], pod_labels(runners))
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]

    assert matches(service_policy["spec"]["podSelector"]["matchLabels"], pod_labels(service))
    to_runners = [r for r in service_policy["spec"]["egress"] if any(
        matches(p.get("podSelector", {}).get("matchLabels", {"-": "-"}), pod_labels(runners)) for p in r.get("to", []))]
    assert [p["port"] for r in to_runners for p in r["ports"]] == [container(runners)["ports"][0]["containerPort"]]


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_every_key_comes_from_a_secret_that_exists(values: Path) -> None:
    objects = render(values)
    secrets = values_of(values).get("secrets", {})
    rendered = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for w in (one(objects, "Deployment"), one(objects, "StatefulSet"))
        for e in container(w)["env"] if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert len(refs) == 4  # the service's three, the runner's key
    if secrets.get("existingSecret"):
        assert rendered == {}
        assert {r["name"] for r in refs} == {secrets["existingSecret"]}
        if "keys" in secrets:
            assert {r["key"] for r in refs} == set(secrets["keys"].values())
        return
    for ref in refs:
        assert ref["key"] in rendered[ref["name"]]["data"]
    data = next(iter(rendered.values()))["data"]
    given = {"CODE_EXEC_API_KEY": "apiKey", "RUNNER_KEY": "runnerKey", "CODE_EXEC_TOKEN_SECRET": "tokenSecret"}
    for key, value in given.items():
        assert base64.b64decode(data[key]).decode() == secrets[value]


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_least_privilege(values: Path) -> None:
    objects = render(values)
    runner = container(one(objects, "StatefulSet"))["securityContext"]
    if values_of(values).get("runner", {}).get("privileged"):
        assert runner["privileged"] is True
    else:
        assert "privileged" not in runner
        assert runner["capabilities"]["drop"] == ["ALL"]
        assert set(runner["capabilities"]["add"]) == RUNNER_CAPABILITIES
        seccomp = values_of(values).get("runner", {}).get("securityContext", {}).get("seccompProfile")
        assert runner["seccompProfile"] == (seccomp or {"type": "Unconfined"})
        assert runner["appArmorProfile"] == {"type": "Unconfined"}
    deployment = one(objects, "Deployment")
    service = container(deployment)["securityContext"]
    pod = deployment["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert service == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("values", VALUES, ids=ids)
@pytest.mark.parametrize(("component", "kind"), [("service", "Deployment"), ("runner", "StatefulSet")])
def test_a_drain_leaves_most_of_each_workload(values: Path, component: str, kind: str) -> None:
    objects = render(values)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"
               and o["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    if values_of(values).get(component, {}).get("podDisruptionBudget", {}).get("enabled", True) is False:
        assert budgets == []
        return
    (budget,) = budgets
    workload = one(objects, kind)
    assert matches(budget["spec"]["selector"]["matchLabels"], pod_labels(workload))
    others = [w for w in (one(objects, "Deployment"), one(objects, "StatefulSet")) if w is not workload]
    assert not any(matches(budget["spec"]["selector"]["matchLabels"], pod_labels(w)) for w in others)
    assert budget["spec"]["maxUnavailable"] == 1


def test_an_inline_key_set_is_mounted_where_the_service_reads_it() -> None:
    (values,) = [v for v in VALUES if v.name == "jwt-values.yaml"]
    objects = render(values)
    deployment = one(objects, "Deployment")
    variables = env(deployment)
    assert variables["CODE_EXEC_JWT_JWKS_URL"]["value"] == "file:///etc/codeexec/jwks.json"
    assert variables["CODE_EXEC_AUTH_MODES"]["value"] == "key,jwt"
    (mount,) = [m for m in container(deployment)["volumeMounts"] if m["mountPath"] == "/etc/codeexec"]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    configmap = one(objects, "ConfigMap")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert json.loads(configmap["data"]["jwks.json"]) == json.loads(values_of(values)["auth"]["jwt"]["jwks"])


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_each_runner_keeps_its_sessions_on_a_volume_of_its_own(values: Path) -> None:
    runners = one(render(values), "StatefulSet")
    (mount,) = container(runners)["volumeMounts"]
    assert env(runners)["SANDBOX_ROOT"]["value"].startswith(mount["mountPath"] + "/")
    host_path = values_of(values).get("runner", {}).get("storage", {}).get("hostPath")
    if not host_path:
        (claim,) = runners["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == mount["name"] and "subPathExpr" not in mount
        assert runners["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
        return
    # The node's directory, one subdirectory per runner pod: two runners never share one.
    assert "volumeClaimTemplates" not in runners["spec"]
    (volume,) = runners["spec"]["template"]["spec"]["volumes"]
    assert volume == {"name": mount["name"], "hostPath": {"path": host_path, "type": "Directory"}}
    assert mount["subPathExpr"] == "$(POD_NAME)"
    assert env(runners)["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_notes_point_librechat_at_the_service(values: Path) -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", "-f", str(values))
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("\nNOTES:\n", 1)[1]
    (line,) = [line for line in notes.splitlines() if "LIBRECHAT_CODE_BASEURL:" in line]
    url = urlsplit(line.split(":", 1)[1].strip())
    service = one(render(values), "Service", "service")
    domain = values_of(values).get("clusterDomain", "cluster.local")
    assert url.hostname == f"{service['metadata']['name']}.{NAMESPACE}.svc.{domain}"
    assert (url.port, url.path) == (service["spec"]["ports"][0]["port"], "/v1")


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_shared_settings_reach_both_workloads_and_their_own_only_theirs(values: Path) -> None:
    objects = render(values)
    given = values_of(values)
    for kind, component in (("Deployment", "service"), ("StatefulSet", "runner")):
        variables = env(one(objects, kind))
        expected = given.get("extraEnv", []) + given.get(component, {}).get("extraEnv", [])
        assert [variables[e["name"]] for e in expected] == expected
    service, runners = env(one(objects, "Deployment")), env(one(objects, "StatefulSet"))
    assert not {e["name"] for e in given.get("runner", {}).get("extraEnv", [])} & set(service)
    # Nothing but the runner key of the secrets reaches a runner, where programs run.
    assert {"CODE_EXEC_API_KEY", "CODE_EXEC_TOKEN_SECRET"}.isdisjoint(runners)


def test_what_the_api_server_checks_beyond_the_schemas() -> None:
    """Rules the API server enforces that no schema states, for a release with a long name."""
    release = "a-release-named-as-long-as-helm-allows-fifty-three-ch"  # 53
    for values in VALUES:
        done = helm("template", release, str(CHART), "--namespace", NAMESPACE, "-f", str(values))
        assert done.returncode == 0, done.stderr
        objects = [o for o in yaml.safe_load_all(done.stdout) if o]
        for obj in objects:
            assert len(obj["metadata"]["name"]) <= 63
        runners = one(tuple(objects), "StatefulSet")
        # Its pods' controller-revision-hash label is <name>-<10 characters>, at most 63.
        assert len(runners["metadata"]["name"]) <= 52
        for workload in (runners, one(tuple(objects), "Deployment")):
            assert matches(workload["spec"]["selector"]["matchLabels"], pod_labels(workload))
        runner = container(runners)["securityContext"]
        # allowPrivilegeEscalation: false is refused beside CAP_SYS_ADMIN or privileged.
        if "SYS_ADMIN" in runner.get("capabilities", {}).get("add", []) or runner.get("privileged"):
            assert runner.get("allowPrivilegeEscalation", True) is True
        url = urlsplit(env(one(tuple(objects), "Deployment"))["RUNNER_URL_TEMPLATE"]["value"].replace("{i}", "63"))
        assert all(0 < len(label) <= 63 for label in (url.hostname or "").split("."))


def test_a_new_key_restarts_only_the_pods_that_use_it() -> None:
    (values,) = [v for v in VALUES if v.name == "default-values.yaml"]

    def templates(*sets: str) -> tuple[Obj, Obj]:
        objects = render(values, *sets)
        return one(objects, "Deployment")["spec"]["template"], one(objects, "StatefulSet")["spec"]["template"]

    service, runners = templates()
    for key, both in (("apiKey", False), ("tokenSecret", False), ("runnerKey", True)):
        new_service, new_runners = templates(f"secrets.{key}=another-value-0123456789")
        assert new_service != service  # every key reaches the service
        assert (new_runners != runners) is both  # the runners hold the runner key alone
