"""The Lua scripts of the Redis store's ``rewind`` and ``fork`` (``_redis_history``).

Apart from ``_redis_history`` so that ``_redis_base`` can register them with the rest
without importing the store's modules.
"""

from __future__ import annotations

from . import _redis_scripts as lua

__all__ = ["FORK", "REWIND"]

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
#: source id, session ttl -> {'ok', kept} | {'exists'} | {'missing'} | {'short', length}
FORK = lua._script("""
local NEW_META, NEW_MESSAGES, NEW_LEASE = KEYS[9], KEYS[10], KEYS[11]
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
redis.call('HSET', NEW_META, 'length', keep, 'revision', ARGV[2], 'updated', fmt(now),
  'parent', ARGV[3], 'fork_point', keep)
if ARGV[4] ~= '' then
  local l = redis.call('HMGET', NEW_LEASE, 'holder', 'until')
  if not (l[1] and l[1] ~= '' and tonumber(l[2] or '0') > now) then
    redis.call('PEXPIRE', NEW_META, ARGV[4])
    if keep > 0 then redis.call('PEXPIRE', NEW_MESSAGES, ARGV[4]) end
  end
end
return {'ok', keep}
""")
