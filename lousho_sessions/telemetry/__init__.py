"""Telemetry: OpenTelemetry spans and metrics of turns (``_spans``) and the trace
context a turn keeps in its checkpoint (``_context``). Configured through
``create_agent(tracer_provider=..., meter_provider=...)``; nothing here is public.
"""
