"""The runtime: the threads an agent owns and the blocking calls that wait on them.

One worker thread per session lane (``_worker``), the event loop that runs
``async def`` tools (``_tool_loop``), the blocking calls that queue a turn and wait
for it with a timeout and Ctrl-C (``_calls``), a session's lane as every caller uses
it — key, re-entry check, stop, end of stream (``_session_lane``) — and who owns and
stops them all (``_runtime``).
"""
