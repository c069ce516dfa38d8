"""Suite-wide settings: hypothesis profiles.

``default`` (CI and the README's test command) is derandomized: the same examples every run, so
that a red CI is a regression, not a draw; new examples come from ``explore`` (random, more
examples) and ``thorough`` (2,000 examples), run locally and in long sessions
(``HYPOTHESIS_PROFILE=explore pytest tests/superpeer``). What they find is kept as a test."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore",
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
