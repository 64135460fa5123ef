"""The seccomp filter every sandboxed program runs under.

Everything is allowed except what a code interpreter never needs and an attacker wants:
debugging other processes, mounting, the kernel's module and key stores, BPF, perf, and
new namespaces (from inside, a new user namespace would hand back the capabilities the
sandbox dropped); io_uring (a second way into the kernel that a filter cannot see into);
file leases (a lease would make the service's reader wait); every socket family but
local, IP and netlink, which the sandbox's network namespace confines (AF_VSOCK, for
one, it does not: on a VM host it reaches the hypervisor side); the btrfs ioctls (a
subvolume a program makes has a quota group of its own, outside its session's limit,
and the lookups list every session of the host); the inode flags (`chattr +C` makes a
file that cannot be cloned); inotify/fanotify (on the shared read-only /usr they show
which files another tenant's run opens, and when); and the two ways into the page cache
of those shared files: evicting a file's pages (POSIX_FADV_DONTNEED, then a no-op, as
advice may be) and asking whether a page is there without loading it (RWF_NOWAIT, which
answers EOPNOTSUPP as a filesystem without it does): together they told which libraries
another tenant's run had just loaded, as often as asked (docs/isolation.md). Denied calls
fail with an ordinary error, so a program sees one, and `cp --reflink=auto` copies instead.
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

IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
# AF_UNIX, AF_INET, AF_INET6, AF_NETLINK; every other family up to AF_MAX (46) is refused.
SOCKET_FAMILIES = frozenset({1, 2, 10, 16})
_AF_MAX = 46
_F_SETLEASE = 1024
# Every btrfs ioctl has the type byte 0x94 (bits 8..15 of the command): subvolume and
# snapshot creation, the tree searches and subvolume lookups, FICLONE, FICLONERANGE and
# FIDEDUPERANGE. The kernel reads a command as 32 bits, so the masks ignore the upper half
# of the register a program passes it in.
_IOCTL_TYPE_MASK, _BTRFS_IOCTL_TYPE = 0xFF00, 0x9400
_IOCTL_COMMAND_MASK = 0xFFFFFFFF
_SET_FLAGS = (
    0x40086602,  # FS_IOC_SETFLAGS (the flag word's size is a long's)
    0x40046602,  # FS_IOC32_SETFLAGS
    0x401C5820,  # FS_IOC_FSSETXATTR
)
WATCHES = ("inotify_init", "inotify_init1", "fanotify_init")
_POSIX_FADV_DONTNEED = 4  # fadvise64's advice is its fourth argument
_RWF_NOWAIT = 0x8  # preadv2's flags are its sixth

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
    for name in IO_URING:  # ENOSYS: libraries fall back to ordinary reads and writes
        scf.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
    scf.add_rule(deny, "fcntl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, _IOCTL_COMMAND_MASK, _F_SETLEASE))
    scf.add_rule(deny, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, _IOCTL_TYPE_MASK, _BTRFS_IOCTL_TYPE))
    for command in _SET_FLAGS:
        scf.add_rule(deny, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, _IOCTL_COMMAND_MASK, command))
    for name in WATCHES:  # ENOSYS, as a kernel without them: file watchers fall back to polling
        scf.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
    scf.add_rule(pyseccomp.ERRNO(0), "fadvise64", pyseccomp.Arg(3, pyseccomp.EQ, _POSIX_FADV_DONTNEED))
    nowait = pyseccomp.Arg(5, pyseccomp.MASKED_EQ, _RWF_NOWAIT, _RWF_NOWAIT)
    scf.add_rule(pyseccomp.ERRNO(errno.EOPNOTSUPP), "preadv2", nowait)
    refused = pyseccomp.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for family in set(range(_AF_MAX)) - SOCKET_FAMILIES:
            scf.add_rule(refused, call, pyseccomp.Arg(0, pyseccomp.EQ, family))
        scf.add_rule(refused, call, pyseccomp.Arg(0, pyseccomp.GE, _AF_MAX))
    fd = os.memfd_create("seccomp", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as out:
            scf.export_bpf(out)
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
