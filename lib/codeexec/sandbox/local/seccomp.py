"""The seccomp filter every sandboxed program runs under.

Everything is allowed except what a code interpreter never needs and an attacker wants:
debugging other processes, mounting, the kernel's module and key stores, BPF, perf, and
new namespaces (from inside, a new user namespace would hand back the capabilities the
sandbox dropped). Denied calls fail with EPERM, so a program sees an ordinary error.
libseccomp's filter also kills any call made through another architecture's entry
point (32-bit `int 0x80`, x32), which would otherwise bypass a rule by its number.
"""

from __future__ import annotations

import errno
import functools
import os

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "unshare", "setns",
)  # fmt: skip

# clone's flags that make a namespace; clone without them (threads, fork) stays allowed.
_CLONE_NEW = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


@functools.cache
def bpf() -> bytes:
    """The compiled filter, as bwrap's `--seccomp FD` reads it."""
    # Imported at the first run, not with the service: loading libseccomp runs ldconfig (~20 ms).
    import pyseccomp  # type: ignore[import-untyped]

    deny = pyseccomp.ERRNO(errno.EPERM)
    scf = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for name in DENIED:
        scf.add_rule(deny, name)
    for flag in _CLONE_NEW:
        scf.add_rule(deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, out of a filter's sight. ENOSYS makes the C
    # library fall back to clone, whose flags the rules above do see.
    scf.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    fd = os.memfd_create("seccomp", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as out:
            scf.export_bpf(out)
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
