"""Suite-wide settings: property tests draw the same examples on every run (derandomized)."""

from hypothesis import settings

settings.register_profile("ncf", derandomize=True, database=None)
settings.load_profile("ncf")
