"""Model providers: the one seam between a turn and a model."""

from ._http import RetryPolicy
from .openai_responses import OpenAIResponsesProvider

__all__ = ["OpenAIResponsesProvider", "RetryPolicy"]
