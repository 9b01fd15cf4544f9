"""The Lua scripts of the Redis store: every mutation is one script, so it is atomic.

Each script gets one session's keys, all under that session's hash tag (one
Redis Cluster slot), always in the order of ``SESSION_PARTS``. Times are the
server's (``TIME``) in microseconds, so workers' clocks never matter; numbers
are written with ``%.0f`` (Lua would write 1.7e+15). A fence is the server's
time in microseconds, or the last fence plus one when that is not larger.

``settle`` runs at the end of every write: with a session TTL configured, it
sets the TTL on the session's keys only when no lease is live, no checkpoint
(an unfinished durable turn) and no pending approval is kept; otherwise it
removes any TTL. So expiry is decided in the same script as the write, never
afterwards, and a session whose turn is running never expires.

A session's state is the ``<id>.state`` field of its ``checkpoints`` hash (``STATE``, the
store contract's default place): ``{"state": ..., "version": n}``, the version last and
in clear. It is no checkpoint: it neither makes a turn pending nor keeps the session
from expiring (it expires with the session).
"""

from __future__ import annotations

__all__ = [
    "ACQUIRE",
    "ACQUIRE_SAVING",
    "APPEND",
    "APPROVAL_CREATE",
    "APPROVAL_DELETE",
    "APPROVAL_PRUNE",
    "APPROVAL_RESOLVE",
    "CHECKPOINT_DELETE",
    "CHECKPOINT_PRUNE",
    "CHECKPOINT_SAVE",
    "INDEX_FORGET",
    "LEASE_PRUNE",
    "LOAD",
    "RELEASE",
    "RENEW",
    "SAVE",
    "SESSION_DELETE",
    "SESSION_PARTS",
    "SESSION_PRUNE",
    "TAKE_OVER",
]

#: The parts of one session's key ``<prefix>:{<id>}:<part>``, in the order scripts get them.
SESSION_PARTS = (
    "meta",  # hash: length, revision, updated (µs)
    "messages",  # list: one JSON text per message
    "lease",  # hash: fence, holder, until (µs); kept after release: the last fence
    "checkpoints",  # hash: turn id -> checkpoint JSON
    "checkpoint-times",  # hash: turn id -> updated (µs)
    "approvals",  # hash: approval id -> record JSON
    "approval-states",  # hash: approval id -> "pending" or resolved (µs)
    "wake",  # list: one item pushed per release, for BLPOP waiters; expires on its own
)

_PRELUDE = """
local META, MESSAGES, LEASE, CPS, CP_TIMES, APS, AP_STATES, WAKE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local function fmt(n) return string.format('%.0f', n) end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function live(now)
  local l = redis.call('HMGET', LEASE, 'holder', 'until')
  return l[1] and l[1] ~= '' and tonumber(l[2] or '0') > now
end
-- the lease for holder ARGV[1] for ARGV[2] ms, with a new fence: -> fence, or nil and the
-- µs the live lease has left (ACQUIRE and ACQUIRE_SAVING)
local function take(now)
  local l = redis.call('HMGET', LEASE, 'holder', 'until', 'fence')
  if l[1] and l[1] ~= '' and tonumber(l[2] or '0') > now then
    return nil, tonumber(l[2]) - now
  end
  local fence = now
  local last = tonumber(l[3] or '0')
  if fence <= last then fence = last + 1 end
  redis.call('HSET', LEASE, 'fence', fmt(fence), 'holder', ARGV[1],
    'until', fmt(now + tonumber(ARGV[2]) * 1000))
  return fence
end
-- the session's state field of CPS: its id (the key's hash tag) and '.state'
local STATE = string.match(KEYS[1], '{([^}]*)}') .. '.state'
-- how many checkpoints the session has: its state record is none
local function checkpoint_count()
  local n = redis.call('HLEN', CPS)
  if n > 0 and redis.call('HEXISTS', CPS, STATE) == 1 then n = n - 1 end
  return n
end
-- the version of a state record (false: none stored): its last field, as stores write it
local function state_version(record)
  if not record then return 0 end
  local version = string.match(record, ',"version":(%d+)}$')
  if version then return tonumber(version) end
  local ok, data = pcall(cjson.decode, record)
  if ok and type(data) == 'table' then return tonumber(data['version']) or 0 end
  return 0
end
-- the state record text ``record`` (with or without its version) at ``version``
local function versioned(record, version)
  local head = string.match(record, '^(.*),"version":%d+}$') or string.sub(record, 1, -2)
  return head .. ',"version":' .. fmt(version) .. '}'
end
-- write the state record ``record`` as the state of CPS's field ``field`` (times in
-- ``times``), at the version after the stored one
local function save_state(cps, times, field, record, now)
  local version = state_version(redis.call('HGET', cps, field)) + 1
  redis.call('HSET', cps, field, versioned(record, version))
  redis.call('HSET', times, field, fmt(now))
end
local function fence_ok(fence)
  if fence == '' then return true end
  local latest = redis.call('HGET', LEASE, 'fence')
  return (not latest) or tonumber(fence) >= tonumber(latest)
end
local function settle(now, ttl_ms)
  if ttl_ms == '' then return end
  local busy = live(now) or checkpoint_count() > 0
  if not busy then
    for _, state in ipairs(redis.call('HVALS', AP_STATES)) do
      if state == 'pending' then busy = true break end
    end
  end
  for i = 1, 7 do
    if busy then redis.call('PERSIST', KEYS[i]) else redis.call('PEXPIRE', KEYS[i], ttl_ms) end
  end
end
local function push_all(key, from)
  for i = from, #ARGV, 1000 do
    redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
"""


