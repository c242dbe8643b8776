"""Settings for every test.

Hypothesis: no per-example deadline. Its default (200 ms) is a wall-clock limit, and tests
here assert behaviour, never timings: on a shared 2-core machine an fsync or a scheduling
stall can take one example past it (a checkpoint round trip of an empty list once took 484 ms
and then 5 ms), which is noise, not a finding.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("kafkasim", deadline=None)
settings.load_profile("kafkasim")
