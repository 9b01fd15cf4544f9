"""lousho_sessions: durable multi-turn sessions for AI agents."""
