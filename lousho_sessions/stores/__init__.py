"""Stores: where transcripts, checkpoints and approvals live."""
