from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("chat", views.chat),
    path("chat/async", views.chat_async),
    path("chat/stream", views.chat_stream),
    path("history", views.history),
]
