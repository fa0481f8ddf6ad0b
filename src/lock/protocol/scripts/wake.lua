-- Prepended to the scripts that free the lock (release, cancel, leave), after reach.lua.

-- Whom the lock's channel names when the lock is freed (lock/mod.rs, ReleaseNotices): the
-- first waiter in the queue whose place has not expired, the only one that may take the lock
-- now; '1' (every waiter) when nobody queued, or when the queue cannot be read here (out of
-- reach during a migration, or holding something else). Waking the head alone spares the
-- other waiters an attempt that can only find the lock busy, and the head a server busy with
-- theirs. A head that is gone without leaving is woken for nothing: the others find the lock
-- at their next poll, once its place has expired.
local function whom_to_wake(queue, expiry)
  if type_here(queue) ~= 'zset' or type_here(expiry) ~= 'zset' then
    return '1'
  end
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, 9)) do
    local kept_until = redis.call('ZSCORE', expiry, waiter)
    if kept_until and tonumber(kept_until) > now_ms then
      -- A shared waiter (--shared) goes in together with the shared waiters right behind
      -- it: wake them all.
      if string.sub(waiter, 1, 7) == 'shared:' then
        return '1'
      end
      return waiter
    end
  end
  return '1'
end
