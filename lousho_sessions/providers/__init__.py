"""Model providers: the one seam between a turn and a model."""

from ._http import RetryPolicy

__all__ = ["RetryPolicy"]
