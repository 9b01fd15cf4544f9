"""Model providers: the one seam between a turn and a model."""

from ._http import RetryPolicy
from .caching import CachePolicy
from .gemini import GeminiProvider
from .openai_responses import OpenAIResponsesProvider

__all__ = ["CachePolicy", "GeminiProvider", "OpenAIResponsesProvider", "RetryPolicy"]
