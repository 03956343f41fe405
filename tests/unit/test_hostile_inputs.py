"""Hostile inputs to the Python API raise UserDPError leaves, never raw library errors.

Each test reproduces one of the failures found by an audit (raw OverflowError,
ArrowNotImplementedError, AttributeError, ZeroDivisionError, "FieldRef" messages) and checks the
message names rows and columns without echoing cell values.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyarrow as pa
import pytest

from userdp import Contributions, select_partitions
from userdp.data import read, read_table
from userdp.data.io import check_column_roles, check_model_file
from userdp.estimate.mean import sample_limited_mean, weighted_mean
from userdp.estimate.quantile import weighted_quantile
from userdp.exceptions import DataError, InvalidParameterError, UserDPError
from userdp.privacy import PrivacyBudget
from userdp.privacy.calibrate import gaussian_delta, gaussian_sigma


# -- ids ----------------------------------------------------------------------------------------
def test_python_ints_beyond_int64_are_kept_exactly():
    users = [98765432109876543210 + u for u in range(5)]
    c = Contributions.from_columns(users, [1, 2, 3, 4, 5])
    assert c.n_users == 5
    assert c.user_labels.to_pylist() == [str(u) for u in users]


def test_list_items_are_a_data_error():
    with pytest.raises(DataError, match=r"'item'.*list"):
        Contributions.from_columns(["a", "b"], [[1, 2], [3]])


def test_empty_string_ids_are_refused_with_row_and_column():
    with pytest.raises(DataError, match=r"Column 'item' has an empty value \(first at row 2\)"):
        Contributions.from_columns(["a", "b", "c"], ["x", "y", ""])


def test_mixed_types_name_the_column_and_row_not_the_value():
    with pytest.raises(DataError, match=r"Column 'user'.*row 1") as info:
        Contributions.from_columns([1, "alice@example.com"], ["x", "y"])
    assert "alice" not in str(info.value)


def test_bad_pair_names_the_row_not_the_value():
    with pytest.raises(DataError, match="Row 1 is not a") as info:
        Contributions.from_pairs([("a", "x"), ("secret-value",)])
    assert "secret" not in str(info.value)


class _NotAFrame:
    """Stands for a Polars DataFrame: has ``columns`` and ``__getitem__`` but is not pandas."""

    columns = ("user", "item")

    def __getitem__(self, key: str) -> object:
        raise TypeError("a long dump of a Series\n" * 50)


def test_foreign_dataframe_is_refused_with_a_short_message():
    with pytest.raises(DataError, match="_NotAFrame") as info:
        select_partitions(_NotAFrame(), epsilon=1, delta=1e-5)
    assert "dump" not in str(info.value)


class _ArrowStream:
    """An object exporting the Arrow PyCapsule stream interface (as Polars and DuckDB do)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


def test_arrow_pycapsule_objects_are_accepted():
    table = pa.table({"user": ["a", "b", "b"], "item": ["x", "x", "y"]})
    c = Contributions.from_table(_ArrowStream(table))
    assert (c.n_users, c.n_pairs) == (2, 3)


def test_empty_directory_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no data files") as info:
        read(tmp_path)
    assert "FieldRef" not in str(info.value)


def test_a_column_plays_one_role_only():
    with pytest.raises(InvalidParameterError, match="one role"):
        read_table("x.csv", columns=("item", "item"))
    with pytest.raises(InvalidParameterError, match=r"user column.*item column"):
        check_column_roles({"user column": "x", "item column": "x"})
    with pytest.raises(InvalidParameterError, match="one role"):
        select_partitions(
            pa.table({"u": ["a"], "i": ["x"]}),
            epsilon=1,
            delta=1e-5,
            user_column="u",
            item_column="u",
        )


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04trunc", b"user,item\nu1,a\n"])
def test_check_model_file_refuses_non_models(content, tmp_path):
    p = tmp_path / "model.npz"
    p.write_bytes(content)
    with pytest.raises(DataError, match="userdp model") as info:
        check_model_file(p)
    assert "allow_pickle" not in str(info.value)


