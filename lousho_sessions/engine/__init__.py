"""The engine: one turn and how it is settled (no threads of its own).

A turn (``_turn``) asks the model, runs its tool calls, waits on approvals and
keeps a checkpoint; the runner (``_runner``) drives it on the caller's worker
thread, as a durable session turn (``_durable``, queued as a job by the session's
core, ``_session_core``) or a single send (``_single``), with the transcript
(``_transcript``), checkpoints and their codec, effects, limits, approval records
and turn keys (``_approvals``) and typed output (``_output``). Nothing here is public: the face (``agent``, ``session``, ``aio``,
``recovery``) is. The engine never imports the face or the runtime's callers.
"""
