"""Settings of the example project (one file; no database: sessions live in lousho's store).

``LOUSHO_DB`` (settings or environment) names a SQLite file shared by every
process that serves the app; without it sessions stay in this process's memory.
A real project keeps Django's usual middleware (sessions, CSRF) as well.
"""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "django_app.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
LOUSHO_DB = os.environ.get("LOUSHO_DB")
