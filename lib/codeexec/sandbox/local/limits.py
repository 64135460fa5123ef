"""What one run may use, and the rlimits that hold where cgroups do not.

rlimits are set inside the sandbox by util-linux `prlimit`, which sets them on itself
and then execs the program: the service never calls setrlimit in a forked child
(`preexec_fn` is unsafe in a threaded server), and cannot set them from outside either
(`prlimit(2)` on a process of another uid needs CAP_SYS_RESOURCE, which not every root
has). The sandbox keeps no capability, so a program can only lower them further.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .cgroups import Parent

PRLIMIT = "/usr/bin/prlimit"
# Not a setting: enough for any runtime, and it bounds the kernel memory open files cost.
_OPEN_FILES = 1024


@dataclass(frozen=True)
class Limits:
    """What every run may use; its wall-clock limit comes with each program."""

    cpu_seconds: int  # per process
    memory_bytes: int  # the whole run (cgroup), else per process (address space)
    max_processes: int  # processes and threads of the whole run (cgroup), else of the uid
    max_output_bytes: int  # each of stdout and stderr
    max_file_bytes: int  # one file
    max_session_bytes: int  # all of the session's files together
    cpus: int = 1  # the threads a library starts per core (bwrap.py sets them)

    @property
    def cpu(self) -> tuple[int, int]:
        # SIGXCPU at the soft limit, SIGKILL a second later for a program that catches it.
        return self.cpu_seconds, self.cpu_seconds + 1

    def prlimit_argv(self, cgroup_controllers: frozenset[str], cpu: bool = True) -> list[str]:
        """The `prlimit ... --` prefix for the program's argv (without the CPU limit for a
        warm interpreter, which sets it in the program's own process)."""
        argv = [
            PRLIMIT,
            *([f"--cpu={self.cpu[0]}:{self.cpu[1]}"] if cpu else []),
            f"--fsize={self.max_file_bytes}",
            f"--nofile={_OPEN_FILES}",
            "--core=0",  # a core dump would land in /mnt/data as an output file
        ]
        # The cgroup limits are better: they hold for the whole run, and an address-space
        # limit also refuses runtimes that reserve more than they use (the JVM does).
        if "memory" not in cgroup_controllers:
            argv.append(f"--as={self.memory_bytes}")
        # RLIMIT_NPROC counts every process of the host uid, other runs' included.
        if "pids" not in cgroup_controllers:
            argv.append(f"--nproc={self.max_processes}")
        return [*argv, "--"]


@dataclass(frozen=True)
class Confinement:
    """What holds every run of this host, however it is launched: its limits, the host
    uid it runs as (None: this process's own, where the service is not root), and the
    cgroups its own cgroup is made under (none: rlimits alone hold)."""

    limits: Limits
    as_user: tuple[int, int] | None
    cgroup_parents: Mapping[str, Parent]
