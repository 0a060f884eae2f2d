"""Declared column types for frames a test builds itself.

Sessions need every column's type declared (``types=``). A test that builds
its own frame declares the types that frame was built with; this helper
writes that declaration from the dtypes the test chose. It is never applied to
a neighbour: transcript tests declare their types literally, so a hostile row
cannot change them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["types_of"]


def _type_of(dtype: Any) -> str:
    if pd.api.types.is_bool_dtype(dtype):
        return "BOOLEAN"
    if pd.api.types.is_integer_dtype(dtype):
        return "BIGINT"
    if pd.api.types.is_float_dtype(dtype):
        return "DOUBLE"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "TIMESTAMP"
    return "VARCHAR"  # object, string and category columns of test frames hold text


def types_of(frame: Any) -> dict[str, str]:
    """``{column: DuckDB type}`` for a pandas (or polars / Arrow, via pandas) test frame."""
    if not isinstance(frame, pd.DataFrame):
        frame = frame.to_pandas()
    return {str(c): _type_of(t) for c, t in frame.dtypes.items()}
