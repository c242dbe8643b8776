"""The name of a cluster directory's state file and the marker of a compose cluster's state.

The ``--dir`` tools (``topics``, ``console-producer``, ...) read this file to find a cluster;
these names live apart from the code that writes it (``cluster up``'s process manager, the
compose cluster's secured mode), which imports the failure-injection backends and much more,
so that a tool reading the file loads none of that at start.
"""

from __future__ import annotations

from typing import Final

STATE_FILE: Final = "cluster.json"  # a cluster's state, which --dir tools read
BACKEND: Final = "compose"  # cluster.json's "backend" for a compose cluster's state
