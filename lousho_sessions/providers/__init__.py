"""Model providers: the one seam between a turn and a model."""
