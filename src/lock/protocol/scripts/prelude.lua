-- Shared by both acquire scripts (the mutex's and the semaphore's), prepended to each when
-- it is built, after reach.lua (protocol/mod.rs): a script cannot call another one.

-- The refusal (not_a_lock, reach.lua) if a key this node reaches holds something other than
-- `want`; nil if none does.
local function check_kinds(lock, want, keys)
  for _, key in ipairs(keys) do
    local k = type_here(key)
    if k and k ~= 'none' and k ~= want then
      return not_a_lock(lock, key, 'holds ' .. kind_words(k) .. ', where redlock-run keeps ' ..
        kind_words(want))
    end
  end
end

-- A sorted set at the lock key is a --limit lock of redlock-run's only with the limit
-- recorded beside it (semaphore/acquire.lua keeps it for as long as the set): true if so,
-- false if not (somebody else's set), nil where the limit key is out of reach (a migration).
local function limit_recorded(limit_key)
  if not here(limit_key) then
    return nil
  end
  return type_here(limit_key) == 'string' and tonumber(redis.call('GET', limit_key)) ~= nil
end

-- The refusal of a sorted set at the lock key without a recorded limit (limit_recorded).
local function not_a_limit_lock(lock, limit_key)
  return not_a_lock(lock, lock, 'holds a sorted set without the limit that --limit runs ' ..
    'record beside theirs (' .. limit_key .. ')')
end

-- Whether the --shared holders' set `shared` (which exists) was written by redlock-run: its
-- member whose lease ends last has its info in `holders` (the scripts write and remove both
-- together). Assumed so where `holders` is out of reach (a migration).
local function shared_ours(shared, holders)
  local last = redis.call('ZRANGE', shared, -1, -1)[1]
  if not last or not here(holders) then
    return true
  end
  return type_here(holders) == 'hash' and redis.call('HEXISTS', holders, last) == 1
end

-- The refusal of a --shared holders' set that shared_ours says is somebody else's.
local function not_shared_holders(lock, shared, holders)
  return not_a_lock(lock, shared, 'holds members without the holder info that --shared ' ..
    'runs keep in ' .. holders)
end

-- Whether this node reaches both keys of the queue: a waiter is queued, and the queue read,
-- only where both are.
local function queue_here(queue, expiry)
  return here(queue) and here(expiry)
end

-- The largest fence. Lua numbers are doubles, exact for integers up to 2^53 - 1: a counter
-- holds at most this, and no acquire goes past it. Fences are microseconds since 1970 (see
-- next_fence), which reach it in the year 2255: a counter this high was written by
-- something else.
local FENCE_MAX = 9007199254740991

-- The fence counter's value (0 if none), or nil and an error reply. Anything but a decimal
-- integer up to FENCE_MAX is refused before any write.
local function last_fence(lock, fence_key)
  local last = redis.pcall('GET', fence_key)
  if type(last) == 'table' then
    local k = type_here(fence_key)
    if k == 'string' then
      -- Not a type error (no permission for GET?): stop as redis.call would.
      redis.call('GET', fence_key)
    end
    return nil, not_a_lock(lock, fence_key, 'holds ' .. kind_words(k) ..
      ', where redlock-run keeps a fence (a decimal integer)')
  end
  if not last then
    return 0
  end
  if not string.match(last, '^%d+$') or #last > 16 or tonumber(last) > FENCE_MAX then
    return nil, not_a_lock(lock, fence_key,
      'holds no fence (a decimal integer up to 2^53 - 1)')
  end
  return tonumber(last)
end

-- The server's clock, in microseconds and in milliseconds.
local function server_now()
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return now_us, math.floor(now_us / 1000)
end

-- The next fence: one more than the last, and never behind the server clock in
-- microseconds, so that it keeps growing even after the counter itself was lost (a restart
-- without persistence, a failover to a replica that missed it), as long as the server's
-- clock was not stepped back by more than the time since the previous acquisition. Past
-- FENCE_MAX there is none: nil and an error reply, before any write (the lock cannot be
-- taken until the counter expires or is deleted, and the resource's fence reset with it).
local function next_fence(fence_key, last, now_us)
  local next = math.max(last + 1, now_us)
  if next > FENCE_MAX then
    return nil, redis.error_reply('ERR the fence counter ' .. fence_key ..
      ' is at the end of its range (2^53 - 1): no larger fence can be given. Reset the ' ..
      'fence of the resource it protects, then delete the counter')
  end
  return string.format('%.0f', next)
end

-- Waiters that stopped asking (killed, gone, given up) leave the queue by server time. So do
-- members without an expiry record (one lost to an eviction or a DEL), which would never
-- leave: among the first `heads` places (those that decide who may take the lock), any such
-- member is removed.
local function reap_waiters(queue, expiry, now_ms, heads)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms, 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('ZREM', queue, unpack(gone))
    redis.call('ZREM', expiry, unpack(gone))
  end
  for _ = 1, 100 do
    local lost = {}
    for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, heads - 1)) do
      if not redis.call('ZSCORE', expiry, waiter) then
        lost[#lost + 1] = waiter
      end
    end
    if #lost == 0 then
      return
    end
    redis.call('ZREM', queue, unpack(lost))
  end
end

-- Join the queue (arrival by server time), or keep our place in it for `keep` more ms;
-- returns our place (1 = next). Both keys live as long as the longest-kept place. The caller
-- checked that this node reaches both (queue_here).
local function keep_place(queue, expiry, waiter, now_us, now_ms, keep)
  -- Arrival scores only grow: after the server's clock stepped back, a newcomer still goes
  -- behind everyone queued before it.
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
  local arrival = math.max(now_us, last and tonumber(last) + 1 or 0)
  redis.call('ZADD', queue, 'NX', string.format('%.0f', arrival), waiter)
  redis.call('ZADD', expiry, string.format('%.0f', now_ms + keep), waiter)
  local longest = redis.call('ZRANGE', expiry, -1, -1, 'WITHSCORES')
  local left = math.max(tonumber(longest[2]) - now_ms, 1)
  redis.call('PEXPIRE', queue, left)
  redis.call('PEXPIRE', expiry, left)
  return redis.call('ZRANK', queue, waiter) + 1
end

-- Leave the queue (the waiter got the lock).
local function leave_queue(queue, expiry, waiter)
  for _, key in ipairs({queue, expiry}) do
    if here(key) then
      redis.call('ZREM', key, waiter)
    end
  end
end

-- The pause in force on the pause key `pause` (`pause`, a hash), as {reason, host, until_ms},
-- or nil: none named (''), none there, or not a pause (another type, no end). It decides only
-- where the lock or a share is free: a holder is never touched by a pause.
local function pause_in_force(pause)
  if pause == '' or not here(pause) or type_here(pause) ~= 'hash' then
    return nil
  end
  local p = redis.call('HMGET', pause, 'reason', 'host', 'until_ms')
  if not p[3] then
    return nil
  end
  return {p[1] or '', p[2] or '', p[3]}
end
