"""A minimal Django project: one sync view and one async view over the same session store.

Run it with ``DJANGO_SETTINGS_MODULE=django_app.settings`` from ``examples/``, e.g.
``python -m django runserver --settings=django_app.settings``.
"""