def _script(body: str) -> str:
    return _PRELUDE + body


#: ARGV: holder token, lease ttl (ms), session ttl (ms or '').
#: -> {1, fence, revision or false, how many checkpoints the session has} or {0, µs left}.
ACQUIRE = _script("""
local now = now_us()
local fence, left = take(now)
if not fence then return {0, fmt(left)} end
settle(now, ARGV[3])
return {1, fmt(fence), redis.call('HGET', META, 'revision'), checkpoint_count()}
""")

#: ``ACQUIRE``, also saving a new turn's first checkpoint with the lease when the session
#: is as the turn was built on: its revision is the one offered and it has no checkpoint.
#: ARGV: holder token, lease ttl (ms), session ttl (ms or ''), turn id, offered revision
#: ('' for none stored), checkpoint JSON object without its fence (at least one field).
#: -> {1, fence, revision or false, checkpoints before, saved 1|0} or {0, µs left}.
ACQUIRE_SAVING = _script("""
local now = now_us()
local fence, left = take(now)
if not fence then return {0, fmt(left)} end
local revision = redis.call('HGET', META, 'revision')
local checkpoints = checkpoint_count()
local saved = 0
if checkpoints == 0 and (revision or '') == ARGV[5] then
  redis.call('HSET', CPS, ARGV[4], '{"fence":' .. fmt(fence) .. ',' .. string.sub(ARGV[6], 2))
  redis.call('HSET', CP_TIMES, ARGV[4], fmt(now))
  saved = 1
end
settle(now, ARGV[3])
return {1, fmt(fence), revision, checkpoints, saved}
""")

#: ARGV: holder token, fence, lease ttl (ms). -> 1 if still held (expiry moved on), else 0.
RENEW = _script("""
local now = now_us()
local l = redis.call('HMGET', LEASE, 'holder', 'fence')
if l[1] == ARGV[1] and l[2] == ARGV[2] then
  redis.call('HSET', LEASE, 'until', fmt(now + tonumber(ARGV[3]) * 1000))
  return 1
end
return 0
""")

#: ARGV: holder token, fence, session ttl. -> 1 if released, 0 if the lease was not ours.
RELEASE = _script("""
local now = now_us()
local l = redis.call('HMGET', LEASE, 'holder', 'fence')
if l[1] == ARGV[1] and l[2] == ARGV[2] then
  redis.call('HSET', LEASE, 'holder', '', 'until', '0')
  redis.call('RPUSH', WAKE, '1')
  redis.call('LTRIM', WAKE, -8, -1)
  redis.call('PEXPIRE', WAKE, 60000)
  settle(now, ARGV[3])
  return 1
end
return 0
""")

