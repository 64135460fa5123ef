"""The runner in a container: what its engine masked or mounted read-only, made usable at start.

A container engine (Docker, Compose, Swarm, Kubernetes) gives the runner:
- a /proc with parts of it covered (the runtime's masked and read-only paths: /proc/kcore,
  /proc/keys, /proc/sys, ...). The kernel refuses a fresh /proc in a new user namespace
  while any part of the existing one is covered, and bubblewrap mounts one for every run.
  `security_opt: systempaths=unconfined` lifts the covers; Swarm cannot pass it, so the
  runner unmounts them itself.
- its own cgroup mounted read-only: a run's memory and process limits would fall back to
  rlimits, and the preloaded server, which needs a memory cgroup, would be off. The runner
  remounts the memory and pids hierarchies (and cgroup v2) that hold its cgroup read-write;
  the engine put the container's own limits on the mount's root, so every run's cgroup is
  made inside them (cgroups.py), and cgroups.delegate() hands cgroup v2's controllers down.

Both take CAP_SYS_ADMIN, which the runner has for its btrfs quota groups anyway. Where
nothing is covered or read-only (a host, a privileged container), nothing changes; where
the runner may not (no CAP_SYS_ADMIN), it says so and goes on. These mounts are the
container's, never the host's: the engine made its mount namespace.
"""

from __future__ import annotations

import logging
import subprocess

from ..sandbox.local import cgroups, mountinfo
from ..sandbox.local.mountinfo import Mount

log = logging.getLogger("codeexec.runner")

# What runtimes cover /proc's parts with: /dev/null or an empty tmpfs (masked paths), or
# /proc itself bound read-only (readonly paths). Anything else under /proc (a host's
# binfmt_misc) is a mount on an empty directory, which the kernel allows, and stays.
_MASKS = frozenset({"proc", "tmpfs", "devtmpfs"})


def prepare() -> None:
    """Run once at the runner's start, before its sandboxes are made."""
    mounts = mountinfo.mounts()
    _unmask_proc(mounts)
    _writable_cgroups(mounts)
    cgroups.delegate()


def _unmask_proc(mounts: list[Mount]) -> None:
    covers = sorted({m.point for m in mounts if m.point.startswith("/proc/") and m.fstype in _MASKS}, reverse=True)
    if not covers:
        return
    for point in covers:  # the deepest first: /proc/sys/kernel before /proc/sys
        if not _mount_command("umount", "--lazy", point):
            log.warning(
                "runs cannot mount their own /proc: the container runtime covers %s and the runner may not "
                "unmount it (give it CAP_SYS_ADMIN, or security_opt systempaths=unconfined)", point,
            )  # fmt: skip
            return
    log.info("unmounted the container runtime's covers of /proc, so that runs mount their own: %s", " ".join(covers))


def _writable_cgroups(mounts: list[Mount]) -> None:
    own = cgroups.own_cgroups()
    for mount in mounts:
        if "ro" not in mount.options or not _holds_ours(mount, own):
            continue
        flags = ",".join(sorted(mount.options & {"nosuid", "nodev", "noexec"}))
        if _mount_command("mount", "-o", f"remount,bind,rw,{flags}", mount.point):
            log.info("remounted %s read-write: runs get cgroups of their own inside the container's", mount.point)
        else:
            log.warning(
                "%s is read-only and the runner may not remount it (no CAP_SYS_ADMIN): "
                "runs' memory and process limits fall back to rlimits", mount.point,
            )  # fmt: skip


def _holds_ours(mount: Mount, own: dict[str, str]) -> bool:
    """A cgroup mount of a hierarchy runs need, with the runner's own cgroup in it; the
    others (devices, cpu) stay read-only."""
    if mount.fstype == "cgroup2":
        controller = ""
    elif mount.fstype == "cgroup" and (named := mount.super_options & set(cgroups.CONTROLLERS)):
        controller = min(named)
    else:
        return False
    path = own.get(controller)
    return path is not None and cgroups.under(mount.root, path) is not None


def _mount_command(*argv: str) -> bool:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        log.debug("%s: %s", " ".join(argv), done.stderr.strip())
    return done.returncode == 0
