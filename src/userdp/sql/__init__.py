"""Private SQL: a GROUP BY written as SQL, with no contribution bounds to guess.

:func:`sql` parses the query with sqlglot (:mod:`userdp.sql.parse`), runs its row-level part
in DuckDB (in process) or Spark SQL (:mod:`userdp.sql.rows`) and releases the GROUP BY
through :func:`userdp.aggregate`; BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY`` runs as is.
"""

import inspect
import sys
import types
from typing import Any

from userdp.sql.api import SELECTION_SHARE, sql
from userdp.sql.parse import QuerySpec, UnsupportedQueryError, parse_query
from userdp.sql.result import QueryPlan, Release, SqlResult

__all__ = [
    "SELECTION_SHARE",
    "QueryPlan",
    "QuerySpec",
    "Release",
    "SqlResult",
    "UnsupportedQueryError",
    "parse_query",
    "sql",
]


class _CallableModule(types.ModuleType):
    """``userdp.sql`` is both this package and its function (as ``userdp.aggregate`` is):
    importing the package binds the module to that name, so the module calls :func:`sql`."""

    def __call__(self, *args: Any, **kwargs: Any) -> SqlResult | QueryPlan:
        return sql(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        """The function's signature, for ``help``, IDEs and ``inspect.signature``."""
        return inspect.signature(sql)


sys.modules[__name__].__class__ = _CallableModule
