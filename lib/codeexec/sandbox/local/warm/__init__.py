"""Warm sandboxes: runs made ahead, each a fork of a long-lived interpreter.

Three kinds of fork server, a pool of runs made ahead for each: an **interpreter** that
has imported numpy, pandas and matplotlib and drawn a figure, for py runs that name them;
a **scientific** one that has also imported SciPy, seaborn, scikit-learn, statsmodels and
plotly, for py runs that name those; a **bare** one, Python started and nothing imported,
for other py runs and, by exec, for every other language. A refill costs a fork, never a
new interpreter and its imports. Each run made ahead is a sandbox as strong as a cold
run's, serves one run and is gone (docs/isolation.md "Warm sandboxes").

The package, one concern a module:

- policy.py: every choice of the pools, named in one place: the kinds and what each
  imports, the pools' sizes, which kinds a launch is forked from, when a run made ahead
  copies pages, the refills' priority, how long a server serves;
- pools.py: the pools (WarmPools, the backend's), their refills and stats;
- server.py: one fork server, started in a bubblewrap sandbox of its own;
- ready.py: one run made ahead, handed its run and collected;
- wire.py: the messages between the service, a server and a run, and what each carries;
- kernel.py: the kernel calls both ends make that Python's os lacks;
- forkserver.py and zygote.py: what runs INSIDE a server's sandbox (copied into its /code
  with wire.py and kernel.py): the processes of a run, and the interpreter they fork from.
"""

from .policy import KINDS, Policy
from .pools import WarmPools

__all__ = ["KINDS", "Policy", "WarmPools"]
