"""The auditor's aggregate configurations: every metric replays within its declared bounds."""

from __future__ import annotations

import pytest

from userdp.audit.mechanisms import audit_table
from userdp.audit.mechanisms.aggregate import mechanisms as aggregate_mechanisms
from userdp.audit.replay import audit_sensitivity


@pytest.mark.parametrize("mech", aggregate_mechanisms(), ids=lambda m: m.name)
def test_aggregate_configuration_passes_the_sensitivity_audit(mech):
    data = audit_table(40, seed=0)
    rows, _ = audit_sensitivity(mech.name, mech.runner(data), data, seed=0, max_removals=10)
    assert rows and all(r.verdict != "FAIL" for r in rows)
    if "public keys" in mech.name:
        checked = {r.statistic for r in rows if r.verdict == "pass"}
        assert {
            "aggregate.users",
            "aggregate.count",
            "aggregate.sum",
            "quantile.utility",
        } <= checked
