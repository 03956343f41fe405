"""userdp.sql on the Spark engine: the same release as DuckDB's for public keys and a seed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import userdp

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]


def test_spark_sql_releases_what_duckdb_releases_for_public_keys(spark):
    rng = np.random.default_rng(0)
    visits = pd.DataFrame(
        {"uid": rng.integers(0, 500, 3000), "page": rng.integers(0, 4, 3000), "x": rng.random(3000)}
    )
    pages = pd.DataFrame({"page": [0, 1, 2, 3, 4], "section": ["a", "a", "b", "b", "c"]})
    query = (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(public_keys=pages) page, "
        "COUNT(DISTINCT uid) AS users, SUM(CLAMP(x, 0, 1)) AS s, COUNT(NULLIF(page, 2)) AS c "
        "FROM visits "
        "JOIN pages USING (page) WHERE x > 0.1 GROUP BY page ORDER BY page"
    )
    kwargs = dict(public_tables=["pages"], privacy_unit="uid", epsilon=1.0, delta=1e-5, seed=3)
    local = userdp.sql(query, tables={"visits": visits, "pages": pages}, **kwargs)
    frames = {"visits": spark.createDataFrame(visits), "pages": spark.createDataFrame(pages)}
    remote = userdp.sql(query, tables=frames, **kwargs)
    assert remote.engine == "spark"
    a, b = local.to_pandas(), remote.to_pandas()
    assert a["page"].tolist() == b["page"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(a[["users", "s", "c"]], b[["users", "s", "c"]], rtol=1e-9, atol=1e-6)
    assert a["c"].iloc[2] < 0.2 * a["c"].iloc[1]  # NULLIF(page, 2) is NULL on page 2: noise only
    assert remote.to_spark().count() == 5
