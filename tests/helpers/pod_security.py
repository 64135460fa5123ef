"""The Pod Security Standards' rules, checked against a rendered pod without a cluster.

No checker of them installs from PyPI or npm (the reference is the Go module
k8s.io/pod-security-admission, which Pod Security Admission runs in the API server), so
the rules are written out here, one function per control, as the standard publishes them
for policy version `latest` (1.35 and later):
https://kubernetes.io/docs/concepts/security/pod-security-standards/ ("Baseline" and
"Restricted"). Each returns a sentence per violation; none is a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]

# "Capabilities": adding any beyond these is refused (the runtime's default set).
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})  # fmt: skip
# "Sysctls": the safe set, as of 1.32.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})  # fmt: skip
# "SELinux": the types a pod may ask for.
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# "Volume Types" (restricted): these alone.
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})  # fmt: skip


def pod_of(workload: Obj) -> Obj:
    """The pod a Deployment or a StatefulSet makes: its metadata and spec."""
    pod: Obj = workload["spec"]["template"]
    return pod


def _containers(spec: Obj) -> Iterator[Obj]:
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        yield from spec.get(kind, [])


def _contexts(spec: Obj) -> Iterator[tuple[str, Obj]]:
    """The pod's security context and each container's, by name."""
    yield "pod", spec.get("securityContext") or {}
    for c in _containers(spec):
        yield f"container {c['name']}", c.get("securityContext") or {}


def _in_user_namespace(spec: Obj) -> bool:
    return spec.get("hostUsers") is False


def host_process(spec: Obj) -> list[str]:
    return [f"{who} is a Windows HostProcess" for who, ctx in _contexts(spec)
            if (ctx.get("windowsOptions") or {}).get("hostProcess")]  # fmt: skip


def host_namespaces(spec: Obj) -> list[str]:
    return [f"shares the node's {field}" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]


def privileged(spec: Obj) -> list[str]:
    return [f"{who} is privileged" for who, ctx in _contexts(spec) if ctx.get("privileged")]


def capabilities_baseline(spec: Obj) -> list[str]:
    return [f"{who} adds {cap}" for who, ctx in _contexts(spec)
            for cap in (ctx.get("capabilities") or {}).get("add", []) if cap not in BASELINE_CAPABILITIES]  # fmt: skip


def host_path_volumes(spec: Obj) -> list[str]:
    return [f"volume {v['name']} is a hostPath" for v in spec.get("volumes", []) if "hostPath" in v]


def host_ports(spec: Obj) -> list[str]:
    return [f"container {c['name']} takes host port {p['hostPort']}"
            for c in _containers(spec) for p in c.get("ports", []) if p.get("hostPort")]  # fmt: skip


def apparmor(spec: Obj) -> list[str]:
    return [f"{who} has AppArmor {ctx['appArmorProfile']['type']}" for who, ctx in _contexts(spec)
            if (ctx.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost")]  # fmt: skip


def selinux(spec: Obj) -> list[str]:
    found = []
    for who, ctx in _contexts(spec):
        options = ctx.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            found.append(f"{who} sets SELinux options {options}")
    return found


def proc_mount_baseline(spec: Obj) -> list[str]:
    # From policy version 1.35, any /proc mount type in a pod with a user namespace of its own.
    return [] if _in_user_namespace(spec) else _unmasked(spec)


def _unmasked(spec: Obj) -> list[str]:
    return [f"container {c['name']} has procMount {c['securityContext']['procMount']}" for c in _containers(spec)
            if (c.get("securityContext") or {}).get("procMount", "Default") != "Default"]  # fmt: skip


def seccomp_baseline(spec: Obj) -> list[str]:
    return [f"{who} has seccomp Unconfined" for who, ctx in _contexts(spec)
            if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined"]  # fmt: skip


def sysctls(spec: Obj) -> list[str]:
    return [f"sets sysctl {s['name']}" for s in (spec.get("securityContext") or {}).get("sysctls", [])
            if s["name"] not in SAFE_SYSCTLS]  # fmt: skip


def host_probes(spec: Obj) -> list[str]:
    """The control "Host Probes / Lifecycle Hooks" (1.34): a probe or hook names no other host."""
    found = []
    for c in _containers(spec):
        handlers = [c.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += list((c.get("lifecycle") or {}).values())
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                if (handler.get(kind) or {}).get("host"):
                    found.append(f"container {c['name']} probes host {handler[kind]['host']}")
    return found


BASELINE: tuple[Callable[[Obj], list[str]], ...] = (
    host_process, host_namespaces, privileged, capabilities_baseline, host_path_volumes, host_ports,
    apparmor, selinux, proc_mount_baseline, seccomp_baseline, sysctls, host_probes,
)  # fmt: skip


def volume_types(spec: Obj) -> list[str]:
    return [f"volume {v['name']} is a {kind}" for v in spec.get("volumes", [])
            for kind in set(v) - {"name"} - RESTRICTED_VOLUMES]  # fmt: skip


def privilege_escalation(spec: Obj) -> list[str]:
    return [f"container {c['name']} allows privilege escalation" for c in _containers(spec)
            if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]  # fmt: skip


def running_as_non_root(spec: Obj) -> list[str]:
    if _in_user_namespace(spec):  # root of a user namespace is no uid of the node
        return []
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    found = [f"{who} sets runAsNonRoot false" for who, ctx in _contexts(spec) if ctx.get("runAsNonRoot") is False]
    found += [f"container {c['name']} may run as root" for c in _containers(spec)
              if not pod and not (c.get("securityContext") or {}).get("runAsNonRoot")]  # fmt: skip
    return found


def running_as_non_root_user(spec: Obj) -> list[str]:
    if _in_user_namespace(spec):
        return []
    return [f"{who} runs as uid 0" for who, ctx in _contexts(spec) if ctx.get("runAsUser") == 0]


def seccomp_restricted(spec: Obj) -> list[str]:
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    allowed = ("RuntimeDefault", "Localhost")
    found = [f"pod has seccomp {pod}"] if pod is not None and pod not in allowed else []
    for c in _containers(spec):
        own = ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        if (own or pod) not in allowed:
            found.append(f"container {c['name']} has seccomp {own or pod or 'unset'}")
    return found


def capabilities_restricted(spec: Obj) -> list[str]:
    found = []
    for c in _containers(spec):
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            found.append(f"container {c['name']} does not drop ALL capabilities")
        found += [f"container {c['name']} adds {cap}" for cap in caps.get("add", []) if cap != "NET_BIND_SERVICE"]
    return found


def proc_mount_restricted(spec: Obj) -> list[str]:
    # Restricted keeps /proc masked even in a user namespace of the pod's own.
    return _unmasked(spec)


RESTRICTED: tuple[Callable[[Obj], list[str]], ...] = (
    *(check for check in BASELINE if check is not proc_mount_baseline), proc_mount_restricted, volume_types,
    privilege_escalation, running_as_non_root, running_as_non_root_user, seccomp_restricted, capabilities_restricted,
)  # fmt: skip


def apparmor_annotations(metadata: Obj) -> list[str]:
    """The annotations that named AppArmor profiles before the field (still checked)."""
    return [f"annotation {key}: {value}" for key, value in (metadata.get("annotations") or {}).items()
            if key.startswith("container.apparmor.security.beta.kubernetes.io/")
            and value != "runtime/default" and not value.startswith("localhost/")]  # fmt: skip


def violations(pod: Obj, level: tuple[Callable[[Obj], list[str]], ...]) -> list[str]:
    """What keeps a pod ({metadata, spec}) out of a namespace that enforces `level`."""
    return apparmor_annotations(pod.get("metadata") or {}) + [s for check in level for s in check(pod["spec"])]
