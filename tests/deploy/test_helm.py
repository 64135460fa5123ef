"""The Helm chart (deploy/helm/codeexec), checked without a cluster: `helm lint`, `helm
template` over every values file of its ci/ directory, every rendered object validated
strictly against several Kubernetes minors (kubernetes-validate), what the objects must say
to each other (the runner count, the runners' addresses, the policies, the keys), and the
pods against the Pod Security Standards' rules (tests/helpers/pod_security.py).

helm comes from `make helm-tools` (.tools/bin), which `make test` reaches.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from codeexec.settings import Settings

from ..helpers import pod_security
from ..helpers.helm import (
    CHART,
    MINORS,
    NAMESPACE,
    RELEASE,
    ROOT,
    VALUES,
    Obj,
    container,
    env,
    files,
    helm,
    matches,
    one,
    pod_labels,
    render,
    values_of,
)
from ..helpers.runner_container import BASELINE_CAPABILITIES

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
    done = helm("lint", "--strict", str(CHART), *files(values))
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
    monkeypatch.delenv("SECRETS_DIR", raising=False)
    for variable in env(workload).values():
        if variable["name"] != "SECRETS_DIR":
            monkeypatch.setenv(variable["name"], variable.get("value", f"made-up-{variable['name'].lower()}"))
    for ref in key_refs(workload):
        monkeypatch.setenv(ref["setting"], f"made-up-{ref['setting'].lower()}")
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


def key_refs(workload: Obj) -> list[Obj]:
    """Each key a container is given, as {name, key, setting}: the Secret, its key, and the
    setting it becomes (an environment variable, or a file of the keys' volume)."""
    c = container(workload)
    refs = [{**e["valueFrom"]["secretKeyRef"], "setting": e["name"]}
            for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})]  # fmt: skip
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    for mount in c.get("volumeMounts", []):
        if secret := volumes.get(mount["name"], {}).get("secret"):
            refs += [{"name": secret["secretName"], "key": i["key"], "setting": i["path"]} for i in secret["items"]]
    return refs


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_every_key_comes_from_a_secret_that_exists(values: Path) -> None:
    objects = render(values)
    secrets = values_of(values).get("secrets", {})
    rendered = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    refs = [ref for w in (one(objects, "Deployment"), one(objects, "StatefulSet")) for ref in key_refs(w)]
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
    runners = one(objects, "StatefulSet")
    runner = container(runners)["securityContext"]
    given = values_of(values).get("runner", {})
    if given.get("privileged"):
        assert runner["privileged"] is True
    elif given.get("hostUsers") is False:
        # values-baseline.yaml: exactly what the attack and limit suites measured in a container
        # (CODEEXEC_TEST_CONTAINER_PROFILE=baseline, tests/helpers/runner_container.py).
        assert runners["spec"]["template"]["spec"]["hostUsers"] is False
        assert runner["capabilities"] == {"drop": ["ALL"], "add": list(BASELINE_CAPABILITIES)}
        assert runner["allowPrivilegeEscalation"] is False
        assert runner["procMount"] == "Unmasked"
        assert runner["seccompProfile"] == {"type": "Localhost", "localhostProfile": "codeexec-runner.json"}
        assert runner["appArmorProfile"] == {"type": "Localhost", "localhostProfile": "codeexec-runner"}
    else:
        assert "hostUsers" not in runners["spec"]["template"]["spec"]
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
    (mount,) = [m for m in container(runners)["volumeMounts"] if m["name"] == "sessions"]
    assert env(runners)["SANDBOX_ROOT"]["value"].startswith(mount["mountPath"] + "/")
    host_path = values_of(values).get("runner", {}).get("storage", {}).get("hostPath")
    if not host_path:
        (claim,) = runners["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == mount["name"] and "subPathExpr" not in mount
        assert runners["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
        return
    # The node's directory, one subdirectory per runner pod: two runners never share one.
    assert "volumeClaimTemplates" not in runners["spec"]
    (volume,) = [v for v in runners["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "hostPath": {"path": host_path, "type": "Directory"}}
    assert mount["subPathExpr"] == "$(POD_NAME)"
    assert env(runners)["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_notes_point_librechat_at_the_service(values: Path) -> None:
    done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *files(values))
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
    assert [ref["setting"] for ref in key_refs(one(objects, "StatefulSet"))] == ["RUNNER_KEY"]


def test_what_the_api_server_checks_beyond_the_schemas() -> None:
    """Rules the API server enforces that no schema states, for a release with a long name."""
    release = "a-release-named-as-long-as-helm-allows-fifty-three-ch"  # 53
    for values in VALUES:
        done = helm("template", release, str(CHART), "--namespace", NAMESPACE, *files(values))
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
        # An unmasked /proc is refused outside a user namespace of the pod's own.
        if runner.get("procMount", "Default") != "Default":
            assert runners["spec"]["template"]["spec"]["hostUsers"] is False
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


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_settings_read_the_keys_from_the_files_mounted(
    values: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """secrets.asFiles: each key a file of the Secret, where SECRETS_DIR says, named after its
    setting; the project's own settings read them, and no key is in the environment."""
    objects = render(values)
    monkeypatch.setattr("socket.gethostname", lambda: f"{one(objects, 'StatefulSet')['metadata']['name']}-0")
    for workload in (one(objects, "Deployment"), one(objects, "StatefulSet")):
        variables, refs = env(workload), key_refs(workload)
        if values_of(values).get("secrets", {}).get("asFiles", True) is False:
            assert "SECRETS_DIR" not in variables and all(ref["setting"] in variables for ref in refs)
            continue
        assert not any("secretKeyRef" in v.get("valueFrom", {}) for v in variables.values())
        secrets_dir = variables["SECRETS_DIR"]["value"]
        (mount,) = [m for m in container(workload)["volumeMounts"] if m["mountPath"] == secrets_dir]
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert mount["readOnly"] is True and "secret" in volumes[mount["name"]]
        for ref in refs:
            (tmp_path / ref["setting"]).write_text(f"value-of-{ref['key']}\n")
        settings_of(workload, monkeypatch)  # the rendered environment, the keys then from files alone
        for ref in refs:
            monkeypatch.delenv(ref["setting"])
        monkeypatch.setenv("SECRETS_DIR", str(tmp_path))
        settings = Settings()
        for ref in refs:
            secret = getattr(settings, ref["setting"].lower())
            assert secret.get_secret_value() == f"value-of-{ref['key']}"


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_service_reaches_the_key_set_at_the_idps_addresses_alone(values: Path) -> None:
    objects = render(values)
    if values_of(values).get("networkPolicy", {}).get("enabled", True) is False:
        return
    egress = one(objects, "NetworkPolicy", "service")["spec"]["egress"]
    assert all(rule.get("to") for rule in egress)  # no rule open to every address
    url = values_of(values).get("auth", {}).get("jwt", {}).get("jwksUrl", "")
    to_idp = [rule for rule in egress if any("ipBlock" in peer for peer in rule["to"])]
    if not url.startswith("https://"):
        assert to_idp == []
        return
    (rule,) = to_idp
    cidrs = values_of(values)["networkPolicy"]["jwksCidrs"]
    assert rule["to"] == [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]
    assert rule["ports"] == [{"port": urlsplit(url).port or 443, "protocol": "TCP"}]


def test_the_key_sets_port_is_the_one_its_url_names() -> None:
    (values,) = [v for v in VALUES if v.name == "jwt-url-values.yaml"]
    objects = render(values, "auth.jwt.jwksUrl=https://iam.example.com:8443/keys")
    (rule,) = [r for r in one(objects, "NetworkPolicy", "service")["spec"]["egress"] if "ipBlock" in r["to"][0]]
    assert rule["ports"] == [{"port": 8443, "protocol": "TCP"}]


# The Pod Security Standards (tests/helpers/pod_security.py).
BASELINE_PROFILE = [v for v in VALUES if v.name.startswith("baseline-")]


@pytest.mark.parametrize("values", VALUES, ids=ids)
def test_the_service_meets_pod_security_restricted(values: Path) -> None:
    service = pod_security.pod_of(one(render(values), "Deployment"))
    assert pod_security.violations(service, pod_security.RESTRICTED) == []


@pytest.mark.parametrize("values", BASELINE_PROFILE, ids=[v.name for v in BASELINE_PROFILE])
def test_the_baseline_profile_passes_pod_security_baseline(values: Path) -> None:
    runner = pod_security.pod_of(one(render(values), "StatefulSet"))
    assert pod_security.violations(runner, pod_security.BASELINE) == []
    # What "restricted" still refuses: the capabilities, and /proc unmasked in a user namespace.
    refused = pod_security.violations(runner, pod_security.RESTRICTED)
    assert sorted(refused) == sorted(
        ["container runner has procMount Unmasked"] + [f"container runner adds {cap}" for cap in BASELINE_CAPABILITIES]
    )


def test_the_default_runner_needs_a_privileged_namespace() -> None:
    (values,) = [v for v in VALUES if v.name == "default-values.yaml"]
    runner = pod_security.pod_of(one(render(values), "StatefulSet"))
    assert pod_security.violations(runner, pod_security.BASELINE) == [
        "container runner adds SYS_ADMIN", "container runner has AppArmor Unconfined",
        "container runner has seccomp Unconfined",
    ]  # fmt: skip


def _set(path: str, value: Any) -> Any:
    """A change to a pod: `value` at the dotted `path` (a number picks a list's item)."""

    def change(pod: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = pod
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        node[last] = value

    return change


def _all(*changes: Any) -> Any:
    def change(pod: Obj) -> None:
        for one_change in changes:
            one_change(pod)

    return change


# Each control of the standard, broken once in a pod that passes it.
BASELINE_BREACHES = {
    "host process": _set("spec.containers.0.securityContext.windowsOptions", {"hostProcess": True}),
    "host network": _set("spec.hostNetwork", True),
    "host pid": _set("spec.hostPID", True),
    "host ipc": _set("spec.hostIPC", True),
    "privileged": _set("spec.containers.0.securityContext.privileged", True),
    "capability": _set("spec.containers.0.securityContext.capabilities.add", ["NET_ADMIN"]),
    "host path": _set("spec.volumes", [{"name": "node", "hostPath": {"path": "/"}}]),
    "host port": _set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": 80}]),
    "apparmor": _set("spec.securityContext.appArmorProfile", {"type": "Unconfined"}),
    "apparmor annotation": _set(
        "metadata.annotations", {"container.apparmor.security.beta.kubernetes.io/runner": "unconfined"}
    ),
    "selinux": _set("spec.containers.0.securityContext.seLinuxOptions", {"type": "spc_t"}),
    "proc mount": _all(_set("spec.hostUsers", True), _set("spec.containers.0.securityContext.procMount", "Unmasked")),
    "seccomp": _set("spec.securityContext.seccompProfile", {"type": "Unconfined"}),
    "sysctl": _set("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
    "probe host": _set("spec.containers.0.livenessProbe.httpGet.host", "10.0.0.1"),
}  # fmt: skip
RESTRICTED_BREACHES = {
    "escalation": _set("spec.containers.0.securityContext.allowPrivilegeEscalation", True),
    "root": _set("spec.securityContext.runAsUser", 0),
    "non-root unsaid": _set("spec.securityContext.runAsNonRoot", False),
    "volume type": _set("spec.volumes", [{"name": "share", "nfs": {"server": "nfs", "path": "/"}}]),
    "seccomp unset": _set("spec.securityContext.seccompProfile", None),
    "capability": _set("spec.containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["CHOWN"]}),
    "drop nothing": _set("spec.containers.0.securityContext.capabilities", {}),
    # Unmasked, even in a user namespace of the pod's own.
    "proc mount in a user namespace": _all(
        _set("spec.hostUsers", False), _set("spec.containers.0.securityContext.procMount", "Unmasked")
    ),
    **BASELINE_BREACHES,
}


@pytest.mark.parametrize("breach", BASELINE_BREACHES.values(), ids=BASELINE_BREACHES)
def test_each_baseline_control_refuses_its_breach(breach: Any) -> None:
    runner = copy.deepcopy(pod_security.pod_of(one(render(BASELINE_PROFILE[0]), "StatefulSet")))
    breach(runner)
    assert pod_security.violations(runner, pod_security.BASELINE)


@pytest.mark.parametrize("breach", RESTRICTED_BREACHES.values(), ids=RESTRICTED_BREACHES)
def test_each_restricted_control_refuses_its_breach(breach: Any) -> None:
    service = copy.deepcopy(pod_security.pod_of(one(render(VALUES[0]), "Deployment")))
    breach(service)
    assert pod_security.violations(service, pod_security.RESTRICTED)


APPARMOR = ROOT / "deploy" / "runner-apparmor"


def test_the_runners_apparmor_profile_compiles() -> None:
    """deploy/runner-apparmor, compiled by apparmor_parser (`make helm-tools` installs it):
    AppArmor 3's parser (Debian 12's) without the AppArmor 4 rule `userns`, as its header says."""
    parser = shutil.which("apparmor_parser")
    if parser is None:
        pytest.fail("apparmor_parser is missing: `make helm-tools` installs it")
    version = subprocess.run([parser, "--version"], capture_output=True, text=True, check=True).stdout
    profile = APPARMOR.read_text()
    assert "profile codeexec-runner " in profile  # the name values-baseline.yaml gives
    if " 3." in version.splitlines()[0]:
        profile = "\n".join(line for line in profile.splitlines() if line.strip() != "userns,")
    done = subprocess.run([parser, "--skip-kernel-load", "--skip-cache"], input=profile, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    broken = subprocess.run([parser, "--skip-kernel-load", "--skip-cache"], input=profile.replace("mount,", "mount"),
                            capture_output=True, text=True)  # fmt: skip
    assert broken.returncode != 0  # the check can fail
