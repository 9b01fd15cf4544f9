"""The Lua scripts of the Redis store's ``rewind`` and ``fork`` (``_redis_history``).

A fork runs on the keys of both sessions (``FORK``); on an encrypting store, whose records
are bound to their session, the client reads the source (``FORK_READ``), seals the copies
again for the new session and writes them with ``FORK_SEALED``, which refuses an existing
new id and a source changed since the read: one write either way.

Apart from ``_redis_history`` so that ``_redis_base`` can register them with the rest
without importing the store's modules.
"""

from __future__ import annotations

from . import _redis_scripts as lua

__all__ = ["FORK", "FORK_READ", "FORK_SEALED", "REWIND"]

#: The end of a fork's write (``FORK``, ``FORK_SEALED``; the messages written): the new
#: session's ``meta`` naming its parent, the state ``record`` (``false``: none) at the version
#: after the new id's, and the new keys' TTL when nothing keeps the session from expiring.
_FORKED = """
local function forked(keep, revision, source, ttl_ms, new_id, record, now)
  local NEW_META, NEW_MESSAGES, NEW_LEASE = KEYS[9], KEYS[10], KEYS[11]
  local NEW_CPS, NEW_CP_TIMES = KEYS[12], KEYS[13]
  redis.call('HSET', NEW_META, 'length', keep, 'revision', revision, 'updated', fmt(now),
    'parent', source, 'fork_point', keep)
  local field = new_id .. '.state'
  if record then save_state(NEW_CPS, NEW_CP_TIMES, field, record, now) end
  if ttl_ms ~= '' then
    local l = redis.call('HMGET', NEW_LEASE, 'holder', 'until')
    if not (l[1] and l[1] ~= '' and tonumber(l[2] or '0') > now) then
      redis.call('PEXPIRE', NEW_META, ttl_ms)
      if keep > 0 then redis.call('PEXPIRE', NEW_MESSAGES, ttl_ms) end
      if record and redis.call('HLEN', NEW_CPS) == 1 then
        redis.call('PEXPIRE', NEW_CPS, ttl_ms)
        redis.call('PEXPIRE', NEW_CP_TIMES, ttl_ms)
      end
    end
  end
  return {'ok', keep}
end
"""

#: ARGV: keep, fence or '', expected length or '', revision, session ttl
#: -> {'ok', removed} | {'lease-lost', latest} | {'missing'} | {'conflict', length}
#: | {'short', length} | {'corrupt', list length}
REWIND = lua._script("""
local now = now_us()
if not fence_ok(ARGV[2]) then return {'lease-lost', redis.call('HGET', LEASE, 'fence')} end
local length = redis.call('HGET', META, 'length')
if not length then return {'missing'} end
length = tonumber(length)
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= length then return {'conflict', length} end
local keep = tonumber(ARGV[1])
if keep > length then return {'short', length} end
local stored = redis.call('LLEN', MESSAGES)
if stored ~= length then return {'corrupt', stored} end
if keep == 0 then redis.call('DEL', MESSAGES) else redis.call('LTRIM', MESSAGES, 0, keep - 1) end
redis.call('HSET', META, 'length', keep, 'revision', ARGV[4], 'updated', fmt(now))
settle(now, ARGV[5])
return {'ok', length - keep}
""")

#: KEYS: the source's session keys, then the new session's. ARGV: keep or '', revision,
#: source id, session ttl, new id, '1' to copy the source's state record (else '')
#: -> {'ok', kept} | {'exists'} | {'missing'} | {'short', length}
FORK = lua._script(
    _FORKED
    + """
local NEW_META, NEW_MESSAGES = KEYS[9], KEYS[10]
local now = now_us()
if redis.call('EXISTS', NEW_META) == 1 then return {'exists'} end
local length = redis.call('HGET', META, 'length')
if not length then return {'missing'} end
length = tonumber(length)
local keep = length
if ARGV[1] ~= '' then keep = tonumber(ARGV[1]) end
if keep > length then return {'short', length} end
redis.call('DEL', NEW_MESSAGES)
for i = 0, keep - 1, 1000 do
  local chunk = redis.call('LRANGE', MESSAGES, i, math.min(i + 999, keep - 1))
  if #chunk > 0 then redis.call('RPUSH', NEW_MESSAGES, unpack(chunk)) end
end
local record = false
if ARGV[6] == '1' then record = redis.call('HGET', CPS, STATE) end
return forked(keep, ARGV[2], ARGV[3], ARGV[4], ARGV[5], record, now)
"""
)

#: KEYS as ``FORK``'s; reads only. ARGV: keep or '', '1' to read the state record too.
#: -> {'ok', revision, {messages...}, state record or false} | {'exists'} | {'missing'}
#: | {'short', length}
FORK_READ = lua._script("""
if redis.call('EXISTS', KEYS[9]) == 1 then return {'exists'} end
local length = redis.call('HGET', META, 'length')
if not length then return {'missing'} end
length = tonumber(length)
local keep = length
if ARGV[1] ~= '' then keep = tonumber(ARGV[1]) end
if keep > length then return {'short', length} end
local record = false
if ARGV[2] == '1' then record = redis.call('HGET', CPS, STATE) end
local messages = {}
if keep > 0 then messages = redis.call('LRANGE', MESSAGES, 0, keep - 1) end
return {'ok', redis.call('HGET', META, 'revision'), messages, record}
""")

#: ``FORK`` of an encrypting store: the records read by ``FORK_READ``, sealed again for the
#: new session by the client, written if the source is as read. KEYS as ``FORK``'s. ARGV:
#: the source's revision as read, its state version as read ('' when not copied), revision,
#: source id, session ttl, new id, the new state record ('' for none), messages...
#: -> {'ok', kept} | {'exists'} | {'changed'} (read again)
FORK_SEALED = lua._script(
    _FORKED
    + """
local now = now_us()
if redis.call('EXISTS', KEYS[9]) == 1 then return {'exists'} end
if redis.call('HGET', META, 'revision') ~= ARGV[1] then return {'changed'} end
if ARGV[2] ~= '' and state_version(redis.call('HGET', CPS, STATE)) ~= tonumber(ARGV[2]) then
  return {'changed'}
end
redis.call('DEL', KEYS[10])
push_all(KEYS[10], 8)
local record = false
if ARGV[7] ~= '' then record = ARGV[7] end
return forked(#ARGV - 7, ARGV[3], ARGV[4], ARGV[5], ARGV[6], record, now)
"""
)
