"""Per-layer profiles (moved to `workbench.formats.profiledata`; kept for old imports)."""
from __future__ import annotations

from workbench.formats.profiledata import (PROFILE_COLUMNS, Profile, latency_stats,  # noqa: F401
                                           load_profile, load_run_metadata, parse_profile)
