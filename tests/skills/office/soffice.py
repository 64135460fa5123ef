"""LibreOffice from a script: the environment it needs, and a runner for its command line."""

import os
import socket
import subprocess
import sys


def soffice_env() -> dict:
    """soffice without a display. Its processes talk over AF_UNIX sockets: say so plainly
    where a sandbox forbids them, rather than hang."""
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except OSError as error:
        raise RuntimeError(f"LibreOffice needs AF_UNIX sockets: {error}") from error
    return {**os.environ, "SAL_USE_VCLPLUGIN": "svp"}


def run_soffice(args: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["soffice", *args], env=soffice_env(), **kwargs)


if __name__ == "__main__":
    sys.exit(run_soffice(sys.argv[1:]).returncode)
