"""``python -m lousho_sessions``: the admin command (``lousho``); see ``lousho_sessions.admin``."""

from __future__ import annotations

from .admin import main

if __name__ == "__main__":
    raise SystemExit(main())
