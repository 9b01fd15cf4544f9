"""Model providers: the one seam between a turn and a model."""

from ._http import RetryPolicy
from .caching import CachePolicy

__all__ = ["CachePolicy", "RetryPolicy"]
