"""The suite's Hypothesis profile (tests/conftest.py) is the one every test runs under."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def test_the_loaded_profile_has_no_deadline():
    assert settings.get_current_profile_name() == "userdp"
    assert settings.default.deadline is None


def test_a_test_s_own_settings_inherit_no_deadline():
    # what `@settings(max_examples=200)` in tests/unit/test_hashing.py builds at import time
    assert settings(max_examples=200).deadline is None


def test_the_profile_prints_no_blob_and_skips_the_too_slow_check():
    assert settings.default.print_blob is False
    assert HealthCheck.too_slow in settings.default.suppress_health_check