#: ARGV: expected length, fence or '', revision, session ttl, holder token of the lease to
#: release with this write or '', the session's new state record without its version (a
#: turn's commit that changed it) or '', n, n checkpoint turn ids to delete (a turn's
#: commit), messages... -> {'ok', released 1|0} | {'lease-lost', latest}
#: | {'conflict', length} | {'corrupt', list length}
APPEND = _script("""
local now = now_us()
if not fence_ok(ARGV[2]) then return {'lease-lost', redis.call('HGET', LEASE, 'fence')} end
local length = tonumber(redis.call('HGET', META, 'length') or '0')
if length ~= tonumber(ARGV[1]) then return {'conflict', length} end
local stored = redis.call('LLEN', MESSAGES)
if stored ~= length then return {'corrupt', stored} end
if ARGV[6] ~= '' then save_state(CPS, CP_TIMES, STATE, ARGV[6], now) end
local deletes = tonumber(ARGV[7])
for i = 8, 7 + deletes do
  redis.call('HDEL', CPS, ARGV[i])
  redis.call('HDEL', CP_TIMES, ARGV[i])
end
push_all(MESSAGES, 8 + deletes)
redis.call('HSET', META, 'length', length + #ARGV - 7 - deletes, 'revision', ARGV[3],
  'updated', fmt(now))
local released = 0
if ARGV[5] ~= '' then
  local l = redis.call('HMGET', LEASE, 'holder', 'fence')
  if l[1] == ARGV[5] and l[2] == ARGV[2] then
    redis.call('HSET', LEASE, 'holder', '', 'until', '0')
    redis.call('RPUSH', WAKE, '1')
    redis.call('LTRIM', WAKE, -8, -1)
    redis.call('PEXPIRE', WAKE, 60000)
    released = 1
  end
end
settle(now, ARGV[4])
return {'ok', released}
""")

#: No ARGV; reads only. -> {length or false, {messages...}}, one consistent view
LOAD = _script("""
return {redis.call('HGET', META, 'length'), redis.call('LRANGE', MESSAGES, 0, -1)}
""")

#: ARGV: revision, session ttl, messages... -> 'ok'
SAVE = _script("""
local now = now_us()
redis.call('DEL', MESSAGES)
push_all(MESSAGES, 3)
redis.call('HSET', META, 'length', #ARGV - 2, 'revision', ARGV[1], 'updated', fmt(now))
settle(now, ARGV[2])
return 'ok'
""")

#: ARGV: session ttl. Deletes the transcript; the lease hash (the last fence) stays.
SESSION_DELETE = _script("""
redis.call('DEL', META, MESSAGES)
settle(now_us(), ARGV[1])
return 'ok'
""")

#: ARGV: cutoff (µs). Deletes transcript, state and lease of a session written before it,
#: unless held.
SESSION_PRUNE = _script("""
local now = now_us()
if live(now) then return 0 end
local updated = redis.call('HGET', META, 'updated')
if not updated or tonumber(updated) >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', META, MESSAGES, LEASE)
redis.call('HDEL', CPS, STATE)
redis.call('HDEL', CP_TIMES, STATE)
return 1
""")

#: ARGV: cutoff (µs). Deletes the lease (the last fence) of a session that is gone: no
#: transcript, checkpoint or approval, not held, and released or expired before the cutoff
#: (a holder paused past its lease may still write: its fence refuses it until then). -> 1|0
LEASE_PRUNE = _script("""
local now = now_us()
if live(now) then return 0 end
if redis.call('EXISTS', META) == 1 or redis.call('HLEN', CPS) > 0 or redis.call('HLEN', APS) > 0
then return 0 end
if tonumber(redis.call('HGET', LEASE, 'until') or '0') >= tonumber(ARGV[1]) then return 0 end
return redis.call('DEL', LEASE)
""")

#: No ARGV. A fence newer than the holder's, the lease expired at once (an operator's
#: takeover: the holder's renewals and writes are refused). -> the fence
TAKE_OVER = _script("""
local now = now_us()
local fence = now
local last = tonumber(redis.call('HGET', LEASE, 'fence') or '0')
if fence <= last then fence = last + 1 end
redis.call('HSET', LEASE, 'fence', fmt(fence), 'holder', '', 'until', fmt(now))
return fmt(fence)
""")

