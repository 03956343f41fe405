"""Audit userdp's privacy guarantees from the outside: ``userdp audit`` and this package.

Two independent checks (issue 12):

* :func:`audit_sensitivity` / :func:`run_audit`: a record/replay sensitivity audit. Every
  mechanism declares each noised statistic and its sensitivity through one hook
  (:func:`userdp.privacy.record`, called by the noise helpers). The auditor reruns a mechanism
  on neighbours of the data with the same seed, replaying the released outputs, and reports
  the largest change of each statistic against its declared bound (FAIL above it).
* :func:`run_experiment` over :data:`EXPERIMENTS`: empirical epsilon lower bounds
  (Clopper-Pearson, 95%) for the black-box selection and the mean/quantile releases on
  constructed hard neighbours.

Neither proves privacy: they find violations. A pass means no neighbour tried moved a statistic
beyond its bound, and no event tried separated the hard neighbours by more than epsilon.
"""

from userdp.audit.epsilon import EpsilonBound, clopper_pearson, epsilon_lower_bound
from userdp.audit.hard import EXPERIMENTS, Experiment, run_experiment
from userdp.audit.mechanisms import MECHANISMS, Mechanism, audit_table
from userdp.audit.neighbours import Neighbour, Table, neighbours
from userdp.audit.replay import AuditRow, audit_sensitivity
from userdp.audit.report import AuditReport, run_audit

__all__ = [
    "EXPERIMENTS",
    "MECHANISMS",
    "AuditReport",
    "AuditRow",
    "EpsilonBound",
    "Experiment",
    "Mechanism",
    "Neighbour",
    "Table",
    "audit_sensitivity",
    "audit_table",
    "clopper_pearson",
    "epsilon_lower_bound",
    "neighbours",
    "run_audit",
    "run_experiment",
]
