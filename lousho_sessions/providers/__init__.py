"""Model providers: the one seam between a turn and a model."""

from ._http import RetryPolicy
from .gemini import GeminiProvider

__all__ = ["GeminiProvider", "RetryPolicy"]
