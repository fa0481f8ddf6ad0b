-- Take the lock if it is free, in one atomic step: SET with a TTL, a new fence, holder info.
-- With a waiter id, in arrival order: the waiter takes a free lock only from the head of the
-- queue, and joins (or stays in) the queue while it cannot.
-- KEYS: lock, fence counter, holder hash, cancelled tokens, queue (waiter ids by arrival,
-- server microseconds), queue expiry (waiter ids by the server ms at which they leave).
-- ARGV: token, ttl ms, fence counter ttl ms, host, pid, command, waiter id ('' = does not
-- wait: never queues), how long a waiter's place is kept without a new attempt (ms).
-- Returns {1, fence} when acquired; {0, pttl, host, pid, acquired_ms, queued, place} when
-- busy (pttl -2: the lock is free but waiters come first; queued: waiters in the queue;
-- place: this waiter's place in it, 1 = next, 0 = not queued); {2} for an attempt that was
-- cancelled (its reply has no reader).
-- Every check that can fail runs before the first write: a script that errors half-way
-- would otherwise leave a lock behind that nobody knows it holds.
local lock, fence_key, holder, cancelled = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, expiry = KEYS[5], KEYS[6]
local token, ttl = ARGV[1], ARGV[2]
local waiter, keep = ARGV[7], tonumber(ARGV[8])

-- An attempt that its run already took back (cancel.lua) arrived late: it must not land.
if redis.call('SISMEMBER', cancelled, token) == 1 then
  return {2}
end

local kind = redis.call('TYPE', lock).ok
if kind == 'zset' then
  return redis.error_reply('WRONGTYPE the lock ' .. lock ..
    ' is used with --limit (several holders); use the same --limit as its other users')
elseif kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE the lock key holds a ' .. kind .. ', not a lock')
end
local bad_queue = check_queue_keys(queue, expiry)
if bad_queue then
  return bad_queue
end
local last, bad_fence = last_fence(fence_key)
if bad_fence then
  return bad_fence
end

local now_us, now_ms = server_now()
reap_waiters(queue, expiry, now_ms)

-- Join the queue, or keep our place in it, and say who holds the lock and where we stand.
local function busy()
  local place = 0
  if waiter ~= '' then
    place = keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  end
  -- Report who holds it, but only if the holder info belongs to the current value:
  -- a lock taken by another client on a raw key has no (or stale) holder info.
  local host, pid, since = '', '', ''
  local value = redis.call('GET', lock)
  if value then
    local info = redis.pcall('HMGET', holder, 'token', 'host', 'pid', 'acquired_ms')
    if type(info) == 'table' and not info.err and info[1] == value then
      host, pid, since = info[2] or '', info[3] or '', info[4] or ''
    end
  end
  return {0, redis.call('PTTL', lock), host, pid, since, redis.call('ZCARD', queue), place}
end

-- Our own token is ours whatever the queue says: an earlier attempt of this run landed
-- although its reply was lost (a timeout). It is taken anew below, with a new fence and a
-- fresh TTL.
if kind == 'string' and redis.call('GET', lock) ~= token then
  return busy()
end
if kind == 'none' and redis.call('ZCARD', queue) > 0 then
  -- Free, but others queued first: only the head may take it (a run that does not wait
  -- never jumps the queue either).
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if waiter == '' or head ~= waiter then
    return busy()
  end
end
if waiter ~= '' then
  leave_queue(queue, expiry, waiter)
end

local fence_str = next_fence(last, now_us)
redis.call('SET', lock, token, 'PX', ttl)
redis.call('SET', fence_key, fence_str, 'PX', ARGV[3])
redis.call('DEL', holder)
redis.call('HSET', holder, 'token', token, 'host', ARGV[4], 'pid', ARGV[5], 'cmd', ARGV[6],
  'acquired_ms', string.format('%.0f', now_ms), 'fence', fence_str)
redis.call('PEXPIRE', holder, ttl)
return {1, fence_str}