#: ARGV: turn id, JSON, fence or '', session ttl. -> {'ok'} | {'lease-lost', latest}
CHECKPOINT_SAVE = _script("""
local now = now_us()
if not fence_ok(ARGV[3]) then return {'lease-lost', redis.call('HGET', LEASE, 'fence')} end
redis.call('HSET', CPS, ARGV[1], ARGV[2])
redis.call('HSET', CP_TIMES, ARGV[1], fmt(now))
settle(now, ARGV[4])
return {'ok'}
""")

#: ARGV: turn id, fence or '', session ttl. -> {'ok'} | {'lease-lost', latest}
CHECKPOINT_DELETE = _script("""
if not fence_ok(ARGV[2]) then return {'lease-lost', redis.call('HGET', LEASE, 'fence')} end
redis.call('HDEL', CPS, ARGV[1])
redis.call('HDEL', CP_TIMES, ARGV[1])
settle(now_us(), ARGV[3])
return {'ok'}
""")

#: ARGV: cutoff (µs), session ttl. -> how many checkpoints were deleted
CHECKPOINT_PRUNE = _script("""
if live(now_us()) then return 0 end
local times = redis.call('HGETALL', CP_TIMES)
local deleted = 0
for i = 1, #times, 2 do
  -- a session's state record (<id>.state) is not a checkpoint to prune: it goes with the session
  if tonumber(times[i + 1]) < tonumber(ARGV[1]) and string.sub(times[i], -6) ~= '.state' then
    redis.call('HDEL', CPS, times[i])
    redis.call('HDEL', CP_TIMES, times[i])
    deleted = deleted + 1
  end
end
if deleted > 0 then settle(now_us(), ARGV[2]) end
return deleted
""")

#: ARGV: approval id, JSON, fence or '', pending ('1' or '0'), session ttl.
#: -> {'ok'} | {'exists'} | {'lease-lost', latest}
APPROVAL_CREATE = _script("""
local now = now_us()
if not fence_ok(ARGV[3]) then return {'lease-lost', redis.call('HGET', LEASE, 'fence')} end
if redis.call('HEXISTS', APS, ARGV[1]) == 1 then return {'exists'} end
redis.call('HSET', APS, ARGV[1], ARGV[2])
local state = 'pending'
if ARGV[4] ~= '1' then state = fmt(now) end
redis.call('HSET', AP_STATES, ARGV[1], state)
settle(now, ARGV[5])
return {'ok'}
""")

#: ARGV: approval id, the JSON read, the resolved JSON, session ttl: compare-and-set.
#: -> 'ok' | 'missing' | 'changed' (read again) | 'resolved'
APPROVAL_RESOLVE = _script("""
local now = now_us()
local current = redis.call('HGET', APS, ARGV[1])
if not current then return 'missing' end
if current ~= ARGV[2] then return 'changed' end
if redis.call('HGET', AP_STATES, ARGV[1]) ~= 'pending' then return 'resolved' end
redis.call('HSET', APS, ARGV[1], ARGV[3])
redis.call('HSET', AP_STATES, ARGV[1], fmt(now))
settle(now, ARGV[4])
return 'ok'
""")

#: ARGV: approval id, session ttl.
APPROVAL_DELETE = _script("""
redis.call('HDEL', APS, ARGV[1])
redis.call('HDEL', AP_STATES, ARGV[1])
settle(now_us(), ARGV[2])
return 'ok'
""")

#: ARGV: cutoff (µs), session ttl. -> the ids of the resolved records deleted
APPROVAL_PRUNE = _script("""
local states = redis.call('HGETALL', AP_STATES)
local deleted = {}
for i = 1, #states, 2 do
  local state = states[i + 1]
  if state ~= 'pending' and tonumber(state) and tonumber(state) < tonumber(ARGV[1]) then
    redis.call('HDEL', APS, states[i])
    redis.call('HDEL', AP_STATES, states[i])
    deleted[#deleted + 1] = states[i]
  end
end
if #deleted > 0 then settle(now_us(), ARGV[2]) end
return deleted
""")

#: One key (the approval index): ARGV approval id, group. Removes the entry if it still names group.
INDEX_FORGET = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""