# -- calibration --------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [1e12, 1e20, 1e100])
def test_gaussian_sigma_ends_and_is_valid_for_huge_epsilon(epsilon):
    """The nudge loop ran forever at epsilon=1e20 (steps of 1e-12 relative); it now has a
    bounded number of steps, so this test ends (its speed is not a test's business)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sigma = gaussian_sigma(epsilon, 5e-6)
    assert gaussian_delta(sigma, epsilon) <= 5e-6


def test_gaussian_sigma_refuses_epsilon_it_cannot_calibrate():
    with pytest.raises(InvalidParameterError, match="epsilon") as info:
        gaussian_sigma(1e300, 5e-6)
    assert "NaN" not in str(info.value)


def test_a_budget_refuses_epsilon_beyond_the_limit_and_every_share_of_it_calibrates():
    """A budget split into shares reached the calibration with a share it could not compute
    and named that share; the limit is checked on the budget given, where any share works."""
    from userdp.privacy import MAX_EPSILON, PrivacyBudget

    with pytest.raises(InvalidParameterError, match=r"at most 1e\+100.*Got 1e\+101 instead"):
        PrivacyBudget(1e101, 1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        budget = PrivacyBudget(MAX_EPSILON, 1e-5)
        for share in (*budget.split([1e-9, 1e-3, 1 - 1e-3 - 1e-9]), budget):
            sigma = gaussian_sigma(share.epsilon, share.delta)
            assert gaussian_delta(sigma, share.epsilon) <= share.delta


def test_what_is_left_of_a_budget_repeats_no_unusual_value_warning():
    from userdp.exceptions import UnusualBudgetWarning
    from userdp.privacy import PrivacyBudget

    with pytest.warns(UnusualBudgetWarning):
        budget = PrivacyBudget(1e50, 1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusualBudgetWarning)
        left = budget - budget.split([0.1, 0.9])[0]
    assert left.epsilon == pytest.approx(0.9e50)


def test_gaussian_sigma_unchanged_for_usual_epsilon():
    assert round(gaussian_sigma(1.0, 5e-6), 5) == 3.88414


# -- estimators ---------------------------------------------------------------------------------
VALUES = np.linspace(0.2, 0.8, 200)
USERS = np.repeat(np.arange(100), 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1e-300, "bounds": (0, 1)}, "'epsilon'"),
        ({"epsilon": 1.0, "bounds": (0, 1e308)}, "'bounds'"),
        ({"epsilon": 1.0, "bounds": (0, 1e-300)}, "'bounds'"),
        ({"epsilon": 1.0, "bounds": (-1e308, 1e308)}, "'bounds'"),
    ],
)
@pytest.mark.parametrize("fn", [weighted_mean, sample_limited_mean, weighted_quantile])
def test_extreme_epsilon_and_bounds_raise_invalid_parameter(fn, kwargs, match):
    extra = {"q": 0.5} if fn is weighted_quantile else {}
    with pytest.raises(InvalidParameterError, match=match):
        fn(VALUES, USERS, seed=0, **kwargs, **extra)


def test_regression_refuses_tiny_epsilon():
    from userdp.estimate.regression import LabelPrivateLinearRegression

    X = np.column_stack([VALUES, VALUES**2])
    model = LabelPrivateLinearRegression(epsilon=1e-300, label_range=(0, 1))
    with pytest.raises(InvalidParameterError, match="'epsilon'"):
        model.fit(X, VALUES, USERS)


def test_sample_limited_mean_refuses_a_fractional_threshold():
    with pytest.raises(InvalidParameterError, match="'h'"):
        sample_limited_mean(VALUES, USERS, epsilon=1.0, bounds=(0, 1), h=2.5, seed=0)


def test_small_but_sane_epsilon_still_works():
    r = weighted_mean(VALUES, USERS, epsilon=1e-6, bounds=(0, 1), seed=0)
    assert math.isfinite(r.estimate)


def test_budget_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        select_partitions([("a", "x")], epsilon=50, delta=1e-5, seed=0)
    budget = [w for w in caught if "weak guarantee" in str(w.message)]
    assert budget and budget[0].filename == __file__


def test_userdp_error_is_the_root():
    assert issubclass(InvalidParameterError, UserDPError)
    assert isinstance(PrivacyBudget(1.0), PrivacyBudget)


@pytest.mark.parametrize("cls", ["MatrixFactorization", "PublicFeatureRecommender"])
def test_a_tuple_epsilon_is_an_invalid_parameter_not_an_attribute_error(cls):
    from userdp import recommend

    kwargs = {"encoder": recommend.IdEncoder(2, 2)} if cls == "PublicFeatureRecommender" else {}
    model = getattr(recommend, cls)(rating_range=(0.5, 5.0), epsilon=(5.0, 1e-5), **kwargs)
    ratings = {"user": ["a", "b"], "item": ["x", "y"], "rating": [1.0, 2.0]}
    with pytest.raises(InvalidParameterError, match="'epsilon' parameter"):
        model.fit(ratings)


def test_estimator_input_errors_name_the_index_not_the_value():
    values = [0.5, 0.6, "alice@example.com"]
    with pytest.raises(DataError, match="index 2") as info:
        weighted_mean(values, [1, 2, 3], epsilon=1.0, bounds=(0, 1), seed=0)
    assert "alice" not in str(info.value)


def test_reader_conversion_errors_hide_the_value():
    from userdp.data.io import safe_message

    err = pa.ArrowInvalid("In CSV column #1: CSV conversion error to double: invalid value 'bob'")
    assert "bob" not in safe_message(err)
    err = pa.ArrowInvalid("CSV parse error: Row #3: Expected 2 columns, got 3: u2,b,secret")
    assert "secret" not in safe_message(err)
    assert "Row #3: Expected 2 columns, got 3" in safe_message(err)


# -- memory bounded by the data, not by typed parameters ------------------------------------------
@pytest.mark.parametrize("h_scale", [0.5, 1.0, 30.0, 1000.0])
@pytest.mark.parametrize("cap", [(1 << 20) + 1, 3_000_017])
def test_threshold_of_a_large_cap_equals_the_dense_maximum(cap, h_scale, monkeypatch):
    from userdp.privacy import calibrate

    sigma = gaussian_sigma(1.0, 5e-6)
    sparse = calibrate.partition_threshold(sigma, 1e-5, cap, h_scale)
    monkeypatch.setattr(calibrate, "_DENSE_THRESHOLD_CAP", 1 << 30)
    assert calibrate.partition_threshold(sigma, 1e-5, cap, h_scale) == sparse


def test_threshold_of_a_huge_cap_needs_no_array_and_grows(monkeypatch):
    from userdp.privacy import calibrate

    def no_big_arange(*args, **kwargs):
        raise AssertionError("np.arange called for a huge cap")

    sigma = gaussian_sigma(1.0, 5e-6)
    small = calibrate.partition_threshold(sigma, 1e-5, 10**6)
    monkeypatch.setattr(calibrate.np, "arange", no_big_arange)
    values = [calibrate.partition_threshold(sigma, 1e-5, c) for c in (10**9, 10**12, 2**62)]
    assert small < values[0] < values[1] < values[2] < 50


def test_duplicated_column_names_are_a_data_error():
    columns = [pa.array(["u"]), pa.array(["a"]), pa.array(["b"])]
    t = pa.table(columns, names=["user", "item", "item"])
    with pytest.raises(DataError, match="'item' appears 2 times"):
        Contributions.from_table(t)


def test_unterminated_quote_is_a_data_error(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text('user,item\nu1,"abc\nu2,x\n')
    with pytest.raises(DataError, match=r"line 2.*unterminated quote"):
        read(p)
