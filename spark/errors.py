"""Errors the data source raises on purpose reach the user as one line.

Spark shows an exception from a Python data source with the Python traceback inside its own
message (``[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source reader:
Traceback ...``), 10 to 26 lines for a misspelt option or an unreachable cluster. The
errors kafkasim raises on purpose — a bad option (:class:`~spark.options.SparkOptionError`),
a Kafka error, a timeout, data loss (every :class:`~common.errors.KafkasimError`) — say all
there is to say in their message, so :func:`user_facing` re-raises them at the data source's
boundary with the traceback cut there: Spark's message then ends in one line naming the
error, and with Spark's ``spark.sql.execution.pyspark.udf.hideTraceback.enabled=true`` it IS
one line. Anything else (a bug) keeps its full traceback.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from kafkasim.common.errors import KafkasimError
from kafkasim.spark.options import SparkOptionError

F = TypeVar("F", bound=Callable[..., Any])

USER_FACING: tuple[type[Exception], ...] = (KafkasimError, SparkOptionError)


def user_facing(fn: F) -> F:
    """``fn`` (a function or a generator function) with kafkasim's own errors re-raised
    without the traceback below this frame and without the chained cause."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except USER_FACING as e:
                raise e.with_traceback(None) from None

        return cast(F, generator)

    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_FACING as e:
            raise e.with_traceback(None) from None

    return cast(F, plain)
